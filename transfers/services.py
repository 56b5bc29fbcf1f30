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
import functools
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import stripe
from django.conf import settings
from django.db import connection, connections, transaction

from payouts.models import Payout
from scheduling.alerts import problem_alert_now
from scheduling.fencing import StaleFenceError, fence_check
from scheduling.models import JobRun, ProblemKind
from scheduling.monitoring import Problem
from scheduling.registry import registry
from scheduling.services import SchedulingError, job_latest_tick, run_claim_manual
from tiffin.money import minor_unit_exponent, to_minor_units
from transfers import provider, sql
from transfers.errors import InexactAmountError, TransferError
from transfers.models import SEND_FENCE_RESOURCE, SEND_TRANSFERS_JOB, Transfer, TransferStatus, transfer_identity
from transfers.provider import Outcome, ProviderTransfer
from transfers.selectors import transfers_due

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
    if connection.vendor != "postgresql":
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
    attached = 0
    waiting = Transfer.objects.filter(status=TransferStatus.WAITING_ACCOUNT).exclude(restaurant__provider_account="")
    for transfer_id, account in waiting.values_list("id", "restaurant__provider_account"):
        attached += Transfer.objects.filter(id=transfer_id, status=TransferStatus.WAITING_ACCOUNT, attempts=0).update(
            destination=account, status=TransferStatus.PENDING, next_attempt_at=now
        )
    return attached


def transfers_send_soon(*, now: datetime) -> JobRun | None:
    """Claim (and enqueue) the current minute's ``send-transfers`` tick, so the transfers a
    payout run wrote leave now rather than at the next tick. None if that tick was already
    claimed (its run, or the next minute's, sends them)."""
    if not registry.has(SEND_TRANSFERS_JOB):
        return None  # a process declaring only some jobs (the engine's tests)
    try:
        tick = job_latest_tick(job_name=SEND_TRANSFERS_JOB, at=now)
        return run_claim_manual(job_name=SEND_TRANSFERS_JOB, scheduled_for=tick, now=now)
    except SchedulingError:
        logger.exception(
            "could not enqueue %s after the payout run; the minute's cron tick sends them", SEND_TRANSFERS_JOB
        )
        return None


# --- Sending ----------------------------------------------------------------------------


class SendResult(enum.StrEnum):
    SENT = "sent"  # the provider holds it (created, replayed, or found by a lookup)
    RETRYING = "retrying"  # outcome unknown, or a lookup that cannot decide yet
    STOPPED = "stopped"  # refused for good: a person decides
    NOT_DUE = "not_due"  # another sender took it, or it is no longer pending
    STALE = "stale"  # this run lost its fence: nothing recorded


@dataclass(frozen=True)
class SendProgress:
    batches_done: int
    sent: int
    retrying: int
    stopped: int


@dataclass(frozen=True)
class SendPassResult:
    attached: int
    counts: dict[str, int]


def transfer_backoff(*, attempt: int) -> timedelta:
    """The wait after attempt number ``attempt`` (1-based): base * 2^(attempt - 1), capped."""
    seconds = settings.TRANSFERS_RETRY_BASE_SECONDS * 2 ** max(attempt - 1, 0)
    return timedelta(seconds=min(seconds, settings.TRANSFERS_RETRY_MAX_SECONDS))


@dataclass(frozen=True)
class Attempt:
    transfer: Transfer  # as updated by the attempt
    previous_attempt_at: datetime | None


def transfer_attempt_begin(*, transfer_id: int, fence: int, job_run_id: int | None, now: datetime) -> Attempt | None:
    """Step 1 (module doc): take the transfer for one attempt, or None if it is not
    pending and due any more (another sender took it)."""
    with transaction.atomic():
        fence_check(SEND_FENCE_RESOURCE, fence, now=now, run_id=job_run_id)
        transfer = Transfer.objects.select_for_update().filter(id=transfer_id).first()
        if transfer is None or transfer.status != TransferStatus.PENDING:
            return None
        if transfer.next_attempt_at is None or transfer.next_attempt_at > now:
            return None
        previous = transfer.last_attempt_at
        transfer.attempts += 1
        transfer.first_attempt_at = transfer.first_attempt_at or now
        transfer.last_attempt_at = now
        lease = timedelta(seconds=settings.PAYMENT_PROVIDER_TIMEOUT_SECONDS)
        transfer.next_attempt_at = now + lease + transfer_backoff(attempt=transfer.attempts)
        transfer.save(update_fields=["attempts", "first_attempt_at", "last_attempt_at", "next_attempt_at"])
        return Attempt(transfer, previous)


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
        transfer = attempt.transfer
        if _key_may_be_forgotten(transfer, now=transfer.last_attempt_at or read_clock()):
            return _look_up(attempt=attempt, fence=fence, job_run_id=job_run_id, client=client, read_clock=read_clock)
        try:
            found = provider.transfer_create(
                client=client, params=transfer.request_params(), idempotency_key=transfer.idempotency_key
            )
        except stripe.StripeError as error:
            return _record_error(transfer, error, fence=fence, job_run_id=job_run_id, now=read_clock())
        return _record_found(transfer, found, fence=fence, job_run_id=job_run_id, now=read_clock())
    except StaleFenceError:
        logger.warning(
            "transfer %s: this run lost its fence; its answer is left to the run that replaced it", transfer_id
        )
        return SendResult.STALE


def _key_may_be_forgotten(transfer: Transfer, *, now: datetime) -> bool:
    retention = timedelta(seconds=settings.PAYMENT_PROVIDER_KEY_RETENTION_SECONDS)
    return transfer.first_attempt_at is not None and transfer.first_attempt_at <= now - retention


def _look_up(
    *,
    attempt: Attempt,
    fence: int,
    job_run_id: int | None,
    client: stripe.StripeClient,
    read_clock: Callable[[], datetime],
) -> SendResult:
    """Past the key retention a resend could create a second transfer, so ask the
    provider what it holds for the transfer group, and record that:

    1. one transfer matching the frozen request: sent, with its id;
    2. more than one, or one that differs: stopped and alerted (reconciliation's case);
    3. none, and our last attempt is older than TRANSFERS_LOOKUP_QUIET_SECONDS (no
       request of ours can still be in flight): the key's window starts again, and the
       next attempt sends the same key, which now creates the one transfer;
    4. none, but an attempt is recent: wait (pending, backoff) and look again.
    """
    transfer = attempt.transfer
    try:
        found = provider.transfers_find(client=client, transfer_group=transfer.transfer_group)
    except stripe.StripeError as error:
        return _record_error(transfer, error, fence=fence, job_run_id=job_run_id, now=read_clock(), looking_up=True)
    now = read_clock()
    if len(found) == 1:
        return _record_found(transfer, found[0], fence=fence, job_run_id=job_run_id, now=now)
    if found:
        ids = ", ".join(item.id for item in found)
        return _record_stop(
            transfer, f"lookup found {len(found)} transfers for one payout: {ids}", fence, job_run_id, now
        )
    quiet = timedelta(seconds=settings.TRANSFERS_LOOKUP_QUIET_SECONDS)
    if attempt.previous_attempt_at is not None and attempt.previous_attempt_at > now - quiet:
        note = "lookup past the key retention found no transfer; an attempt is too recent to be sure none is in flight"
        return _record_pending(transfer, note, fence=fence, job_run_id=job_run_id, now=now)
    with transaction.atomic():
        fence_check(SEND_FENCE_RESOURCE, fence, now=now, run_id=job_run_id)
        Transfer.objects.filter(id=transfer.id, status=TransferStatus.PENDING, attempts=transfer.attempts).update(
            first_attempt_at=None,
            next_attempt_at=now,
            last_error="lookup past the key retention found no transfer: sending again with the same key",
        )
    return SendResult.RETRYING


def _record_found(
    transfer: Transfer, found: ProviderTransfer, *, fence: int, job_run_id: int | None, now: datetime
) -> SendResult:
    """The provider holds ``found`` under this transfer's key or group: sent, if it is
    the frozen request; a different amount or destination is stopped and alerted."""
    if (found.amount, found.currency, found.destination) != (
        transfer.amount_minor,
        transfer.currency,
        transfer.destination,
    ):
        detail = (
            f"the provider's {found.id} is {found.amount} {found.currency} to {found.destination!r}; "
            f"the ledger's request is {transfer.amount_minor} {transfer.currency} to {transfer.destination!r}"
        )
        return _record_stop(transfer, detail, fence, job_run_id, now)
    with transaction.atomic():
        fence_check(SEND_FENCE_RESOURCE, fence, now=now, run_id=job_run_id)
        Transfer.objects.filter(id=transfer.id, status=TransferStatus.PENDING).update(
            status=TransferStatus.SENT, provider_id=found.id, sent_at=now, next_attempt_at=None, last_error=""
        )
    return SendResult.SENT


def _record_error(
    transfer: Transfer,
    error: stripe.StripeError,
    *,
    fence: int,
    job_run_id: int | None,
    now: datetime,
    looking_up: bool = False,
) -> SendResult:
    status = error.http_status if error.http_status is not None else "no answer"
    detail = f"{'lookup: ' if looking_up else ''}{type(error).__name__} ({status}): {error.user_message or error}"
    outcome = provider.error_outcome(error)
    if outcome == Outcome.UNKNOWN or looking_up:
        return _record_pending(transfer, detail, fence=fence, job_run_id=job_run_id, now=now)
    return _record_stop(transfer, detail, fence, job_run_id, now)


def _record_pending(
    transfer: Transfer, detail: str, *, fence: int, job_run_id: int | None, now: datetime
) -> SendResult:
    """Outcome unknown: keep it pending; it is due again at the ``next_attempt_at`` its
    attempt set, and goes with the same key."""
    with transaction.atomic():
        fence_check(SEND_FENCE_RESOURCE, fence, now=now, run_id=job_run_id)
        Transfer.objects.filter(id=transfer.id, status=TransferStatus.PENDING, attempts=transfer.attempts).update(
            last_error=detail[:2000]
        )
    return SendResult.RETRYING


def _record_stop(transfer: Transfer, detail: str, fence: int, job_run_id: int | None, now: datetime) -> SendResult:
    """Refused for good: stop (never re-sent, least of all with a new key) and alert."""
    with transaction.atomic():
        fence_check(SEND_FENCE_RESOURCE, fence, now=now, run_id=job_run_id)
        changed = Transfer.objects.filter(id=transfer.id, status=TransferStatus.PENDING).update(
            status=TransferStatus.STOPPED, next_attempt_at=None, last_error=detail[:2000]
        )
        if changed:
            problem_alert_now(problem=transfer_problem(transfer=transfer, detail=detail, run_id=job_run_id), now=now)
    return SendResult.STOPPED


def transfer_problem(*, transfer: Transfer, detail: str, run_id: int | None = None, stopped: bool = True) -> Problem:
    """A transfer not sent as a problem of the missed-run check: one key per transfer, so
    the alert sent when it stopped is not repeated by the hourly invariant."""
    return Problem(
        ProblemKind.INVARIANT,
        SEND_TRANSFERS_JOB,
        transfer.period_start,
        f"transfer:{transfer.idempotency_key}",
        run_id,
        f"transfer {'stopped' if stopped else 'unsent'}: {detail}",
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
    """Send every due pending transfer, ``concurrency`` at a time, ``batch_size`` per pass,
    each at most once per call. ``on_batch`` hears after each pass (the job heartbeats,
    which raises if the run was lost). Stops at the first pass in which the fence was
    found stale: the run that replaced this one owns the sending.
    """
    client = client or provider.provider_client()
    send = functools.partial(transfer_send, fence=fence, job_run_id=job_run_id, client=client, read_clock=read_clock)
    attached = transfers_attach_accounts(now=read_clock())
    counts: Counter[str] = Counter()
    seen: set[int] = set()
    batches = 0
    while True:
        ids = [i for i in transfers_due(now=read_clock(), limit=batch_size) if i not in seen]
        if not ids:
            break
        seen.update(ids)
        results = _each_in_threads(ids, send=send, concurrency=concurrency)
        counts.update(str(result) for result in results)
        batches += 1
        if on_batch is not None:
            sent, retrying, stopped = (counts[SendResult.SENT], counts[SendResult.RETRYING], counts[SendResult.STOPPED])
            on_batch(SendProgress(batches, sent, retrying, stopped))
        if SendResult.STALE in results:
            break
    return SendPassResult(attached=attached, counts=dict(counts))


def _each_in_threads(ids: list[int], *, send: Callable[..., SendResult], concurrency: int) -> list[SendResult]:
    """``send(transfer_id=...)`` for every id, on ``concurrency`` threads that share the
    list; re-raise the first error any of them met. Each thread keeps one database
    connection for the pass and closes it at the end (Django opens one per thread)."""
    pending = deque(ids)
    results: list[SendResult] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work() -> None:
        try:
            while True:
                with lock:
                    if not pending or errors:
                        return
                    transfer_id = pending.popleft()
                result = send(transfer_id=transfer_id)
                with lock:
                    results.append(result)
        except BaseException as error:  # handed to the caller's thread below
            with lock:
                errors.append(error)
        finally:
            connections.close_all()  # this thread's connections only

    threads = [threading.Thread(target=work, name="send-transfers") for _ in range(min(concurrency, len(ids)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


# --- A person's decision ------------------------------------------------------------------


def transfer_retry(*, transfer_id: int, now: datetime) -> Transfer:
    """Put a stopped transfer back to pending, due now, with the SAME key and the same
    frozen request (a new key could pay twice). For a person who fixed the cause at the
    provider (an account enabled); an idempotency error repeats until the provider's
    record and the request agree, which reconciliation shows."""
    with transaction.atomic():
        transfer = Transfer.objects.select_for_update().filter(id=transfer_id).first()
        if transfer is None:
            raise TransferError(f"no transfer with id {transfer_id}")
        if transfer.status != TransferStatus.STOPPED:
            raise TransferError(f"{transfer} is {transfer.status}, not stopped; only a stopped transfer is retried")
        transfer.status = TransferStatus.PENDING
        transfer.next_attempt_at = now
        transfer.last_error = f"retried by hand at {now:%Y-%m-%d %H:%M:%S} UTC after: {transfer.last_error}"[:2000]
        transfer.save(update_fields=["status", "next_attempt_at", "last_error"])
        return transfer
