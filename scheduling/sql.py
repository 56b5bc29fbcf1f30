"""The engine's reads and writes that go past the ORM: each function runs one statement of
``scheduling.queries``, as PostgreSQL runs it. SQLite (no arrays, no data-modifying CTE)
reads its own versions of some statements, under the same names, from
``scheduling.queries_sqlite`` (``_queries`` picks the module), and runs other code for the
functions decorated ``on_sqlite`` (``scheduling.sql_sqlite``) or nothing for those that are
``postgresql_only``: no function here tests ``connection.vendor``.

Everything runs through ``tiffin.db.fetch`` or ``execute`` on Django's connection, so it
joins the caller's transaction. Datetimes are adapted with the backend's own adapter, so a
claim key written here compares equal to one written by the ORM (SQLite stores naive UTC
text, PostgreSQL timestamptz).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from types import ModuleType
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connection, models, transaction

from scheduling import queries, queries_sqlite, sql_sqlite
from scheduling.models import FINAL_STATUSES, FINISHED_STATUSES, JobRun
from tiffin.db import (
    array,
    execute,
    fetch,
    fetch_instances,
    id_in,
    instance_created,
    jit_off,
    on_sqlite,
    postgresql_only,
    queries_for_backend,
)

# The final statuses as SQL literals, for the prune's statements, which are still built here
# (see scheduling.queries for why a partial index's statuses are never parameters).
_FINAL = "({})".format(", ".join(f"'{status}'" for status in FINAL_STATUSES))


@dataclass(frozen=True)
class ClaimRow:
    """One claim to insert: every NOT NULL column of job_runs a claim must supply (Django
    keeps defaults in Python), each field named for its column, in the claim's column order."""

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


def _queries() -> ModuleType:
    """The statements for this connection's database: ``scheduling.queries`` on PostgreSQL,
    ``scheduling.queries_sqlite`` (the same names) on SQLite."""
    return queries_for_backend(queries, queries_sqlite)


@on_sqlite(sql_sqlite.claim_runs)
def claim_runs(rows: Sequence[ClaimRow]) -> list[JobRun]:
    """Insert the claim rows and, for the ones this caller won, their ``claimed`` (or
    ``skipped``) events; return the runs won (``queries.CLAIM_RUNS``: a row another server
    already holds returns nothing, so only the winner goes on to enqueue)."""
    if not rows:
        return []
    columns = {column: [getattr(row, column) for row in rows] for column in CLAIM_COLUMNS}
    return fetch_instances(JobRun, queries.CLAIM_RUNS, columns)


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


@on_sqlite(sql_sqlite.claim_run_with_subject)
def claim_run_with_subject(row: ClaimRow, subject: SubjectInsert) -> tuple[tuple[Any, ...], int | None]:
    """Insert a new subject's row and the claim of its run (``row``, whose ``subject`` is
    the prefix); return the subject's returned row and the id of the run won (None if the
    claim key was taken, which a new id cannot be). ``run_claimed`` builds the run itself.

    On PostgreSQL one statement (``queries.CLAIM_RUN_WITH_SUBJECT``), its own transaction
    when the caller has none, so the row and its run commit or roll back together without
    a BEGIN and COMMIT; inside a caller's transaction it runs in a savepoint, as an atomic
    block would, so a failure leaves that transaction usable. Without a caller's
    transaction the rows are committed when the statement returns.
    """
    params = [*subject.params, *(getattr(row, column) for column in CLAIM_COLUMNS)]
    statement = _claim_run_with_subject_statement(subject.sql)
    with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext():
        (returned,) = fetch(statement, params)
    *subject_row, run_id = returned
    return tuple(subject_row), run_id


def run_claimed(row: ClaimRow, *, run_id: int, subject_id: Any) -> JobRun:
    """The run ``claim_run_with_subject`` wrote as ``run_id`` for the subject ``subject_id``,
    as JobRun.objects.create returns it, from the claim's values: the columns the claim
    leaves out are NULL until the run starts."""
    claimed = {column: getattr(row, column) for column in CLAIM_COLUMNS}
    claimed["subject"] = f"{row.subject}{subject_id}"
    return instance_created(JobRun, run_id, claimed)


@functools.cache
def _claim_run_with_subject_statement(subject_sql: str) -> str:
    return queries.CLAIM_RUN_WITH_SUBJECT.format(subject_insert=subject_sql)


@on_sqlite(sql_sqlite.enqueue_due_runs)
def enqueue_due_runs(*, now: datetime, job_names: Sequence[str], limit: int) -> list[JobRun]:
    """Move up to ``limit`` runs of ``job_names`` that are due at ``now`` (delayed runs and
    retries) to enqueued, earliest due first, and write their ``enqueued`` events; return
    them as they now are, in that order (``queries.ENQUEUE_DUE_RUNS``: FOR UPDATE SKIP
    LOCKED, so several schedulers take disjoint rows; on SQLite, the single writer, the ids
    by ``sql_sqlite.DUE_RUN_IDS``, then the ORM). The caller enqueues their tasks in
    the same transaction."""
    params = {"now": now, "job_names": list(job_names), "limit": limit}
    return fetch_instances(JobRun, queries.ENQUEUE_DUE_RUNS, params)


def job_of_runs(run_ids: Sequence[int]) -> str | None:
    """The job of ``run_ids`` (runs of one job, as a task carries them), or None when none
    of them exists: one indexed read of one row."""
    rows = fetch(_queries().JOB_OF_RUNS, {"run_ids": array(int(i) for i in run_ids)})
    return rows[0][0] if rows else None


@on_sqlite(sql_sqlite.start_runs)
def start_runs(*, run_ids: Sequence[int], fence: int, now: datetime, worker: str) -> list[JobRun]:
    """Move those of ``run_ids`` still enqueued to running with ``fence`` (one more
    attempt each) and write their ``started`` events; return the runs started, in id
    order, as they now are (``queries.START_RUNS``). Only rows still enqueued change, so
    of two workers starting the same runs, each row goes to one."""
    if not run_ids:
        return []
    params = {"run_ids": list(run_ids), "fence": fence, "now": now, "worker": worker[:200]}
    return fetch_instances(JobRun, queries.START_RUNS, params)


@on_sqlite(sql_sqlite.succeed_runs)
def succeed_runs(runs: Sequence[JobRun], *, now: datetime, result: Any) -> set[int]:
    """Mark succeeded those of ``runs`` still running with the fence each holds; return
    their ids (the others were no longer their worker's): ``queries.SUCCEED_RUNS``."""
    if not runs:
        return set()
    params = {
        "run_ids": [run.id for run in runs], "fences": [run.fence for run in runs], "now": now,
        "result": JobRun._meta.get_field("result").get_db_prep_save(result, connection),
    }  # fmt: skip
    return {row[0] for row in fetch(queries.SUCCEED_RUNS, params)}


# A fencing token is an epoch and a counter in one bigint: epoch * 2**40 + counter
# (queries.NEXT_FENCE).
FENCE_COUNTER_BITS = 40


def fence_epoch(token: int) -> int:
    """The epoch a token was handed out in: the primary's timeline (0 for a token from
    before epochs, and on SQLite)."""
    return token >> FENCE_COUNTER_BITS


def next_fence() -> int:
    """A new fencing token: ``queries.NEXT_FENCE`` on PostgreSQL (never reused, greater
    than every token handed out before the last promotion, no lock held)."""
    return int(fetch(_queries().NEXT_FENCE)[0][0])


@postgresql_only
def lock_job(job_name: str) -> None:
    """Serialise overlap decisions for one job until the transaction ends
    (``queries.LOCK_JOB``). SQLite needs nothing: IMMEDIATE transactions already hold its
    single write lock."""
    fetch(queries.LOCK_JOB, {"job_name": job_name})


@on_sqlite(sql_sqlite.hold_run_if_current)
def hold_run_if_current(run_id: int, fence: int) -> bool:
    """Share-lock the run's row until the caller's transaction ends if it is still running
    under ``fence`` (``queries.HOLD_RUN_IF_CURRENT``; SQLite locks the whole database for a
    write transaction anyway); return whether it is."""
    return bool(fetch(queries.HOLD_RUN_IF_CURRENT, {"run_id": run_id, "fence": fence}))


def fence_advance(resource: str, token: int, now: datetime) -> bool:
    """Record ``token`` for ``resource`` if it is at least the highest seen; return
    whether it was accepted (``queries.FENCE_ADVANCE``, on either database)."""
    return bool(fetch(queries.FENCE_ADVANCE, {"resource": resource, "token": token, "now": now}))


# The columns of job_schedules a registration writes from a declaration (the rest,
# first_seen_at and paused, are the database's memory), in scheduling.schedules' order
# and queries.SCHEDULE_STATES'.
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
    """Every stored schedule with its cron cursor, in one statement
    (``queries.SCHEDULE_STATES``), read into plain tuples: the ORM compiled the cursor's
    subquery anew on every pass (bench/profile_scheduler.py)."""
    states = {}
    for name, first_seen_at, paused, *declared, cursor in fetch(queries.SCHEDULE_STATES):
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


def find_pass_work(
    *,
    started_before: datetime,
    due_by: datetime,
    active: Sequence[str],
    enqueued_before: datetime,
    declared: Sequence[str],
) -> PassWork:
    """Whether a pass has silent, due or stale runs to take, in one statement
    (``queries.FIND_PASS_WORK``), so a pass with none of them (nearly every pass) opens
    none of their locking transactions:

    1. the jobs with a running run started before ``started_before`` (partial index
       job_run_running (job_name, id));
    2. the earliest ``due_at`` of an ``active`` job's waiting run (partial index
       job_run_due (due_at), read forwards to the first such run), due if at or before
       ``due_by``; when none is due the loop sleeps to it (``dispatch.next_wakeup``)
       without asking again;
    3. whether a run of a ``declared`` job is enqueued since before ``enqueued_before``
       (partial index job_run_enqueued_since, read forwards to the first such run: the
       stale runs, not the runs waiting for a worker).
    """
    params = {
        "active": array(active),
        "started_before": started_before,
        "enqueued_before": enqueued_before,
        "declared": array(declared),
    }
    rows = fetch(_queries().FIND_PASS_WORK, params)
    running = frozenset(name for kind, name, _ in rows if kind == "running")
    first_due = _instant(next((at for kind, _, at in rows if kind == "due"), None))
    due = first_due is not None and first_due <= due_by
    stale = any(kind == "stale" for kind, _, _ in rows)
    return PassWork(long_running_jobs=running, due=due, stale=stale, first_due=first_due)


def stale_runs(*, enqueued_before: datetime, declared: Sequence[str], limit: int) -> list[JobRun]:
    """Up to ``limit`` runs of ``declared`` jobs enqueued since before ``enqueued_before``,
    oldest enqueued first, locked FOR UPDATE SKIP LOCKED on PostgreSQL, so two schedulers
    requeue disjoint runs (``queries.STALE_RUNS``: the stale runs read, not every run waiting
    for a worker)."""
    params = {"enqueued_before": enqueued_before, "declared": array(declared), "limit": limit}
    return fetch_instances(JobRun, _queries().STALE_RUNS, params)


def first_due_at(*, active: Sequence[str]) -> datetime | None:
    """The earliest ``due_at`` of an ``active`` job's waiting delayed run or retry (None:
    none), as ``find_pass_work`` reads it: for the loop's sleep after a pass that took
    due runs (``queries.FIRST_DUE_AT``)."""
    if not active:
        return None
    rows = fetch(_queries().FIRST_DUE_AT, {"active": array(active)})
    return _instant(rows[0][0]) if rows else None


# --- The missed-run check (operations.monitoring) -----------------------------------------


def runs_in_flight(*, horizon: datetime) -> list[JobRun]:
    """The runs not finished that the missed-run check judges at ``horizon``, in no order:
    scheduled runs due by then, runs waiting for a retry, runs enqueued by then and the
    running runs (``queries.RUNS_IN_FLIGHT``, on either database: each kind through its own
    partial index)."""
    return fetch_instances(JobRun, queries.RUNS_IN_FLIGHT, {"horizon": horizon})


# --- /metrics (operations.metrics) ----------------------------------------------------------


@dataclass(frozen=True)
class Backlog:
    """The runs due and not started at an instant, each kind counted up to a limit."""

    due: int  # scheduled runs and retries due by then
    enqueued: int  # runs waiting for a worker
    oldest_due: datetime | None  # the earliest due_at of each kind (None: none)
    oldest_enqueued: datetime | None


def backlog(*, now: datetime, limit: int) -> Backlog:
    """The backlog at ``now``, each count stopping at ``limit`` rows (``queries.BACKLOG``,
    on either database: each kind through its own partial index)."""
    ((due, oldest_due, enqueued, oldest_enqueued),) = fetch(queries.BACKLOG, {"now": now, "limit": limit})
    return Backlog(
        due=int(due), enqueued=int(enqueued), oldest_due=_instant(oldest_due), oldest_enqueued=_instant(oldest_enqueued)
    )


def last_finishes() -> dict[str, dict[str, datetime | None]]:
    """Per job with a schedule, by job name, the newest ``finished_at`` of each of
    ``FINISHED_STATUSES`` in that order (None: no run of the job finished so)
    (``queries.LAST_FINISHES``, on either database: one step of job_run_job_finished per
    job and status)."""
    finishes: dict[str, dict[str, datetime | None]] = {}
    for job_name, status, at in fetch(queries.LAST_FINISHES):
        finishes.setdefault(job_name, dict.fromkeys(map(str, FINISHED_STATUSES)))[status] = _instant(at)
    return finishes


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

    The planner costs a batch's statements by the whole prunable range, far past
    ``jit_above_cost``, though the LIMIT stops them after one batch, so JIT would compile
    each for longer than it runs (docs/benchmark-history.md). Nothing to do on SQLite.
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
    skip_locked = connection.features.has_select_for_update_skip_locked  # PostgreSQL's; SQLite has no row locks
    lock = " FOR UPDATE SKIP LOCKED" if skip_locked else ""
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
