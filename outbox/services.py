"""Writes of an outbox table (the package doc says what the two outboxes share).

Every function takes the outbox's model; the rows have ``status``, ``attempts``,
``last_attempt_at``, ``next_attempt_at``, ``last_error`` and ``sent_at``. Nothing here
calls the other side: each app calls it between ``outbox_attempts_begin`` and the
record, with no transaction open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from django.db import connection, transaction
from django.db.models import Model, Value
from django.db.models.functions import Coalesce

from outbox.errors import OutboxError
from outbox.sql import ATTEMPTS_BEGIN
from outbox.status import PENDING, SENT, STOPPED
from scheduling.fencing import fence_check
from tiffin.db import adapt

M = TypeVar("M", bound=Model)

# The longest last_error kept on a row.
ERROR_CHARS = 2000


def outbox_backoff(*, attempt: int, base_seconds: float, max_seconds: float) -> timedelta:
    """The wait after attempt number ``attempt`` (1-based): base * 2^(attempt - 1), capped."""
    seconds = base_seconds * 2 ** max(attempt - 1, 0)
    return timedelta(seconds=min(seconds, max_seconds))


@dataclass(frozen=True)
class Taken(Generic[M]):
    """A row taken for one attempt: as the attempt updated it, and when the one before
    it was made (None for a first attempt)."""

    row: M
    previous_attempt_at: datetime | None


def outbox_attempts_begin(
    model: type[M],
    *,
    ids: Sequence[int],
    fence_resource: str,
    fence: int,
    job_run_id: int | None,
    now: datetime,
    lease: timedelta,
    backoff: Callable[[int], timedelta],
    stamp_once: Sequence[str] = (),
) -> list[Taken[M]]:
    """Begin an attempt on each of ``ids`` still pending and due, in one transaction
    guarded by the sender's fence; return them in id order (the others are skipped:
    another sender took them or is taking them, hence SKIP LOCKED).

    Each attempt is counted and its row's ``next_attempt_at`` pushed to ``now + lease +
    backoff(attempt number)``: the lease covers the call (if this worker dies, the row is
    due again after it), the backoff is the wait before the next try (one that grows to a
    cap and stays there, as ``outbox_backoff`` does). Each column of ``stamp_once`` is set
    to ``now`` if still null (when the first attempt was made, say).
    """
    with transaction.atomic():
        fence_check(fence_resource, fence, now=now, run_id=job_run_id)
        if connection.vendor == "postgresql":  # seam: the same writes in one statement
            return _attempts_begin_returning(model, ids=ids, now=now, lease=lease, backoff=backoff, stamps=stamp_once)
        manager = model._default_manager
        rows = manager.select_for_update(skip_locked=True).filter(
            id__in=list(ids), status=PENDING, next_attempt_at__lte=now
        )
        taken: list[Taken[M]] = [Taken(row, row.last_attempt_at) for row in rows.order_by("id")]  # type: ignore[attr-defined]
        # One UPDATE per number of attempts made (the backoff depends on it), not per row.
        by_attempts: dict[int, list[int]] = {}
        for item in taken:
            row: Any = item.row
            by_attempts.setdefault(row.attempts, []).append(row.pk)
        stamps = {column: Coalesce(column, Value(now)) for column in stamp_once}
        for made, made_ids in by_attempts.items():
            manager.filter(id__in=made_ids).update(
                attempts=made + 1, last_attempt_at=now, next_attempt_at=now + lease + backoff(made + 1), **stamps
            )
        for item in taken:
            row = item.row
            row.attempts += 1
            row.last_attempt_at = now
            row.next_attempt_at = now + lease + backoff(row.attempts)
            for column in stamp_once:
                setattr(row, column, getattr(row, column) or now)
        return taken


# Entries of the due times ``_attempts_begin_returning`` passes: past the 64th attempt
# ``outbox_backoff`` is at its cap (2^63 times any base passes any cap a timedelta holds).
_BACKOFF_STEPS = 64


def _attempts_begin_returning(
    model: type[M],
    *,
    ids: Sequence[int],
    now: datetime,
    lease: timedelta,
    backoff: Callable[[int], timedelta],
    stamps: Sequence[str],
) -> list[Taken[M]]:
    """``outbox_attempts_begin``'s writes on PostgreSQL as one statement
    (``outbox.sql.ATTEMPTS_BEGIN``): the due time of every attempt number up to the
    backoff's cap passed as an array, the rows read back from RETURNING.

    The ORM's version (SQLite's) takes a SELECT ... FOR UPDATE and an
    UPDATE per attempt count; this one saves that round trip and the ORM's compiling of
    both: the transfer sender's CPU per 1,000 transfers fell from 2.68 s to 2.45 s
    (benchmark 8, whose begins take ~4 rows each)."""
    due = [now + lease + backoff(1)]
    while len(due) < _BACKOFF_STEPS and backoff(len(due)) != backoff(len(due) + 1):
        due.append(now + lease + backoff(len(due) + 1))
    quote = connection.ops.quote_name
    meta = model._meta
    statement = ATTEMPTS_BEGIN.format(
        table=quote(meta.db_table),
        columns=", ".join(f"o.{quote(field.column)}" for field in meta.concrete_fields),
        stamps="".join(f", {quote(c)} = COALESCE(o.{quote(c)}, %(now)s)" for c in stamps),
    )
    params = {"ids": list(ids), "pending": PENDING, "now": now, "due": due, "steps": len(due)}
    rows = model._default_manager.raw(statement, params)
    return sorted((Taken(row, row.previous_attempt_at) for row in rows), key=lambda item: item.row.pk)  # type: ignore[attr-defined]


@contextmanager
def outbox_fenced(*, fence_resource: str, fence: int, job_run_id: int | None, now: datetime) -> Iterator[None]:
    """A transaction whose first statement is the sender's fence check, around the
    records of one or more answers: every record in it is written, or, when the fence is
    stale (StaleFenceError), none is."""
    with transaction.atomic():
        fence_check(fence_resource, fence, now=now, run_id=job_run_id)
        yield


def outbox_record_sent(model: type[Model], *, sent: Sequence[tuple[int, Mapping[str, Any]]], now: datetime) -> None:
    """Record each ``(id, columns)`` as sent at ``now`` with ``columns`` (by their
    database names: the provider's id, say; every row names the same ones), if still pending: a row another sender
    already recorded is left as it is. One round trip for all of them (psycopg pipelines
    ``executemany``). Inside the caller's fenced transaction."""
    if not sent:
        return
    meta = model._meta
    quote = connection.ops.quote_name
    names = sorted(sent[0][1])
    extra = "".join(f", {quote(name)} = %s" for name in names)
    statement = (
        f"UPDATE {quote(meta.db_table)} SET status = %s, sent_at = %s, next_attempt_at = NULL, "
        f"last_error = ''{extra} WHERE id = %s AND status = %s"
    )
    rows = [(SENT, adapt(now), *(columns[name] for name in names), row_id, PENDING) for row_id, columns in sent]
    with connection.cursor() as cursor:
        cursor.executemany(statement, rows)


def outbox_note_error(model: type[Model], *, row_id: int, attempts: int, detail: str) -> None:
    """The outcome of attempt number ``attempts`` is unknown or failed: note ``detail``;
    the row stays pending, due again at the ``next_attempt_at`` the attempt set (a row
    another attempt has taken since is left as it is)."""
    model._default_manager.filter(id=row_id, status=PENDING, attempts=attempts).update(last_error=detail[:ERROR_CHARS])


def outbox_give_up(model: type[Model], *, row_id: int, detail: str, status: str = STOPPED) -> bool:
    """Refused in a way no retry fixes: stop the row (never sent again but by a person's
    ``outbox_retry``) with ``detail`` as its last error; ``status`` names another final
    state an app has (the transfers' ``held``). True if this call stopped it (the caller
    alerts once); False if it was no longer pending."""
    stopped = model._default_manager.filter(id=row_id, status=PENDING).update(
        status=status, next_attempt_at=None, last_error=detail[:ERROR_CHARS]
    )
    return stopped == 1


def outbox_retry(model: type[M], *, row_id: int, now: datetime) -> M:
    """A person's decision: put a stopped row back to pending, due now, with the same
    identity and the same frozen content. OutboxError if there is no such row or it is
    not stopped."""
    name = model._meta.verbose_name
    with transaction.atomic():
        row: Any = model._default_manager.select_for_update().filter(id=row_id).first()
        if row is None:
            raise OutboxError(f"no {name} with id {row_id}")
        if row.status != STOPPED:
            raise OutboxError(f"{row} is {row.status}, not stopped; only a stopped {name} is retried")
        row.status = PENDING
        row.next_attempt_at = now
        row.last_error = f"retried by hand at {now:%Y-%m-%d %H:%M:%S} UTC after: {row.last_error}"[:ERROR_CHARS]
        row.save(update_fields=["status", "next_attempt_at", "last_error"])
        return row  # type: ignore[no-any-return]


def outbox_release_waiting(
    model: type[Model], *, waiting: str, found: Sequence[tuple[int, str]], column: str, now: datetime
) -> int:
    """Freeze the destination of rows that waited for one: each ``(id, value)`` of
    ``found`` gets ``value`` in ``column`` and becomes pending, due now, if it is still
    waiting and was never attempted (so nothing was ever sent); return how many."""
    released = 0
    for row_id, value in found:
        released += model._default_manager.filter(id=row_id, status=waiting, attempts=0).update(
            **{column: value, "status": PENDING, "next_attempt_at": now}
        )
    return released
