"""The SQL the engine cannot express through the ORM, in one place.

Each statement says what it does and which index serves it. Everything runs through
``_execute`` on Django's connection, so it joins the caller's transaction. Datetimes
are adapted with the backend's own adapter, so a claim key written here compares equal
to one written by the ORM (SQLite stores naive UTC text, PostgreSQL timestamptz).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from tiffin.db import adapt

# Namespace for the two-key advisory locks, so they never collide with another app's.
_ADVISORY_NAMESPACE = 0x7F1F


def _execute(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, [adapt(p) for p in params])
        return list(cursor.fetchall()) if cursor.description else []


# Every NOT NULL column of job_runs a claim must supply (Django keeps defaults in Python).
CLAIM_COLUMNS = (
    "job_name",
    "subject",
    "scheduled_for",
    "due_at",
    "status",
    "trigger",
    "created_at",
    "enqueued_at",
    "finished_at",
    "skip_reason",
    "attempts",
    "worker",
    "error",
)


def claim_runs(rows: Sequence[Sequence[Any]]) -> list[int]:
    """Insert claim rows (each follows CLAIM_COLUMNS); return the ids this caller won.

    ``INSERT ... ON CONFLICT DO NOTHING RETURNING id`` on the unique key
    (job_name, subject, scheduled_for), served by the job_run_claim_key index: a row
    another server already holds returns nothing, so only the winner goes on to enqueue.
    """
    if not rows:
        return []
    row_sql = "(" + ", ".join(["%s"] * len(CLAIM_COLUMNS)) + ")"
    sql = (
        f"INSERT INTO job_runs ({', '.join(CLAIM_COLUMNS)}) VALUES {', '.join([row_sql] * len(rows))} "
        "ON CONFLICT (job_name, subject, scheduled_for) DO NOTHING RETURNING id"
    )
    return [row[0] for row in _execute(sql, [value for row in rows for value in row])]


def next_fence() -> int:
    """A new fencing token: nextval of job_runs_fence_seq on PostgreSQL (never reused,
    no lock held); on SQLite, the one-row counter under the single writer."""
    if connection.vendor == "postgresql":
        return int(_execute("SELECT nextval('job_runs_fence_seq')", [])[0][0])
    # An upsert, so a flushed table (manage.py flush, a transactional test) starts again.
    rows = _execute(
        "INSERT INTO job_fence_counter (id, value) VALUES (1, 1) "
        "ON CONFLICT (id) DO UPDATE SET value = job_fence_counter.value + 1 RETURNING value",
        [],
    )
    return int(rows[0][0])


def lock_job(job_name: str) -> None:
    """Serialise overlap decisions for one job until the transaction ends.

    A transaction-scoped advisory lock, safe behind a transaction-mode pooler (it can
    never outlive the transaction or stick to a pooled connection). SQLite needs
    nothing: IMMEDIATE transactions already hold its single write lock.
    """
    if connection.vendor == "postgresql":
        _execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_ADVISORY_NAMESPACE, job_name])


def run_hold(run_id: int, fence: int) -> bool:
    """Whether the run is still running under ``fence``; on PostgreSQL the row stays
    share-locked until the caller's transaction ends (primary key lookup), so the abandon
    sweep's conditional update waits for the write instead of racing it."""
    lock = " FOR SHARE" if connection.vendor == "postgresql" else ""
    rows = _execute(
        f"SELECT 1 FROM job_runs WHERE id = %s AND status = 'running' AND fence = %s{lock}", [run_id, fence]
    )
    return bool(rows)


def fence_advance(resource: str, token: int, now: datetime) -> bool:
    """Record ``token`` for ``resource`` if it is at least the highest seen; return
    whether it was accepted. The upsert takes the row lock, so concurrent writers of the
    same resource serialise until the caller's transaction ends (primary key lookup)."""
    rows = _execute(
        "INSERT INTO job_fences (resource, token, updated_at) VALUES (%s, %s, %s) "
        "ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at "
        "WHERE job_fences.token <= excluded.token RETURNING token",
        [resource, token, now],
    )
    return bool(rows)
