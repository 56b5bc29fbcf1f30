"""The SQL the engine cannot express through the ORM, in one place.

Each statement says what it does and which index serves it. Everything runs through
``tiffin.db.fetch`` or ``execute`` on Django's connection, so it joins the caller's transaction. Datetimes
are adapted with the backend's own adapter, so a claim key written here compares equal
to one written by the ORM (SQLite stores naive UTC text, PostgreSQL timestamptz).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connection, models, transaction
from django.db.models import Q

from scheduling.events import events_write
from scheduling.models import DUE_STATUSES, FINAL_STATUSES, JobRun, JobRunEvent, RunStatus
from tiffin.db import (
    columns_of,
    execute,
    fetch,
    id_in,
    instance_created,
    instances_from_rows,
    int_array,
    jit_off,
)

# Statuses as SQL literals, never parameters, where a partial index's WHERE names them:
# a parameter cannot prove the index's predicate, so once a prepared statement switches
# to its generic plan (server-side binding, prepare_threshold 5: tiffin/env.py) PostgreSQL
# scanned job_runs instead of the index (EXPLAIN of the generic plan: a Seq Scan).
# job_run_due holds the due statuses, "('scheduled', 'failed', 'abandoned')";
# job_run_finished the final ones, "('succeeded', 'skipped', 'superseded', 'dead')".
_DUE = "({})".format(", ".join(f"'{status}'" for status in DUE_STATUSES))
_FINAL = "({})".format(", ".join(f"'{status}'" for status in FINAL_STATUSES))

# Namespace for the two-key advisory locks, so they never collide with another app's.
_ADVISORY_NAMESPACE = 0x7F1F


@dataclass(frozen=True)
class ClaimRow:
    """One claim to insert: every NOT NULL column of job_runs a claim must supply (Django
    keeps defaults in Python), each field named for its column."""

    job_name: str
    subject: str
    scheduled_for: datetime
    due_at: datetime
    status: str
    trigger: str
    created_at: datetime
    enqueued_at: datetime | None
    finished_at: datetime | None
    skip_reason: str
    attempts: int = 0
    worker: str = ""
    error: str = ""
    # The overlap policy the run follows instead of its job's ("" for the job's): a backfill's.
    overlap: str = ""


CLAIM_COLUMNS = tuple(field.name for field in fields(ClaimRow))


# The kind of the event a claim writes for its run: claim_event_kind, in SQL.
CLAIM_EVENT_KIND = "CASE WHEN status = 'skipped' THEN 'skipped' ELSE 'claimed' END"


def claim_runs(rows: Sequence[ClaimRow]) -> list[JobRun]:
    """Insert claim rows and, for the ones this caller won,
    their ``claimed`` (or ``skipped``) event; return the runs won.

    ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` on the unique key
    (job_name, subject, scheduled_for), served by the job_run_claim_key index: a row
    another server already holds returns nothing, so only the winner goes on to enqueue.
    The won rows come back whole from RETURNING, not from a second SELECT by id. On
    PostgreSQL the events are written by the same statement (a data-modifying CTE over
    the returned rows); SQLite has no such CTE and takes a second statement.

    Every claim of the scheduler passes through here (and on SQLite every ``order_place``'s
    cancellation: ``claim_run_with_subject``), so it is lean: the statement's
    text is built once per backend and row count (``_claim_statement``), so on PostgreSQL
    it is one prepared statement per connection (``tiffin.env.database_from_url``: its
    CTE's planning had been most of the server's work), and the rows become runs through
    the fields' own converters (``tiffin.db.instances_from_rows``) instead of a raw queryset, which
    resolved the columns and the model's field order anew on every call.
    """
    if not rows:
        return []
    params = [getattr(row, column) for row in rows for column in CLAIM_COLUMNS]
    won = instances_from_rows(JobRun, fetch(_claim_statement(connection.vendor, len(rows)), params))
    if connection.vendor != "postgresql":
        JobRunEvent.objects.bulk_create(
            [JobRunEvent(run_id=run.id, at=run.created_at, kind=claim_event_kind(run), attempt=run.attempts,
                         fence=run.fence, worker=run.worker) for run in won]
        )  # fmt: skip
    return won


@functools.cache
def _claim_statement(vendor: str, rows: int) -> str:
    """The claim of ``rows`` rows, returning every column of job_runs (and, on
    PostgreSQL, writing their events in the same statement)."""
    row_sql = "(" + ", ".join(["%s"] * len(CLAIM_COLUMNS)) + ")"
    insert = _claim_insert(", ".join([row_sql] * rows))
    if vendor != "postgresql":
        return insert
    return f"WITH claimed AS ({insert}), {_CLAIMED_EVENTS} SELECT {columns_of(JobRun)} FROM claimed"


def _claim_insert(values: str) -> str:
    """The claim: rows of CLAIM_COLUMNS (``values``, the VALUES list's rows), ON CONFLICT
    on the claim key (job_run_claim_key), returning every column of the runs won."""
    return (
        f"INSERT INTO job_runs ({', '.join(CLAIM_COLUMNS)}) VALUES {values} "
        f"ON CONFLICT (job_name, subject, scheduled_for) DO NOTHING RETURNING {columns_of(JobRun)}"
    )


def _events_cte(runs: str, *, at: str, kind: str) -> str:
    """The CTE ``recorded`` that writes one event per row of the CTE ``runs`` (rows of every
    job_runs column), at the SQL expression ``at``, of the SQL expression ``kind``: each
    one-statement transition writes its events with it."""
    return (
        "recorded AS (INSERT INTO job_run_events (run_id, at, kind, attempt, fence, worker, message) "
        f"SELECT id, {at}, {kind}, attempts, fence, worker, '' FROM {runs})"
    )


# The events of the runs a claim won, as the CTE after ``claimed`` (the claim's rows).
_CLAIMED_EVENTS = _events_cte("claimed", at="created_at", kind=CLAIM_EVENT_KIND)


@dataclass(frozen=True)
class SubjectInsert:
    """A new subject's row, to be written with its delayed run (``claim_run_with_subject``).

    ``sql`` is one ``INSERT ... RETURNING`` of plain SQL (``%s`` parameters, ``params``)
    whose returned columns start with the new row's id, named ``id`` (PostgreSQL reads it
    by name, SQLite by position); the run's subject is ``subject_prefix`` followed by that
    id (``order:`` and the order's id).
    """

    sql: str
    params: tuple[Any, ...]
    subject_prefix: str


def claim_run_with_subject(row: ClaimRow, subject: SubjectInsert) -> tuple[tuple[Any, ...], JobRun | None]:
    """Insert a new subject's row and the claim of its run (``row``, whose ``subject`` is
    the prefix); return the subject's returned row and the run won (None if the claim
    key was taken, which a new id cannot be).

    On PostgreSQL one statement: the subject's INSERT, the claim and its event are
    data-modifying CTEs of a statement that is its own transaction when the caller has
    none, so the row and its run commit or roll back together with no BEGIN and COMMIT
    around them (against the two statements of an ORM insert and ``claim_runs`` in a
    transaction, four round trips, it took three fifths off the client's CPU per order
    placed and two fifths off the server's: BENCHMARKS.md, benchmark 3). Inside a caller's transaction it runs in a
    savepoint, as an atomic block would, so a failure leaves that transaction usable.
    SQLite has no data-modifying CTE: the INSERT, then ``claim_runs``, in one atomic block.
    Without a caller's transaction the rows are committed when the statement returns:
    what follows it (building the returned run, the caller's metrics and log line) cannot undo it.
    """
    if connection.vendor != "postgresql":
        with transaction.atomic():
            (inserted,) = fetch(subject.sql, subject.params)
            won = claim_runs([replace(row, subject=f"{row.subject}{inserted[0]}")])
        return tuple(inserted), (won[0] if won else None)
    params = [*subject.params, *(getattr(row, column) for column in CLAIM_COLUMNS)]
    statement = _claim_with_subject_statement(subject.sql)
    if connection.in_atomic_block:
        with transaction.atomic():
            (returned,) = fetch(statement, params)
    else:
        (returned,) = fetch(statement, params)
    *subject_row, run_id = returned
    if run_id is None:
        return tuple(subject_row), None
    # Built from the claim's values, as JobRun.objects.create returns it (the columns the
    # claim leaves out are NULL until the run starts): reading every column back was a
    # sixth of the client's CPU per order placed.
    claimed = {column: getattr(row, column) for column in CLAIM_COLUMNS}
    claimed["subject"] = f"{row.subject}{subject_row[0]}"
    return tuple(subject_row), instance_created(JobRun, run_id, claimed)


@functools.cache
def _claim_with_subject_statement(subject_sql: str) -> str:
    """The subject's INSERT as a CTE, then the claim of one run whose subject is the prefix
    parameter followed by the new row's id, then its event (as ``_claim_statement``);
    returns the subject's columns followed by the run's id (NULL if the claim key was
    taken)."""
    values = ", ".join(
        "%s::text || (SELECT id FROM subject)" if column == "subject" else "%s" for column in CLAIM_COLUMNS
    )
    return (
        f"WITH subject AS ({subject_sql}), claimed AS ({_claim_insert(f'({values})')}), {_CLAIMED_EVENTS} "
        "SELECT subject.*, claimed.id FROM subject LEFT JOIN claimed ON true"
    )


def enqueue_due_runs(*, now: datetime, job_names: Sequence[str], limit: int) -> list[JobRun]:
    """Move up to ``limit`` runs of ``job_names`` that are due at ``now`` (delayed runs and
    retries) to enqueued, earliest due first, and write their ``enqueued`` events; return
    them as they now are, in that order. The caller enqueues their tasks in the same
    transaction.

    FOR UPDATE SKIP LOCKED lets several schedulers take disjoint rows; the partial index
    job_run_due serves the WHERE status IN (...) AND due_at <= now ORDER BY due_at. On
    PostgreSQL one statement, as ``start_runs``: the UPDATE takes the locked rows and
    returns them whole, a data-modifying CTE writes the events. (As a SELECT ... FOR UPDATE
    of whole rows through the ORM, an UPDATE by id list and an INSERT of the events, loading
    the rows was most of a scheduler pass's CPU under a stream of orders:
    bench/profile_delayed.py.)
    """
    due = Q(status__in=list(DUE_STATUSES), due_at__lte=now, job_name__in=list(job_names))
    if connection.vendor != "postgresql":
        runs = list(JobRun.objects.select_for_update(skip_locked=True).filter(due).order_by("due_at")[:limit])
        JobRun.objects.filter(id__in=[run.id for run in runs]).update(status=RunStatus.ENQUEUED, enqueued_at=now)
        for run in runs:
            run.status, run.enqueued_at = RunStatus.ENQUEUED, now
        events_write(runs, kind="enqueued", now=now)
        return runs
    params = {
        "now": now, "jobs": list(job_names), "limit": limit, "enqueued": RunStatus.ENQUEUED.value,
    }  # fmt: skip
    return instances_from_rows(JobRun, fetch(_enqueue_due_statement(), params))


@functools.cache
def _enqueue_due_statement() -> str:
    returned = columns_of(JobRun)
    recorded = _events_cte("enqueued", at="%(now)s", kind="'enqueued'")
    return (
        "WITH due AS ("
        f"SELECT id FROM job_runs WHERE status IN {_DUE} AND due_at <= %(now)s AND job_name = ANY(%(jobs)s) "
        "ORDER BY due_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
        "), enqueued AS ("
        "UPDATE job_runs SET status = %(enqueued)s, enqueued_at = %(now)s "
        f"WHERE id IN (SELECT id FROM due) RETURNING {returned}"
        f"), {recorded} "
        f"SELECT {returned} FROM enqueued ORDER BY due_at, id"
    )


def job_of_runs(run_ids: Sequence[int]) -> str | None:
    """The job of ``run_ids`` (runs of one job, as a task carries them), or None when none
    of them exists. One indexed read of one row (an ORM ``id__in`` of a delayed batch's
    200 ids cost a worker 2.5 ms of CPU to build, bench/profile_delayed.py)."""
    ids, params = id_in("id", run_ids)
    rows = fetch(f"SELECT job_name FROM job_runs WHERE {ids} LIMIT 1", params)
    return rows[0][0] if rows else None


def start_runs(*, run_ids: Sequence[int], fence: int, now: datetime, worker: str) -> list[JobRun]:
    """Move those of ``run_ids`` still enqueued to running with ``fence`` (one more
    attempt each) and write their ``started`` events; return the runs started, in id
    order, as they now are. Only rows still enqueued change, so of two workers starting
    the same runs, each row goes to one.

    On PostgreSQL one statement, as the claim: the UPDATE returns the rows whole and a
    data-modifying CTE writes the events. (As an UPDATE, a SELECT of the rows by fence
    and an INSERT of events built as model instances, it was the largest share of a
    worker's CPU per batch of delayed runs after the handler: bench/profile_delayed.py.)
    """
    if not run_ids:
        return []
    params = {
        "ids": int_array(run_ids), "fence": fence, "now": now, "worker": worker[:200],
        "enqueued": RunStatus.ENQUEUED.value, "running": RunStatus.RUNNING.value,
    }  # fmt: skip
    if connection.vendor == "postgresql":
        return instances_from_rows(JobRun, fetch(_start_statement(), params))
    JobRun.objects.filter(id__in=run_ids, status=RunStatus.ENQUEUED).update(
        status=RunStatus.RUNNING, fence=fence, attempts=models.F("attempts") + 1, started_at=now,
        heartbeat_at=now, finished_at=None, worker=params["worker"],
    )  # fmt: skip
    started = list(JobRun.objects.filter(id__in=run_ids, fence=fence).order_by("id"))
    events_write(started, kind="started", now=now)
    return started


def succeed_runs(runs: Sequence[JobRun], *, now: datetime, result: Any) -> set[int]:
    """Mark succeeded those of ``runs`` still running with the fence each holds; return
    their ids (the others were no longer their worker's).

    On PostgreSQL one UPDATE joined to the (id, fence) pairs, returning the ids it
    changed; elsewhere the owned rows are locked and read first, then updated.
    """
    if not runs:
        return set()
    if connection.vendor == "postgresql":
        stored = JobRun._meta.get_field("result").get_db_prep_save(result, connection)
        params = {
            "ids": int_array(run.id for run in runs), "fences": int_array(run.fence for run in runs),
            "now": now, "result": stored, "running": RunStatus.RUNNING.value, "succeeded": RunStatus.SUCCEEDED.value,
        }  # fmt: skip
        return {row[0] for row in fetch(_SUCCEED_POSTGRESQL, params)}
    ids = set(JobRun.objects.select_for_update().filter(_owned_by_fence(runs)).values_list("id", flat=True))
    JobRun.objects.filter(id__in=ids).update(status=RunStatus.SUCCEEDED, finished_at=now, result=result, error="")
    return ids


def _owned_by_fence(runs: Sequence[JobRun]) -> Q:
    """Each of ``runs`` still running with its fence: one condition per fence (a started
    batch shares one)."""
    condition = Q(pk__in=[])
    for fence, group in itertools.groupby(sorted(runs, key=_fence_key), key=_fence_key):
        condition |= Q(id__in=[run.id for run in group], status=RunStatus.RUNNING, fence=fence)
    return condition


def _fence_key(run: JobRun) -> int:
    return run.fence if run.fence is not None else -1


_SUCCEED_POSTGRESQL = (
    "UPDATE job_runs AS j SET status = %(succeeded)s, finished_at = %(now)s, result = %(result)s, error = '' "
    "FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS o (id, fence) "
    "WHERE j.id = o.id AND j.fence = o.fence AND j.status = %(running)s RETURNING j.id"
)


@functools.cache
def _start_statement() -> str:
    returned = columns_of(JobRun)
    recorded = _events_cte("started", at="%(now)s", kind="'started'")
    return (
        "WITH started AS ("
        "UPDATE job_runs SET status = %(running)s, fence = %(fence)s, attempts = attempts + 1, "
        "started_at = %(now)s, heartbeat_at = %(now)s, finished_at = NULL, worker = %(worker)s "
        f"WHERE id = ANY(%(ids)s::bigint[]) AND status = %(enqueued)s RETURNING {returned}"
        f"), {recorded} "
        f"SELECT {returned} FROM started ORDER BY id"
    )


def claim_event_kind(run: JobRun) -> str:
    """The event a won claim records: ``skipped`` for a tick claimed as skipped, else ``claimed``."""
    return "skipped" if run.status == RunStatus.SKIPPED else "claimed"


# A fencing token is an epoch and a counter in one bigint: epoch * 2**40 + counter.
FENCE_COUNTER_BITS = 40
# A new fencing token on PostgreSQL: the primary's current WAL timeline (the epoch: the
# first 8 hex digits of the current WAL file's name) times 2**40, plus nextval of
# job_runs_fence_seq (its MAXVALUE is 2**40 - 1: past it nextval raises, never carries
# into the epoch). A promotion always starts a new timeline, at once, so every token of a
# new primary exceeds every token of the old one, even those whose WAL never reached it
# (docs/failover.md). One statement, no catalog write, no lock: safe behind a
# transaction-mode pooler. A product, not <<, so an overflow raises instead of wrapping.
NEXT_FENCE = (
    "SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint * 1099511627776"
    " + nextval('job_runs_fence_seq')"
)
# The epoch new tokens carry (the primary's current WAL timeline, as in NEXT_FENCE) and the
# counter's last value (0 before the first nextval), read without taking a token.
FENCE_STATE = (
    "SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint,"
    " CASE WHEN is_called THEN last_value ELSE 0 END FROM job_runs_fence_seq"
)


def fence_epoch(token: int) -> int:
    """The epoch a token was handed out in: the primary's timeline (0 for a token from
    before epochs, and on SQLite)."""
    return token >> FENCE_COUNTER_BITS


def next_fence() -> int:
    """A new fencing token: NEXT_FENCE on PostgreSQL (never reused, greater than every
    token handed out before the last promotion, no lock held); on SQLite, which has no
    standby, the one-row counter under the single writer (epoch 0)."""
    if connection.vendor == "postgresql":
        return int(fetch(NEXT_FENCE, [])[0][0])
    # An upsert, so a flushed table (manage.py flush, a transactional test) starts again.
    rows = fetch(
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
        fetch("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_ADVISORY_NAMESPACE, job_name])


def run_hold(run_id: int, fence: int) -> bool:
    """Whether the run is still running under ``fence``; on PostgreSQL the row stays
    share-locked until the caller's transaction ends (primary key lookup), so the abandon
    sweep's conditional update waits for the write instead of racing it."""
    lock = " FOR SHARE" if connection.vendor == "postgresql" else ""
    rows = fetch(f"SELECT 1 FROM job_runs WHERE id = %s AND status = 'running' AND fence = %s{lock}", [run_id, fence])
    return bool(rows)


def fence_advance(resource: str, token: int, now: datetime) -> bool:
    """Record ``token`` for ``resource`` if it is at least the highest seen; return
    whether it was accepted. The upsert takes the row lock, so concurrent writers of the
    same resource serialise until the caller's transaction ends (primary key lookup)."""
    rows = fetch(
        "INSERT INTO job_fences (resource, token, updated_at) VALUES (%s, %s, %s) "
        "ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at "
        "WHERE job_fences.token <= excluded.token RETURNING token",
        [resource, token, now],
    )
    return bool(rows)


# Each cron job's last claimed cron tick (its cursor): the newest ``scheduled_for`` of its
# cron rows, a correlated subquery on ``s`` (a job_schedules row).
CRON_CURSOR = (
    "(SELECT r.scheduled_for FROM job_runs AS r WHERE r.job_name = s.job_name"
    " AND r.subject = '' AND r.trigger = 'cron' ORDER BY r.scheduled_for DESC LIMIT 1)"
)
# The columns of job_schedules a registration writes from a declaration (the rest,
# first_seen_at and paused, are the database's memory), in scheduling.schedules' order.
SCHEDULE_DECLARED_COLUMNS = (
    "kind",
    "cron",
    "timezone",
    "overlap",
    "misfire",
    "misfire_deadline_seconds",
    "max_attempts",
    "backoff_seconds",
    "timeout_seconds",
    "heartbeat",
    "batch_size",
)
# The statement of schedule_states. No parameter, so its text never changes and it is
# prepared once per connection. The scheduler-pass benchmark's reference reads its jobs'
# cursors with this text too (over its copies of the tables).
SCHEDULE_STATES = (
    f"SELECT s.job_name, s.first_seen_at, s.paused, {', '.join('s.' + c for c in SCHEDULE_DECLARED_COLUMNS)},"
    f" CASE WHEN s.kind = 'cron' THEN {CRON_CURSOR} END FROM job_schedules AS s"
)


@dataclass(frozen=True)
class ScheduleState:
    """A stored schedule as a pass needs it: the declaration it was registered with, the
    database's memory (first sighting, paused) and, for a cron job, its cursor."""

    job_name: str
    first_seen_at: datetime
    paused: bool
    declared: tuple[Any, ...]  # the SCHEDULE_DECLARED_COLUMNS, in order
    cursor: datetime | None  # the last claimed cron tick (None: none, or not a cron job)


def schedule_states() -> dict[str, ScheduleState]:
    """Every stored schedule with its cron cursor, in one statement.

    Per cron schedule row a correlated subquery served by the claim key index (job_name,
    subject, scheduled_for), read backwards to the first cron row: ORDER BY ... DESC
    LIMIT 1, not MAX(), which PostgreSQL planned as an aggregate over all of the job's
    ticks (BENCHMARKS.md). Manual and backfill rows do not move it, so a manual run
    never hides a missed tick. Hand-written, and read into plain tuples instead of
    Schedule instances: the ORM spent three times as long compiling the cursor statement
    on every pass as PostgreSQL spent running it, and a pass read the schedules and the
    cursors with two statements (bench/profile_scheduler.py).
    """
    states = {}
    for name, first_seen_at, paused, *declared, cursor in fetch(SCHEDULE_STATES, []):
        states[name] = ScheduleState(
            job_name=name,
            first_seen_at=_instant(first_seen_at),
            paused=bool(paused),  # SQLite returns 0 or 1
            declared=tuple(declared),
            cursor=_instant(cursor),
        )
    return states


def _instant(value: Any) -> Any:
    """A timestamp column read by hand, as the ORM would read it: SQLite returns text, which
    its own converter makes the aware datetime; PostgreSQL's already is one. None stays None."""
    convert = getattr(connection.ops, "convert_datetimefield_value", None)
    return value if value is None or convert is None else convert(value, None, connection)


# --- The run queries of a pass (scheduling.dispatch) -------------------------------------


@dataclass(frozen=True)
class PassWork:
    """What a pass's run queries would find, read without locks."""

    long_running_jobs: frozenset[str]  # jobs with a run running since before the cutoff
    due: bool  # a due delayed run or retry of an active job
    stale: bool  # a run of a declared job enqueued since before the cutoff
    # The earliest due_at of an active job's waiting delayed run or retry (None: none).
    first_due: datetime | None = None


def pass_work_find(
    *,
    started_before: datetime,
    due_by: datetime,
    active: Sequence[str],
    enqueued_before: datetime,
    declared: Sequence[str],
) -> PassWork:
    """Whether a pass has silent, due or stale runs to take, in one statement, so a pass
    with none of them (nearly every pass) opens none of their locking transactions:

    1. the jobs with a running run started before ``started_before`` (partial index
       job_run_running (job_name, id));
    2. the earliest ``due_at`` of an ``active`` job's waiting run (partial index
       job_run_due (due_at), read forwards to the first such run), due if at or before
       ``due_by``; when none is due the loop sleeps to it (``dispatch.next_wakeup``)
       without asking again;
    3. whether a run of a ``declared`` job is enqueued since before ``enqueued_before``
       (job_run_enqueued_by_job; under statistics taken with nothing enqueued, a scan of
       job_run_enqueued_by_id: every enqueued run).
    """
    due_jobs, due_params = id_in("job_name", active)
    stale_jobs, stale_params = id_in("job_name", declared)
    rows = fetch(
        # The third column a timestamp in every branch with a row (a bare NULL there is text).
        f"SELECT 'due', '', ({_first_due_query(due_jobs)})"
        " UNION ALL SELECT 'running', job_name, MIN(started_at) FROM job_runs WHERE status = 'running'"
        " AND started_at < %s GROUP BY job_name"
        " UNION ALL SELECT 'stale', '', NULL WHERE EXISTS (SELECT 1 FROM job_runs"
        f" WHERE status = 'enqueued' AND enqueued_at < %s AND {stale_jobs})",
        [*due_params, started_before, enqueued_before, *stale_params],
    )
    running = frozenset(name for kind, name, _ in rows if kind == "running")
    first_due = _instant(next((at for kind, _, at in rows if kind == "due"), None))
    due = first_due is not None and first_due <= due_by
    stale = any(kind == "stale" for kind, _, _ in rows)
    return PassWork(long_running_jobs=running, due=due, stale=stale, first_due=first_due)


def first_due_at(*, active: Sequence[str]) -> datetime | None:
    """The earliest ``due_at`` of an ``active`` job's waiting delayed run or retry (None:
    none), as ``pass_work_find`` reads it: for the loop's sleep after a pass that took
    due runs. (As an ORM aggregate its statuses were parameters, and the generic plan of
    the prepared statement could not use job_run_due: see ``_DUE``.)"""
    if not active:
        return None
    due_jobs, params = id_in("job_name", active)
    rows = fetch(_first_due_query(due_jobs), params)
    return _instant(rows[0][0]) if rows else None


def _first_due_query(due_jobs: str) -> str:
    # job_run_due (due_at) WHERE status IN (the due statuses), read forwards to the first row.
    return (
        f"SELECT due_at FROM job_runs WHERE status IN {_DUE} AND due_at IS NOT NULL AND {due_jobs} "
        "ORDER BY due_at LIMIT 1"
    )


# --- Retention (operations.retention) ------------------------------------------------------


@dataclass(frozen=True)
class PruneRule:
    """Which runs a prune may delete: finished ones, past their retention, and outside
    the claim guard horizon (see operations.retention for why each condition holds)."""

    finished_before: datetime  # succeeded, skipped, superseded: finished before this
    dead_before: datetime  # dead: finished before this
    horizon: datetime  # a cron job's run: scheduled_for before this (delayed runs: no bound)
    job_names: tuple[str, ...]  # the jobs the rule is for ...
    other_jobs: bool  # ... or, when True, every job but those


def _references() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The (table, column) pairs that point at job_runs: (deleted with a run, keeping a run).

    Read from JobRun's relations, so the engine needs no import of the apps that point
    at it. A CASCADE relation is deleted with the run (job_run_events, probe charges);
    any other (PROTECT such as Payout.job_run, SET_NULL, DO_NOTHING) keeps the run: a
    prune must never fail on a foreign key, nor decide for another app what its rows mean.
    """
    cascade: list[tuple[str, str]] = []
    keep: list[tuple[str, str]] = []
    for rel in JobRun._meta.related_objects:
        related = rel.related_model
        if rel.many_to_many or isinstance(related, str):
            raise ImproperlyConfigured(f"{related}: the prune handles foreign keys to JobRun, not this relation")
        related_meta = related._meta
        pair = (connection.ops.quote_name(related_meta.db_table), connection.ops.quote_name(rel.field.column))
        # A cascade to rows that others reference in turn would need a cascade of its own.
        deletable = rel.on_delete is models.CASCADE and not related_meta.related_objects
        (cascade if deletable else keep).append(pair)
    return cascade, keep


def _prunable(rule: PruneRule) -> tuple[str, list[Any]]:
    """The WHERE clause (on job_runs) of a run the rule may delete, and its parameters.

    The newest cron tick of each job is never deleted: it is the scheduler's cursor
    (sql.schedule_states). Its NOT EXISTS probes the claim key index
    (job_name, subject, scheduled_for); each keeping reference probes its foreign key's index.
    """
    names = ", ".join(["%s"] * len(rule.job_names))
    jobs = f"job_runs.job_name {'NOT IN' if rule.other_jobs else 'IN'} ({names})"
    if not rule.job_names:
        jobs = "1 = 1" if rule.other_jobs else "1 = 0"
    keeps = "".join(
        f" AND NOT EXISTS (SELECT 1 FROM {table} WHERE {table}.{column} = job_runs.id)"
        for table, column in _references()[1]
    )
    where = (
        f"job_runs.status IN {_FINAL} AND job_runs.finished_at < %s"
        " AND ((job_runs.status = 'dead' AND job_runs.finished_at < %s)"
        " OR (job_runs.status <> 'dead' AND job_runs.finished_at < %s))"
        " AND (job_runs.trigger = 'delayed' OR job_runs.scheduled_for < %s)"
        f" AND {jobs}"
        " AND NOT (job_runs.trigger = 'cron' AND job_runs.subject = '' AND NOT EXISTS ("
        "SELECT 1 FROM job_runs AS newer WHERE newer.job_name = job_runs.job_name AND newer.subject = ''"
        " AND newer.trigger = 'cron' AND newer.scheduled_for > job_runs.scheduled_for))"
        f"{keeps}"
    )
    upper = max(rule.finished_before, rule.dead_before)
    params = [upper, rule.dead_before, rule.finished_before, rule.horizon, *rule.job_names]
    return where, params


def prune_batch_begin() -> None:
    """Turn PostgreSQL's JIT off for the rest of this batch's transaction (SET LOCAL).

    The planner costs a batch's statements by the whole prunable range (millions of rows,
    each with the correlated cursor probe), far past ``jit_above_cost``, though the LIMIT
    or the id array stops them after one batch, so JIT compiled each statement for far
    longer than it ran (BENCHMARKS.md, benchmark 6). Nothing to do on SQLite.
    """
    jit_off()


def prunable_runs_pick(rule: PruneRule, *, after: tuple[Any, int] | None, limit: int) -> list[tuple[Any, int]]:
    """The next ``limit`` runs the rule may delete, oldest finished first, after the
    (finished_at, id) key ``after``; locked FOR UPDATE SKIP LOCKED on PostgreSQL (a run
    someone holds is skipped, and one changed since is re-checked before it is locked).

    A range scan of the partial index job_run_finished (finished_at, id) WHERE status is
    final: the key resumes after the previous batch, so no batch walks the index entries
    the batches before it deleted, and none scans the young runs that are kept.
    """
    where, params = _prunable(rule)
    if after is not None:
        where += " AND (job_runs.finished_at, job_runs.id) > (%s, %s)"
        params += list(after)
    lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    sql = (
        f"SELECT job_runs.finished_at, job_runs.id FROM job_runs WHERE {where}"
        f" ORDER BY job_runs.finished_at, job_runs.id LIMIT %s{lock}"
    )
    return [(row[0], int(row[1])) for row in fetch(sql, [*params, limit])]


def prunable_runs_delete(rule: PruneRule, *, run_ids: Sequence[int]) -> tuple[int, int]:
    """Delete those of ``run_ids`` the rule still allows, with the rows that cascade from
    them (job_run_events first); returns (runs, cascaded rows). Both statements re-check
    the rule; the primary key and each foreign key's index serve them."""
    where, params = _prunable(rule)
    ids, id_params = id_in("job_runs.id", run_ids)
    deletable = f"SELECT job_runs.id FROM job_runs WHERE {ids} AND {where}"
    cascaded = 0
    for table, column in _references()[0]:
        cascaded += execute(f"DELETE FROM {table} WHERE {column} IN ({deletable})", [*id_params, *params])
    runs = execute(f"DELETE FROM job_runs WHERE {ids} AND {where}", [*id_params, *params])
    return runs, cascaded
