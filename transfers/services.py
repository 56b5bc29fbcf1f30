"""Writes of the transfer outbox: creating each payout's transfer, sending it, recording
the provider's answer (docs/transfers.md).

Sending one transfer (``transfer_send``) is three steps, each its own short transaction
or none, so no database transaction is held open across a network call:

1. Begin the attempt: under the sender's fence, take the row if it is still pending and
   due, count the attempt and push ``next_attempt_at`` past the request's timeout plus the
   backoff (a lease: if this worker dies, the transfer is due again after it).
2. Call the provider with the frozen request and the business-identity key; past the
   provider's key retention, look the transfer up instead of sending blind.
3. Record the answer under the fence: sent with the provider's id; stopped (and alerted)
   for a refusal no retry can fix; otherwise pending, tried again at ``next_attempt_at``
   with the same key. A run that lost its fence records nothing: the run that replaced it
   sends the same key and gets the provider's replay.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

import stripe
from django.conf import settings
from django.db import connection

from operations.alerts import problem_alert_now
from operations.monitoring import Problem
from outbox.errors import OutboxError
from outbox.selectors import outbox_due
from outbox.services import (
    ERROR_CHARS,
    Taken,
    outbox_attempts_begin,
    outbox_backoff,
    outbox_fenced,
    outbox_give_up,
    outbox_note_error,
    outbox_record_sent,
    outbox_release_waiting,
    outbox_retry,
)
from payouts.models import Payout
from scheduling.fencing import StaleFenceError
from scheduling.models import ProblemKind
from tiffin.money import minor_unit_exponent, to_minor_units
from transfers import provider, sql
from transfers.errors import InexactAmountError, TransferError
from transfers.models import SEND_FENCE_RESOURCE, SEND_TRANSFERS_JOB, Transfer, TransferStatus, transfer_identity
from transfers.provider import Outcome, ProviderTransfer

logger = logging.getLogger(__name__)


# --- Written with the payouts -----------------------------------------------------------


def transfers_create_for_payouts(*, restaurant_ids: Sequence[int], written_at: datetime) -> int:
    """Write the transfer of every payout with a positive net that the payout pass wrote
    at ``written_at`` for ``restaurant_ids``; return how many.

    Called inside the payout batch's transaction, so a payout never exists without its
    transfer, nor a transfer without its payout. The amount is converted to minor units
    exactly; a net that is not a whole number of them raises InexactAmountError, which
    rolls the batch back: a payout that cannot be paid as written is refused, not rounded.
    On PostgreSQL one INSERT ... SELECT writes the batch's transfers (transfers/sql.py), as
    one wrote its payouts; SQLite builds the same rows through the ORM.
    """
    if not restaurant_ids:
        return 0
    ids = sorted(set(restaurant_ids))
    currency = settings.PAYMENT_CURRENCY
    if connection.vendor != "postgresql":  # seam: SQLite has no arrays; the ORM builds the rows
        return _transfers_create_orm(restaurant_ids=ids, written_at=written_at, currency=currency)
    scale = 10 ** minor_unit_exponent(currency)
    inexact = sql.transfers_inexact_first(restaurant_ids=ids, written_at=written_at, scale=scale)
    if inexact is not None:
        restaurant_id, period_start, net = inexact
        _minor_units_exact(net, currency, restaurant_id=restaurant_id, period_start=period_start)
    return sql.transfers_insert_for_payouts(
        restaurant_ids=ids,
        written_at=written_at,
        scale=scale,
        currency=currency,
        pending=TransferStatus.PENDING,
        waiting=TransferStatus.WAITING_ACCOUNT,
    )


def _transfers_create_orm(*, restaurant_ids: list[int], written_at: datetime, currency: str) -> int:
    """``transfers_create_for_payouts`` for SQLite: the same rows, built in Python."""
    payouts = (
        Payout.objects.filter(restaurant_id__in=restaurant_ids, created_at=written_at, net__gt=0, transfer__isnull=True)
        .order_by("restaurant_id", "period_start")
        .values_list("id", "restaurant_id", "period_start", "net", "restaurant__provider_account")
    )
    rows = [
        _transfer_of(payout_id, restaurant_id, period_start, net, account, currency=currency, now=written_at)
        for payout_id, restaurant_id, period_start, net, account in payouts
    ]
    Transfer.objects.bulk_create(rows)
    return len(rows)


def _minor_units_exact(net: Decimal, currency: str, *, restaurant_id: int, period_start: datetime) -> int:
    """``net`` in minor units, or InexactAmountError naming the payout's identity."""
    try:
        return to_minor_units(net, currency)
    except ValueError as error:
        identity = transfer_identity(restaurant_id=restaurant_id, period_start=period_start)
        raise InexactAmountError(f"payout {identity}: {error}") from None


def _transfer_of(
    payout_id: int,
    restaurant_id: int,
    period_start: datetime,
    net: Decimal,
    account: str,
    *,
    currency: str,
    now: datetime,
) -> Transfer:
    identity = transfer_identity(restaurant_id=restaurant_id, period_start=period_start)
    amount = _minor_units_exact(net, currency, restaurant_id=restaurant_id, period_start=period_start)
    return Transfer(
        payout_id=payout_id,
        restaurant_id=restaurant_id,
        period_start=period_start,
        amount_minor=amount,
        currency=currency,
        destination=account,
        idempotency_key=identity,
        transfer_group=identity,
        status=TransferStatus.PENDING if account else TransferStatus.WAITING_ACCOUNT,
        next_attempt_at=now if account else None,
        created_at=now,
    )


def transfers_attach_accounts(*, now: datetime) -> int:
    """Freeze the destination of transfers that waited for their restaurant's provider
    account, now that it has one, and make them due. Safe: none of them was ever sent."""
    waiting = Transfer.objects.filter(status=TransferStatus.WAITING_ACCOUNT).exclude(restaurant__provider_account="")
    found = list(waiting.values_list("id", "restaurant__provider_account"))
    return outbox_release_waiting(
        Transfer, waiting=TransferStatus.WAITING_ACCOUNT, found=found, column="destination", now=now
    )


# --- Sending ----------------------------------------------------------------------------


class SendResult(enum.StrEnum):
    SENT = "sent"  # the provider holds it (created, replayed, or found by a lookup)
    RETRYING = "retrying"  # outcome unknown, or a lookup that cannot decide yet
    STOPPED = "stopped"  # refused for good: a person decides
    HELD = "held"  # more than one transfer can carry: a person pays it another way
    NOT_DUE = "not_due"  # another sender took it, or it is no longer pending
    STALE = "stale"  # this run lost its fence: nothing recorded


@dataclass(frozen=True)
class SendProgress:
    batches_done: int
    sent: int
    retrying: int
    stopped: int
    held: int

    def __str__(self) -> str:
        done = f"{self.sent} sent, {self.retrying} retrying, {self.stopped} stopped, {self.held} held"
        return f"pass {self.batches_done}: {done}"


@dataclass(frozen=True)
class SendPassResult:
    attached: int
    counts: dict[str, int]


def transfer_backoff(*, attempt: int) -> timedelta:
    """The wait after attempt number ``attempt`` (1-based): base * 2^(attempt - 1), capped."""
    return outbox_backoff(
        attempt=attempt,
        base_seconds=settings.TRANSFERS_RETRY_BASE_SECONDS,
        max_seconds=settings.TRANSFERS_RETRY_MAX_SECONDS,
    )


# A transfer taken for one attempt (as the attempt updated it) and its previous attempt's time.
Attempt = Taken[Transfer]


class Answer(enum.Enum):
    """What step 3 writes for one attempt (``Reply``)."""

    SENT = "sent"  # the provider holds the frozen request: sent, with its id
    PENDING = "pending"  # outcome unknown: due again at the attempt's next_attempt_at
    STOP = "stop"  # refused for good: stopped and alerted
    HOLD = "hold"  # more than one transfer can carry: held and alerted
    RESEND = "resend"  # a lookup past the key retention found nothing: the key's window starts again


@dataclass(frozen=True)
class Reply:
    """The provider's answer to one attempt, as the write that records it (step 3)."""

    attempt: Attempt
    answer: Answer
    detail: str = ""
    provider_id: str = ""
    # A first attempt's lookup that could not answer: the attempt counts as not made, so
    # the next one looks the group up again (``_sent_before_the_ledger_knew``).
    reopen: bool = False


def transfer_attempt_begin(*, transfer_id: int, fence: int, job_run_id: int | None, now: datetime) -> Attempt | None:
    """Step 1 (module doc): take the transfer for one attempt, or None if it is not
    pending and due any more (another sender took it)."""
    attempts = transfers_attempts_begin(transfer_ids=[transfer_id], fence=fence, job_run_id=job_run_id, now=now)
    return attempts[0] if attempts else None


def transfers_attempts_begin(
    *, transfer_ids: Sequence[int], fence: int, job_run_id: int | None, now: datetime, queued: int = 0
) -> list[Attempt]:
    """Step 1 for several transfers in one fenced transaction: take each that is still
    pending and due (the others are skipped: another sender took them), in id order, and
    set ``first_attempt_at`` once (the provider's key retention runs from it).

    The lease is the request's timeout plus the backoff; ``queued`` more timeouts for an
    attempt that may wait behind that many requests of this sender before its own goes.
    """
    lease = timedelta(seconds=settings.PAYMENT_PROVIDER_TIMEOUT_SECONDS * (1 + queued))
    return outbox_attempts_begin(
        Transfer,
        ids=transfer_ids,
        fence_resource=SEND_FENCE_RESOURCE,
        fence=fence,
        job_run_id=job_run_id,
        now=now,
        lease=lease,
        backoff=lambda attempt: transfer_backoff(attempt=attempt),
        stamp_once=["first_attempt_at"],
    )


def transfer_send(
    *,
    transfer_id: int,
    fence: int,
    job_run_id: int | None,
    client: stripe.StripeClient,
    read_clock: Callable[[], datetime],
) -> SendResult:
    """Send one transfer (steps 1-3 of the module doc). ``read_clock`` is read when the
    attempt begins and when the answer comes: the request can take seconds."""
    try:
        attempt = transfer_attempt_begin(transfer_id=transfer_id, fence=fence, job_run_id=job_run_id, now=read_clock())
        if attempt is None:
            return SendResult.NOT_DUE
        reply = transfer_ask(attempt=attempt, client=client, read_clock=read_clock)
        return transfers_record(replies=[reply], fence=fence, job_run_id=job_run_id, now=read_clock())[0]
    except StaleFenceError:
        logger.warning(
            "transfer %s: this run lost its fence; its answer is left to the run that replaced it", transfer_id
        )
        return SendResult.STALE


def transfer_ask(*, attempt: Attempt, client: stripe.StripeClient, read_clock: Callable[[], datetime]) -> Reply:
    """Step 2: the provider call for one attempt, and what to record; no database access
    (the sender's threads run it)."""
    transfer = attempt.row
    if _key_may_be_forgotten(transfer, now=transfer.last_attempt_at or read_clock()):
        return _look_up(attempt=attempt, client=client, read_clock=read_clock)
    if _sent_before_the_ledger_knew(transfer):
        try:
            held = provider.transfers_find(client=client, transfer_group=transfer.transfer_group)
        except stripe.StripeError as error:
            return replace(_reply_to_error(attempt, error, looking_up=True), reopen=True)
        if len(held) == 1:
            return _reply_to_found(attempt, held[0])
        if held:
            ids = ", ".join(item.id for item in held)
            return Reply(attempt, Answer.STOP, f"lookup found {len(held)} transfers for one payout: {ids}")
    try:
        found = provider.transfer_create(
            client=client, params=transfer.request_params(), idempotency_key=transfer.idempotency_key
        )
    except stripe.StripeError as error:
        return _reply_to_error(attempt, error)
    return _reply_to_found(attempt, found)


def _key_may_be_forgotten(transfer: Transfer, *, now: datetime) -> bool:
    retention = timedelta(seconds=settings.PAYMENT_PROVIDER_KEY_RETENTION_SECONDS)
    return transfer.first_attempt_at is not None and transfer.first_attempt_at <= now - retention


# The shortest local week (a spring-forward week): a payout's week never ends sooner after
# its start, and no payout, so no transfer, is written before its week ends.
SHORTEST_WEEK = timedelta(hours=167)


def _sent_before_the_ledger_knew(transfer: Transfer) -> bool:
    """Whether this is the ledger's first attempt (``first_attempt_at`` set by this very
    attempt) at a transfer whose week ended longer ago than the provider's key retention.

    The ledger may have forgotten an earlier send: an asynchronous failover loses the
    payout, its transfer row and the record of its sending, and the catch-up writes them
    again (docs/failover.md). The provider then holds a transfer the new row knows nothing
    of. Within the retention the same key replays it; past it the key may be forgotten and
    a blind send would pay the week twice, so the first attempt looks the group up: one
    transfer is recorded as sent; none, and the key is sent (the provider held nothing, and
    any request still in flight carries the same key, so the provider replays one to the
    other). An earlier send cannot predate the week's end, so a transfer first tried within
    the retention after it (every on-time payout) costs no lookup."""
    retention = timedelta(seconds=settings.PAYMENT_PROVIDER_KEY_RETENTION_SECONDS)
    opened = transfer.first_attempt_at
    return (
        opened is not None
        and opened == transfer.last_attempt_at
        and transfer.period_start + SHORTEST_WEEK <= opened - retention
    )


def _look_up(*, attempt: Attempt, client: stripe.StripeClient, read_clock: Callable[[], datetime]) -> Reply:
    """Past the key retention a resend could create a second transfer, so ask the
    provider what it holds for the transfer group, and record that:

    1. one transfer matching the frozen request: sent, with its id;
    2. more than one, or one that differs: stopped and alerted (reconciliation's case);
    3. none, and our last attempt is older than TRANSFERS_LOOKUP_QUIET_SECONDS (no
       request of ours can still be in flight): the key's window starts again, and the
       next attempt sends the same key, which now creates the one transfer;
    4. none, but an attempt is recent: wait (pending, backoff) and look again.
    """
    transfer = attempt.row
    try:
        found = provider.transfers_find(client=client, transfer_group=transfer.transfer_group)
    except stripe.StripeError as error:
        return _reply_to_error(attempt, error, looking_up=True)
    if len(found) == 1:
        return _reply_to_found(attempt, found[0])
    if found:
        ids = ", ".join(item.id for item in found)
        return Reply(attempt, Answer.STOP, f"lookup found {len(found)} transfers for one payout: {ids}")
    quiet = timedelta(seconds=settings.TRANSFERS_LOOKUP_QUIET_SECONDS)
    if attempt.previous_attempt_at is not None and attempt.previous_attempt_at > read_clock() - quiet:
        note = "lookup past the key retention found no transfer; an attempt is too recent to be sure none is in flight"
        return Reply(attempt, Answer.PENDING, note)
    return Reply(
        attempt, Answer.RESEND, "lookup past the key retention found no transfer: sending again with the same key"
    )


def _reply_to_found(attempt: Attempt, found: ProviderTransfer) -> Reply:
    """The provider holds ``found`` under this transfer's key or group: sent, if it is
    the frozen request; a different amount or destination is stopped and alerted."""
    transfer = attempt.row
    if (found.amount, found.currency, found.destination) != (
        transfer.amount_minor,
        transfer.currency,
        transfer.destination,
    ):
        detail = (
            f"the provider's {found.id} is {found.amount} {found.currency} to {found.destination!r}; "
            f"the ledger's request is {transfer.amount_minor} {transfer.currency} to {transfer.destination!r}"
        )
        return Reply(attempt, Answer.STOP, detail)
    return Reply(attempt, Answer.SENT, provider_id=found.id)


def _reply_to_error(attempt: Attempt, error: stripe.StripeError, *, looking_up: bool = False) -> Reply:
    status = error.http_status if error.http_status is not None else "no answer"
    detail = f"{'lookup: ' if looking_up else ''}{type(error).__name__} ({status}): {error.user_message or error}"
    outcome = provider.error_outcome(error)
    if outcome == Outcome.UNKNOWN or looking_up:
        return Reply(attempt, Answer.PENDING, detail)
    if outcome == Outcome.TOO_LARGE:
        transfer = attempt.row
        held = (
            f"{transfer.amount_minor} {transfer.currency} minor units is more than one transfer can carry "
            f"(the provider's answer: {detail}); pay it another way (docs/transfers.md)"
        )
        return Reply(attempt, Answer.HOLD, held)
    return Reply(attempt, Answer.STOP, detail)


def transfers_record(
    *, replies: Sequence[Reply], fence: int, job_run_id: int | None, now: datetime
) -> list[SendResult]:
    """Step 3 for one or more attempts, in one transaction guarded by the fence: every
    answer is recorded, or (StaleFenceError) none is. Each write is conditional on the row
    still being pending, so a row another sender already recorded is left as it is."""
    with outbox_fenced(fence_resource=SEND_FENCE_RESOURCE, fence=fence, job_run_id=job_run_id, now=now):
        sent = [
            (reply.attempt.row.id, {"provider_id": reply.provider_id})
            for reply in replies
            if reply.answer == Answer.SENT
        ]
        outbox_record_sent(Transfer, sent=sent, now=now)
        return [_record(reply, job_run_id=job_run_id, now=now) for reply in replies]


def _record(reply: Reply, *, job_run_id: int | None, now: datetime) -> SendResult:
    transfer = reply.attempt.row
    if reply.answer == Answer.SENT:
        return SendResult.SENT  # recorded by outbox_record_sent
    if reply.answer in (Answer.STOP, Answer.HOLD):
        # Refused for good: stop or hold (never re-sent, least of all with a new key) and alert.
        held = reply.answer == Answer.HOLD
        status = TransferStatus.HELD if held else TransferStatus.STOPPED
        if outbox_give_up(Transfer, row_id=transfer.id, detail=reply.detail, status=status):
            problem = transfer_problem(transfer=transfer, detail=reply.detail, run_id=job_run_id, state=status)
            problem_alert_now(problem=problem, now=now)
        return SendResult.HELD if held else SendResult.STOPPED
    if reply.answer == Answer.RESEND or reply.reopen:
        # The key's window starts again: at once after a lookup that found nothing (RESEND),
        # at the attempt's own next_attempt_at after a lookup that could not answer.
        due_again = {"next_attempt_at": now} if reply.answer == Answer.RESEND else {}
        Transfer.objects.filter(id=transfer.id, status=TransferStatus.PENDING, attempts=transfer.attempts).update(
            first_attempt_at=None, last_error=reply.detail[:ERROR_CHARS], **due_again
        )
    else:
        # Outcome unknown: it stays pending, due again at the next_attempt_at its attempt
        # set, and goes with the same key.
        outbox_note_error(Transfer, row_id=transfer.id, attempts=transfer.attempts, detail=reply.detail)
    return SendResult.RETRYING


def transfer_problem(*, transfer: Transfer, detail: str, run_id: int | None = None, state: str = "stopped") -> Problem:
    """A transfer not sent as a problem of the missed-run check: one key per transfer, so
    the alert sent when it stopped (or was held) is not repeated by the hourly invariant."""
    return Problem(
        ProblemKind.INVARIANT,
        SEND_TRANSFERS_JOB,
        transfer.period_start,
        f"transfer:{transfer.idempotency_key}",
        run_id,
        f"transfer {state}: {detail}",
    )


def transfers_send_due(
    *,
    fence: int,
    job_run_id: int | None,
    read_clock: Callable[[], datetime],
    concurrency: int,
    batch_size: int,
    on_batch: Callable[[SendProgress], None] | None = None,
    client: stripe.StripeClient | None = None,
) -> SendPassResult:
    """Send every due pending transfer, ``concurrency`` requests at a time, each at most
    once per call. ``on_batch`` hears after every ``batch_size`` answers recorded, and at
    the end (the job heartbeats, which raises if the run was lost). Stops taking
    transfers once the fence is found stale: the run that replaced this one owns the
    sending, and the answers still in flight are not recorded.

    The steps are those of ``transfer_send``, grouped so that one sender's transfers do
    not queue behind each other on the fence's row (every fenced transaction updates it):
    see ``_send_pooled_recording_in_batches``.
    """
    client = client or provider.provider_client()
    attached = transfers_attach_accounts(now=read_clock())
    counts = _send_pooled_recording_in_batches(
        fence=fence,
        job_run_id=job_run_id,
        read_clock=read_clock,
        concurrency=concurrency,
        batch_size=batch_size,
        on_batch=on_batch,
        client=client,
    )
    return SendPassResult(attached=attached, counts=dict(counts))


def _send_pooled_recording_in_batches(
    *,
    fence: int,
    job_run_id: int | None,
    read_clock: Callable[[], datetime],
    concurrency: int,
    batch_size: int,
    on_batch: Callable[[SendProgress], None] | None,
    client: stripe.StripeClient,
) -> Counter[str]:
    """``transfer_send`` for every due transfer, with its three steps grouped:

    - step 1 for several transfers in one fenced transaction, keeping fewer attempts
      waiting for a thread than there are threads (so an attempt waits behind at most one
      request: its lease counts one more timeout; a pool of one thread begins one
      attempt at a time);
    - step 2 on a pool of ``concurrency`` threads, each taking the next attempt as soon
      as its request is answered, with no database connection (``transfer_ask``);
    - step 3 in this thread: the answers of at least half the threads (or the last
      ones), and any that came in meanwhile, recorded in one fenced transaction
      (``transfers_record``); the slower the database, the larger the group.

    Only this thread writes, so the fence's row is never contended by this sender; the
    guarantees are ``transfer_send``'s: the same key on every attempt, the lease set
    before the request, and every answer recorded under the fence or not at all.
    """
    counts: Counter[str] = Counter()
    seen: set[int] = set()
    resent = 0  # due again at once (RESEND): seen, so not taken twice in this call
    recorded_since_progress = 0
    batches = 0
    taking = True
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="send-transfers")
    in_flight: set[Future[Reply]] = set()
    try:
        while True:
            # Keep up to ``concurrency - 1`` attempts waiting behind the running requests.
            if taking and len(in_flight) < 2 * concurrency - 1:
                want = 2 * concurrency - 1 - len(in_flight)
                ids = [i for i in outbox_due(Transfer, now=read_clock(), limit=want + resent) if i not in seen][:want]
                seen.update(ids)
                if not ids:
                    taking = False
                else:
                    try:
                        attempts = transfers_attempts_begin(
                            transfer_ids=ids, fence=fence, job_run_id=job_run_id, now=read_clock(), queued=1
                        )
                    except StaleFenceError:
                        counts[SendResult.STALE] += len(ids)
                        break
                    if len(attempts) < len(ids):
                        counts[SendResult.NOT_DUE] += len(ids) - len(attempts)
                    in_flight |= {
                        pool.submit(transfer_ask, attempt=attempt, client=client, read_clock=read_clock)
                        for attempt in attempts
                    }
            if not in_flight:
                if taking:
                    continue  # every id taken was taken by another sender: look again
                break
            # Half the threads' answers (or the last ones) per record, fewer transactions;
            # more come in while these are recorded.
            done: set[Future[Reply]] = set()
            while in_flight and len(done) < max(1, concurrency // 2):
                finished, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                done |= finished
            replies = [future.result() for future in done]
            try:
                results = transfers_record(replies=replies, fence=fence, job_run_id=job_run_id, now=read_clock())
            except StaleFenceError:
                counts[SendResult.STALE] += len(replies) + len(in_flight)
                break
            counts.update(str(result) for result in results)
            resent += sum(1 for reply in replies if reply.answer == Answer.RESEND)
            recorded_since_progress += len(replies)
            if on_batch is not None and recorded_since_progress >= batch_size:
                batches += 1
                recorded_since_progress = 0
                on_batch(_progress(batches, counts))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if on_batch is not None and recorded_since_progress:
        on_batch(_progress(batches + 1, counts))
    if SendResult.STALE in counts:
        logger.warning("this run lost its fence; the answers it did not record are left to the run that replaced it")
    return counts


def _progress(batches: int, counts: Counter[str]) -> SendProgress:
    return SendProgress(
        batches,
        counts[SendResult.SENT],
        counts[SendResult.RETRYING],
        counts[SendResult.STOPPED],
        counts[SendResult.HELD],
    )


# --- A person's decision ------------------------------------------------------------------


def transfer_retry(*, transfer_id: int, now: datetime) -> Transfer:
    """Put a stopped transfer back to pending, due now, with the SAME key and the same
    frozen request (a new key could pay twice). For a person who fixed the cause at the
    provider (an account enabled); an idempotency error repeats until the provider's
    record and the request agree, which reconciliation shows."""
    try:
        return outbox_retry(Transfer, row_id=transfer_id, now=now)
    except OutboxError as error:
        raise TransferError(str(error)) from None
