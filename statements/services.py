"""Writes of the statement outbox: writing each payout's statement, mailing it, recording
that the mail server took it (docs/statements.md).

Mailing one statement (``statement_send``) is three steps, none holding a database
transaction open across the SMTP conversation:

1. Begin the attempt: under the sender's fence, take the row if it is still pending and
   due, count the attempt and push ``next_attempt_at`` past the conversation's timeouts
   plus the backoff (a lease: if this worker dies, the statement is due again after it).
2. Mail the frozen recipient, subject and body over SMTP with the frozen Message-ID, in
   an SMTP session of its own (a broken session never carries over to the next one).
3. Record ``sent`` under the fence, in its own transaction. On an SMTP or socket error,
   record the error and leave it pending: it goes again at ``next_attempt_at``, with the
   same Message-ID. A run that lost its fence records nothing; the statement goes again.

SMTP has no idempotency key, so the promise is at least once: an error after the server
accepted the message (its reply lost, the worker killed before step 3) mails it again,
and the receiver can drop the copy by its Message-ID.
"""

from __future__ import annotations

import enum
import functools
import logging
import smtplib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import connection, transaction

from operations.alerts import problem_alert_now
from operations.monitoring import Problem
from orders.models import Restaurant
from outbox.errors import OutboxError
from outbox.selectors import outbox_due
from outbox.services import (
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
from statements import sql
from statements.errors import StatementError
from statements.models import (
    SEND_FENCE_RESOURCE,
    SEND_STATEMENTS_JOB,
    Statement,
    StatementStatus,
    statement_message_id,
)
from statements.selectors import statements_waiting_with_recipient
from tiffin.money import money_text

logger = logging.getLogger(__name__)

# The SMTP steps one send may wait on, each bounded by EMAIL_TIMEOUT: connect and greeting,
# EHLO, MAIL, RCPT, DATA, the end of the data. The lease of an attempt covers them all.
_SMTP_STEPS = 6


# --- Written with the payouts -----------------------------------------------------------


def statements_create_for_payouts(*, restaurant_ids: Sequence[int], written_at: datetime) -> int:
    """Write the statement of every payout the payout pass wrote at ``written_at`` for
    ``restaurant_ids``; return how many.

    Called inside the payout batch's transaction, so a payout never exists without its
    statement, nor a statement without its payout. Every payout gets one, a week with no
    orders too (docs/statements.md says why). The email is rendered once, from
    statements/statement_body.txt: on PostgreSQL by the one INSERT ... SELECT that writes
    the batch's rows (statements/sql.py), as the transfers are written; on SQLite here
    (``statement_body``), one query reading the payouts and the ORM's bulk INSERT.
    """
    if not restaurant_ids:
        return 0
    ids = sorted(set(restaurant_ids))
    template = statement_template()
    domain = settings.STATEMENTS_MESSAGE_ID_DOMAIN
    if connection.vendor == "postgresql":  # seam: SQLite renders in Python (below)
        return sql.statements_insert_for_payouts(
            restaurant_ids=ids,
            written_at=written_at,
            template=template,
            domain=domain,
            pending=StatementStatus.PENDING,
            waiting=StatementStatus.WAITING_RECIPIENT,
        )
    payouts = (
        Payout.objects.filter(restaurant_id__in=ids, created_at=written_at, statement__isnull=True)
        .order_by("restaurant_id", "period_start")
        .values_list(*_PAYOUT_FIELDS, "restaurant__name", "restaurant__timezone", "restaurant__statement_email")
    )
    rows = [
        _statement_of(
            StatementPayout(*values[: len(_PAYOUT_FIELDS)]),
            *values[len(_PAYOUT_FIELDS) :],
            template=template,
            domain=domain,
        )
        for values in payouts
    ]
    Statement.objects.bulk_create(_statement_model(row, now=written_at) for row in rows)
    return len(rows)


_PAYOUT_FIELDS = (
    "id",
    "restaurant_id",
    "week_start_local",
    "period_start",
    "period_end",
    "order_count",
    "gross",
    "commission",
    "commission_rate",
    "net",
)


@dataclass(frozen=True)
class StatementPayout:
    """The columns of a payout its statement shows (``_PAYOUT_FIELDS``, in order)."""

    id: int
    restaurant_id: int
    week_start_local: date
    period_start: datetime
    period_end: datetime
    order_count: int
    gross: Decimal
    commission: Decimal
    commission_rate: Decimal
    net: Decimal


def _statement_of(
    payout: StatementPayout, name: str, zone: str, recipient: str, *, template: str, domain: str
) -> sql.NewStatement:
    message_id = statement_message_id(
        restaurant_id=payout.restaurant_id, period_start=payout.period_start, domain=domain
    )
    return sql.NewStatement(
        payout_id=payout.id,
        restaurant_id=payout.restaurant_id,
        period_start=payout.period_start,
        recipient=recipient,
        subject=f"{name}: Tiffin statement for the week of {payout.week_start_local:%d %b %Y}",
        body=statement_body(payout=payout, restaurant=name, zone=zone, message_id=message_id, template=template),
        message_id=message_id,
    )


def _statement_model(row: sql.NewStatement, *, now: datetime) -> Statement:
    """``row`` as a model to save (SQLite): pending if it has a recipient, else waiting."""
    return Statement(
        payout_id=row.payout_id,
        restaurant_id=row.restaurant_id,
        period_start=row.period_start,
        recipient=row.recipient,
        subject=row.subject,
        body=row.body,
        message_id=row.message_id,
        status=StatementStatus.PENDING if row.recipient else StatementStatus.WAITING_RECIPIENT,
        next_attempt_at=now if row.recipient else None,
        created_at=now,
    )


@functools.cache
def statement_template() -> str:
    """The body's template, statements/statement_body.txt: plain text with ``{name}``
    fields for ``str.format_map``, read once per process. Not a Django template: the payout
    pass renders thousands at a time, inside its transaction (docs/statements.md)."""
    return (Path(__file__).parent / "statement_body.txt").read_text(encoding="utf-8")


def statement_body(*, payout: StatementPayout, restaurant: str, zone: str, message_id: str, template: str) -> str:
    """The plain-text body (``statement_template``): amounts with thousands separators and
    two decimals, exactly as the ledger holds them (no rounding happens here)."""
    text = template.format_map(
        {
            "restaurant": restaurant,
            "week": f"{payout.week_start_local:%d %B %Y}",
            "zone": zone,
            "order_count": f"{payout.order_count:,}",
            "gross": money_text(payout.gross),
            "commission": money_text(payout.commission),
            "rate": f"{payout.commission_rate * 100:.2f} %",
            "net": money_text(payout.net),
            "period_start": f"{payout.period_start:%Y-%m-%d %H:%M}",
            "period_end": f"{payout.period_end:%Y-%m-%d %H:%M}",
            "message_id": message_id,
        }
    )
    return text.strip() + "\n"


def statements_attach_recipients(*, now: datetime) -> int:
    """Freeze the recipient of statements that waited for their restaurant's statement
    email, now that it has one, and make them due. Safe: none of them was ever sent."""
    waiting = StatementStatus.WAITING_RECIPIENT
    found = statements_waiting_with_recipient()
    return outbox_release_waiting(Statement, waiting=waiting, found=found, column="recipient", now=now)


# --- Sending ----------------------------------------------------------------------------


class SendResult(enum.StrEnum):
    SENT = "sent"  # the mail server accepted it, and that is recorded
    RETRYING = "retrying"  # an SMTP or socket error: pending, due again after the backoff
    STOPPED = "stopped"  # refused for good (a 5xx): a person decides
    NOT_DUE = "not_due"  # another sender took it, or it is no longer pending
    STALE = "stale"  # this run lost its fence: nothing recorded (it will be mailed again)


@dataclass(frozen=True)
class SendProgress:
    batches_done: int
    sent: int
    retrying: int
    stopped: int

    def __str__(self) -> str:
        return f"pass {self.batches_done}: {self.sent} sent, {self.retrying} retrying, {self.stopped} stopped"


def statement_backoff(*, attempt: int) -> timedelta:
    """The wait after attempt number ``attempt`` (1-based): base * 2^(attempt - 1), capped."""
    return outbox_backoff(
        attempt=attempt,
        base_seconds=settings.STATEMENTS_RETRY_BASE_SECONDS,
        max_seconds=settings.STATEMENTS_RETRY_MAX_SECONDS,
    )


def statement_attempt_begin(
    *, statement_id: int, fence: int, job_run_id: int | None, now: datetime
) -> Statement | None:
    """Step 1 (module doc): take the statement for one attempt, or None if it is not
    pending and due any more (another sender took it)."""
    taken = outbox_attempts_begin(
        Statement,
        ids=[statement_id],
        fence_resource=SEND_FENCE_RESOURCE,
        fence=fence,
        job_run_id=job_run_id,
        now=now,
        lease=timedelta(seconds=settings.EMAIL_TIMEOUT * _SMTP_STEPS),
        backoff=lambda attempt: statement_backoff(attempt=attempt),
    )
    return taken[0].row if taken else None


def statement_mail(*, statement: Statement) -> None:
    """Step 2: one SMTP session that mails the frozen message with its Message-ID; raises
    OSError (smtplib's errors are OSErrors) when the server did not say it took it.

    Always the STATEMENTS_EMAIL_BACKEND (SMTP), never EMAIL_BACKEND: the promise is about
    a real mail server, and the alert mails' backend may be the console's.
    """
    connection = get_connection(settings.STATEMENTS_EMAIL_BACKEND, fail_silently=False)
    message = EmailMessage(
        subject=statement.subject,
        body=statement.body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[statement.recipient],
        headers={"Message-ID": statement.message_id},
        connection=connection,
    )
    if message.send() != 1:
        raise OSError(f"the mail backend reported {statement} as not sent")


def statement_send(
    *, statement_id: int, fence: int, job_run_id: int | None, read_clock: Callable[[], datetime]
) -> SendResult:
    """Mail one statement (steps 1-3 of the module doc). ``read_clock`` is read when the
    attempt begins and when the answer comes: the SMTP conversation can take seconds."""
    try:
        statement = statement_attempt_begin(
            statement_id=statement_id, fence=fence, job_run_id=job_run_id, now=read_clock()
        )
        if statement is None:
            return SendResult.NOT_DUE
        try:
            statement_mail(statement=statement)
        except OSError as error:
            return _record_error(statement, error, fence=fence, job_run_id=job_run_id, now=read_clock())
        return statement_record_sent(statement, fence=fence, job_run_id=job_run_id, now=read_clock())
    except StaleFenceError:
        logger.warning("statement %s: this run lost its fence; the run that replaced it mails it", statement_id)
        return SendResult.STALE


def statement_record_sent(statement: Statement, *, fence: int, job_run_id: int | None, now: datetime) -> SendResult:
    """Step 3: the server took it. Under the fence, in its own transaction."""
    with outbox_fenced(fence_resource=SEND_FENCE_RESOURCE, fence=fence, job_run_id=job_run_id, now=now):
        outbox_record_sent(Statement, sent=[(statement.pk, {})], now=now)
    return SendResult.SENT


def refused_for_good(error: OSError) -> bool:
    """Whether the mail server refused the message for good: a 5xx reply (RFC 5321,
    4.2.1) to its recipient or to its content. The analogue of a provider refusing a
    transfer's request: no retry fixes it. Every other error (a 4xx, a dropped or refused
    connection, a timeout) may be the server's passing state, and so are a 5xx to our
    credentials or our sender address, which fixing the configuration cures: retried, as
    the transfers retry a refused API key."""
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in error.recipients.values()]
        return bool(codes) and all(500 <= code < 600 for code in codes)
    return isinstance(error, smtplib.SMTPDataError) and 500 <= error.smtp_code < 600


def _record_error(
    statement: Statement, error: OSError, *, fence: int, job_run_id: int | None, now: datetime
) -> SendResult:
    """Refused for good (``refused_for_good``): stopped and alerted, until a person fixes
    the address and retries it. Otherwise not taken, as far as we know: it stays pending,
    due again at the ``next_attempt_at`` its attempt set, with the same Message-ID."""
    detail = f"attempt {statement.attempts}: {type(error).__name__}: {error}"
    logger.warning("statement %s: %s", statement.message_id, detail)
    with outbox_fenced(fence_resource=SEND_FENCE_RESOURCE, fence=fence, job_run_id=job_run_id, now=now):
        if not refused_for_good(error):
            outbox_note_error(Statement, row_id=statement.pk, attempts=statement.attempts, detail=detail)
            return SendResult.RETRYING
        if outbox_give_up(Statement, row_id=statement.pk, detail=detail):
            problem_alert_now(problem=statement_problem(statement=statement, detail=detail, run_id=job_run_id), now=now)
    return SendResult.STOPPED


def statement_problem(*, statement: Statement, detail: str, run_id: int | None = None) -> Problem:
    """A statement not sent as a problem of the missed-run check, keyed by its Message-ID:
    the alert sent when it stopped is not repeated by the ``statements_sent`` invariant."""
    return Problem(
        ProblemKind.INVARIANT,
        SEND_STATEMENTS_JOB,
        statement.period_start,
        f"statement:{statement.message_id}",
        run_id,
        f"statement not sent: {detail}",
    )


def statements_send_due(
    *,
    fence: int,
    job_run_id: int | None,
    read_clock: Callable[[], datetime],
    batch_size: int,
    on_batch: Callable[[SendProgress], None] | None = None,
) -> dict[str, int]:
    """Attach recipients entered since, then mail every due pending statement, one at a
    time, ``batch_size`` per pass, each at most once per call; return the count of each
    result. ``on_batch`` hears after each pass (the job heartbeats, which raises if the
    run was lost). Stops at the first pass in which the fence was found stale.
    """
    counts: Counter[str] = Counter(attached=statements_attach_recipients(now=read_clock()))
    seen: set[int] = set()
    batches = 0
    while True:
        ids = [i for i in outbox_due(Statement, now=read_clock(), limit=batch_size) if i not in seen]
        if not ids:
            break
        seen.update(ids)
        results = [
            statement_send(statement_id=i, fence=fence, job_run_id=job_run_id, read_clock=read_clock) for i in ids
        ]
        counts.update(str(result) for result in results)
        batches += 1
        if on_batch is not None:
            on_batch(
                SendProgress(batches, counts[SendResult.SENT], counts[SendResult.RETRYING], counts[SendResult.STOPPED])
            )
        if SendResult.STALE in results:
            break
    return dict(counts)


# --- A person's decision ------------------------------------------------------------------


def statement_retry(*, statement_id: int, now: datetime) -> Statement:
    """Put a stopped statement back to pending, due now, with the same Message-ID, subject
    and body, to the restaurant's statement email as it is now: a statement stops when the
    mail server refused its recipient or content for good, so nothing was delivered and
    the person retrying it has fixed the address first (the only thing retrying takes
    afresh). Refused if the restaurant has no address."""
    with transaction.atomic():
        try:
            statement = outbox_retry(Statement, row_id=statement_id, now=now)
        except OutboxError as error:
            raise StatementError(str(error)) from None
        address = Restaurant.objects.filter(id=statement.restaurant_id).values_list("statement_email", flat=True)[0]
        if not address:
            raise StatementError(f"{statement}: its restaurant has no statement_email; enter one, then retry")
        if address != statement.recipient:
            Statement.objects.filter(id=statement.pk).update(recipient=address)
            statement.recipient = address
        return statement
