"""Every statement about one run (its start, finish, failure, heartbeat, fence check, the
overlap decision and skip, the abandoned-run sweep) reads that run's row, not every run in
flight, even with the statistics PostgreSQL took when nothing was in flight.

The trap this guards against: a partial index ``WHERE status IN ('enqueued', 'running')``
keyed by (job_name, status). Any statement that says ``id = ? AND status = 'enqueued'``
implies its condition, so the planner may use it, and does whenever the index's statistics
say it is nearly empty (taken at a quiet hour, or never). Under a backlog it holds every
run waiting for a worker, and each start then read all of them, filtering by id. The
statements are the project's own, captured as they run, and explained with their own
parameters. The scheduler's reads of due runs (the delayed-run take, a tick pass) read
the backlog legitimately; they must stop after their LIMIT, not filter all of it. The
job-wide reads of enqueued runs (a cron job's queue hand-off, the pass's stale check and
requeue) read a range of their own key (the job, the time enqueued), not the backlog.

The reads of due runs had a trap of their own: with no statistics on job_runs at all
(never analysed, or analysed empty), the planner took ``job_name = ANY(...)`` for a rare
condition and ANDed a bitmap of every run of the job (job_run_by_job) with job_run_due,
so with thousands of runs claimed for later and a handful due, the take read all of them;
and the take's generic plan merge-joined its UPDATE with the whole primary key. Those
reads are explained as prepared statements, with a custom plan and with the generic one.

The missed-run check's runs in flight (scheduled runs due, retries, enqueued and running
runs) are read each kind through the partial index that holds exactly it: not a test of
every status in flight at once, which no index serves (every finished run read), nor
job_run_due whole (every run claimed for later). The backlog /metrics counts (due runs,
enqueued runs) is read likewise: a range of job_run_due and job_run_enqueued_since.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from operations.metrics import _backlog, jobs_last_finishes
from operations.monitoring import CheckWindow, runs_in_flight
from scheduling import sql
from scheduling.context import RunContext
from scheduling.dispatch import runs_abandon_silent, tick_pass
from scheduling.execution import runs_start
from scheduling.models import JobRun, Overlap, RunStatus, Trigger
from scheduling.registry import Job, registry
from scheduling.schedules import schedules_register
from scheduling.transitions import runs_fail, runs_succeed
from tests.engine import T0, make_job
from tests.plans import pages_read, plan_nodes, rows_read, statements_on

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=False)]

BACKLOG = 5000  # enqueued runs, and as many scheduled ones, of the delayed job
HANDFUL = 5  # the most rows a statement about one run may read: the run, and the few running
TAKE = 20  # the delayed-run take's LIMIT here
PAGES = 12  # the most pages such a statement's scans may touch (an index descent, a few rows)
DUE = 5  # runs due among the LATER ones, in the reads without statistics
# Runs claimed for after NOW. Fewer, and the planner reads job_run_by_job for the take only
# from about 10,000 (PostgreSQL 15): the old take read all of them from there on.
LATER = 20_000
# The most rows or index entries a scan in a read of DUE due runs may touch: the due runs,
# and in an index the versions of them the capture's run wrote and undid (dead, not yet vacuumed).
DUE_READ = 4 * DUE

DELAYED = make_job("plan-delayed", delayed=True, batch_size=200, timeout_seconds=60)
# A cron job whose overlap is decided at each start, with a heartbeat (the sweep's other column).
CRON = make_job("plan-cron", overlap=Overlap.FORBID, heartbeat=True, timeout_seconds=60)
NOW = T0 + timedelta(hours=2)


def _run(job: Job, minutes: int, status: str, **fields: Any) -> JobRun:
    at = T0 + timedelta(minutes=minutes)
    trigger = Trigger.DELAYED if job.name == DELAYED.name else Trigger.CRON
    subject = f"order:{minutes}" if trigger == Trigger.DELAYED else ""
    values: dict[str, Any] = {"due_at": at, "created_at": at, "enqueued_at": at, **fields}
    return JobRun(job_name=job.name, subject=subject, scheduled_for=at, status=status, trigger=trigger, **values)


@pytest.fixture
def in_flight() -> Iterator[dict[str, JobRun]]:
    """A history of finished runs analysed with nothing in flight; then BACKLOG enqueued
    and BACKLOG scheduled delayed runs (not analysed), and the runs the calls are about."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL plans")
    finished = {"finished_at": T0, "started_at": T0, "attempts": 1, "fence": 1}
    JobRun.objects.bulk_create(_run(DELAYED, -n, RunStatus.SUCCEEDED, **finished) for n in range(1, 501))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE job_runs")
    # Enqueued at NOW: waiting for a worker, not yet stale.
    JobRun.objects.bulk_create(_run(DELAYED, n, RunStatus.ENQUEUED, enqueued_at=NOW) for n in range(BACKLOG))
    # Not due until after NOW: waiting in job_run_due, as a busy hour's cancellations do.
    JobRun.objects.bulk_create(
        _run(DELAYED, BACKLOG + n, RunStatus.SCHEDULED, due_at=NOW + timedelta(minutes=n)) for n in range(BACKLOG)
    )
    with registry.replaced(DELAYED, CRON):
        enqueued = JobRun.objects.filter(job_name=DELAYED.name, status=RunStatus.ENQUEUED).order_by("id")
        running_delayed = enqueued.first()
        assert running_delayed is not None
        sql.start_runs(run_ids=[running_delayed.id], fence=sql.next_fence(), now=NOW, worker="w1")
        runs = {
            "enqueued": enqueued.last(),
            "running": JobRun.objects.get(id=running_delayed.id),
            "cron-waiting": JobRun.objects.create(**_fields(_run(CRON, 100, RunStatus.ENQUEUED))),
            "cron-silent": JobRun.objects.create(
                **_fields(_run(CRON, 50, RunStatus.RUNNING, started_at=T0, heartbeat_at=T0, attempts=1, fence=2))
            ),
        }
        yield runs  # type: ignore[misc]


def _fields(run: JobRun) -> dict[str, Any]:
    return {f.attname: getattr(run, f.attname) for f in JobRun._meta.concrete_fields if f.attname != "id"}


def _statements(call: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The statements on job_runs (its fence sequence aside) that ``call`` runs (undone)."""
    return statements_on("job_runs", call, ignore="job_runs_fence_seq")


def _context(run: JobRun) -> RunContext:
    assert run.fence is not None
    return RunContext(
        run_id=run.id, job_name=run.job_name, subject=run.subject, scheduled_for=run.scheduled_for,
        fence=run.fence, attempt=run.attempts, trigger=run.trigger,
    )  # fmt: skip


def _start_cron_blocked(runs: dict[str, JobRun]) -> None:
    # A run of the forbid job is running (the silent one): this start is skipped.
    assert runs_start(job=CRON, run_ids=[runs["cron-waiting"].id], now=NOW, worker="w2") == []


def _start_cron_free(runs: dict[str, JobRun]) -> None:
    JobRun.objects.filter(id=runs["cron-silent"].id).update(status=RunStatus.SUCCEEDED, finished_at=NOW)
    assert len(runs_start(job=CRON, run_ids=[runs["cron-waiting"].id], now=NOW, worker="w2")) == 1


ONE_RUN_CALLS = [
    pytest.param(lambda r: runs_start(job=DELAYED, run_ids=[r["enqueued"].id], now=NOW, worker="w2"), id="start"),
    pytest.param(_start_cron_blocked, id="start-overlap-skip"),
    pytest.param(_start_cron_free, id="start-overlap-decided"),
    pytest.param(lambda r: runs_succeed(job=DELAYED, runs=[r["running"]], now=NOW, result={}), id="finish"),
    pytest.param(lambda r: runs_fail(job=DELAYED, runs=[r["running"]], now=NOW, error="boom"), id="fail"),
    # A cron job's finish also looks for its oldest run queued by a backfill (queue_hand_off,
    # job-wide): the job's enqueued runs, not every run waiting for a worker.
    pytest.param(
        lambda r: runs_succeed(job=CRON, runs=[r["cron-silent"]], now=NOW, result={}), id="cron-finish-hand-off"
    ),
    pytest.param(lambda r: _context(r["running"]).heartbeat(), id="heartbeat"),
    pytest.param(lambda r: _context(r["running"]).fence_check("plan-resource"), id="fence-check"),
    pytest.param(
        lambda r: runs_abandon_silent(now=NOW + timedelta(hours=1), suspects={DELAYED.name}), id="abandoned-sweep"
    ),
]


@pytest.mark.parametrize("call", ONE_RUN_CALLS)
def test_a_statement_about_one_run_reads_only_its_row(
    in_flight: dict[str, JobRun], call: Callable[[dict[str, JobRun]], Any]
):
    scanned = []
    for statement, params in _statements(lambda: call(in_flight)):
        scans = rows_read("job_runs", statement, params)
        scanned += scans
        # Bounded by the run the statement is about (and the few running), not by the backlog.
        assert all(rows <= HANDFUL for _, rows in scans), (scans, statement)
        # A descent of an index and a few table pages, not a walk of the backlog's entries.
        pages = pages_read("job_runs", statement, params)
        assert all(touched <= PAGES for _, touched in pages), (pages, statement)
    assert scanned, "no statement scanned job_runs"


def test_the_delayed_run_take_stops_after_its_limit(in_flight: dict[str, JobRun]):
    due_at = NOW + timedelta(minutes=BACKLOG)  # every scheduled run is due
    (statement, params), *_ = _statements(
        lambda: sql.enqueue_due_runs(now=due_at, job_names=[DELAYED.name], limit=TAKE)
    )
    scans = rows_read("job_runs", statement, params)
    assert scans, statement
    # Bounded by the LIMIT (the due index read in due_at order), not the BACKLOG due.
    assert all(rows <= TAKE for _, rows in scans), (scans, statement)


def test_a_quiet_tick_pass_reads_no_backlog(in_flight: dict[str, JobRun]):
    # Quiet for the backlog, neither due nor stale (one run due, the cron run silent, its waiting
    # run stale): whatever the pass asks (its probe, the sweep and its hand-off, the take, the
    # requeue), it reads no more than a take.
    with registry.replaced(DELAYED, CRON):
        for statement, params in _statements(lambda: tick_pass(now=NOW)):
            scans = rows_read("job_runs", statement, params)
            assert all(rows <= TAKE for _, rows in scans), (scans, statement)


def test_the_backlog_is_in_flight(in_flight: dict[str, JobRun]):
    # The fixture's runs are really there: the backlog enqueued, the named runs as named.
    assert JobRun.objects.filter(status=RunStatus.ENQUEUED).count() == BACKLOG
    assert in_flight["running"].status == RunStatus.RUNNING
    assert in_flight["cron-silent"].status == RunStatus.RUNNING


@pytest.fixture
def claimed_for_later() -> None:
    """Statistics taken with job_runs empty (no column statistics: as never analysed), then
    LATER delayed runs claimed for the hours after NOW and DUE due at NOW (not analysed)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL plans")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE job_runs")
        cursor.execute(
            """
            INSERT INTO job_runs (job_name, subject, scheduled_for, due_at, status, trigger, attempts, created_at,
                                  worker, skip_reason, error, overlap)
            SELECT %(job)s, 'order:' || n, %(now)s + n * interval '1 second', %(now)s + n * interval '1 second',
                   'scheduled', 'delayed', 0, %(now)s, '', '', '', ''
            FROM generate_series(1 - %(due)s, %(later)s) AS n
            """,
            {"job": DELAYED.name, "now": NOW, "due": DUE, "later": LATER},
        )


def _entries_read(sql: str, params: Any, plan_cache_mode: str) -> list[tuple[str, int]]:
    """Each scan of job_runs in the statement's plan, prepared (PREPARE, its parameters,
    named or the ORM's positional ones, numbered) and executed under ``plan_cache_mode``: a
    custom plan for the parameters, or the generic plan a connection settles on after five
    runs; then undone. For each, the rows it read (returned, removed by filter or by a
    recheck) and, for a bitmap scan of one of job_runs' indexes, the entries it read."""
    if isinstance(params, dict):
        names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
        numbered = re.sub(r"%\((\w+)\)s", lambda name: f"${names.index(name[1]) + 1}", sql)
        values = [params[name] for name in names]
    else:
        numbers = itertools.count(1)
        numbered = re.sub(r"%s", lambda _: f"${next(numbers)}", sql)
        values = list(params)
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'job_runs'")
        indexes = {name for (name,) in cursor.fetchall()}
    arguments = ", ".join(["%s"] * len(values))
    prepared = False
    try:
        # Client-side binding: a utility statement (EXPLAIN EXECUTE) takes no bound parameters.
        with transaction.atomic(), psycopg.ClientCursor(connection.connection) as cursor:
            cursor.execute(f"SET LOCAL plan_cache_mode = {plan_cache_mode}")
            cursor.execute(f"PREPARE due_read AS {numbered}")
            prepared = True
            execute = f"EXECUTE due_read({arguments})" if values else "EXECUTE due_read"
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {execute}", values)
            row = cursor.fetchone()
            transaction.set_rollback(True)
    finally:
        if prepared:  # a prepared statement outlives the transaction
            with psycopg.ClientCursor(connection.connection) as cursor:
                cursor.execute("DEALLOCATE due_read")
    assert row is not None
    (plan,) = row
    return [
        (
            f"{node['Node Type']} {node.get('Index Name', '')}",
            (node["Actual Rows"] + node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0))
            * node["Actual Loops"],
        )
        for node in plan_nodes(plan[0]["Plan"])
        if (node.get("Relation Name") == "job_runs" and node["Node Type"] != "ModifyTable")
        or (node["Node Type"] == "Bitmap Index Scan" and node["Index Name"] in indexes)
    ]


def _take(runs: list[JobRun]) -> None:
    runs += sql.enqueue_due_runs(now=NOW, job_names=[DELAYED.name], limit=TAKE)
    assert len(runs) == DUE


def _find_pass_work() -> None:
    names = [DELAYED.name]
    work = sql.find_pass_work(started_before=NOW, due_by=NOW, active=names, enqueued_before=NOW, declared=names)
    assert work.due


DUE_READS = [
    pytest.param(lambda: _take([]), id="take"),
    pytest.param(lambda: sql.first_due_at(active=[DELAYED.name]), id="first-due"),
    pytest.param(_find_pass_work, id="pass-work"),
]


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("call", DUE_READS)
def test_a_read_of_due_runs_without_statistics_reads_only_the_due_runs(
    claimed_for_later: None, call: Callable[[], Any], plan_cache_mode: str
):
    for statement, params in _statements(call):
        scans = _entries_read(statement, params, plan_cache_mode)
        assert scans, statement
        # Bounded by the DUE runs, not by the LATER ones.
        assert all(rows <= DUE_READ for _, rows in scans), (scans, statement)


# The missed-run check's history: runs that finished before NOW, and the runs claimed for after it.
FINISHED = 20_000
# Each partial index runs_in_flight reads, by the kind of run it holds.
IN_FLIGHT_INDEXES = {"job_run_due", "job_run_status_rare", "job_run_enqueued_since", "job_run_running"}


@pytest.fixture
def check_history() -> None:
    """FINISHED runs finished before NOW and LATER delayed runs due after it, analysed;
    then (not analysed, as they come and go) DUE of each kind in flight at NOW: due and
    never enqueued, failed and abandoned (retrying, due after NOW), enqueued before NOW and
    after it, running."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL plans")
    runs = """
        INSERT INTO job_runs (job_name, subject, scheduled_for, due_at, status, trigger, attempts, created_at,
                              enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, overlap)
        SELECT %(job)s, %(kind)s || n, %(at)s + n * interval '1 second', %(due)s + n * interval '1 second',
               %(status)s, 'delayed', 1, %(at)s, %(enqueued)s, %(started)s, %(started)s, %(finished)s, '', '', '', ''
        FROM generate_series(1, %(count)s) AS n
    """
    early = NOW - timedelta(days=1)
    kinds = [
        ("finished:", RunStatus.SUCCEEDED, FINISHED, early, early, early, early),
        ("later:", RunStatus.SCHEDULED, LATER, NOW, None, None, None),
    ]
    in_flight = [
        ("due:", RunStatus.SCHEDULED, DUE, early, None, None, None),
        ("failed:", RunStatus.FAILED, DUE, NOW, None, None, early),
        ("abandoned:", RunStatus.ABANDONED, DUE, NOW, None, None, early),
        ("enqueued:", RunStatus.ENQUEUED, DUE, early, early, None, None),
        ("enqueued-later:", RunStatus.ENQUEUED, DUE, NOW, NOW, None, None),
        ("running:", RunStatus.RUNNING, DUE, early, early, early, None),
    ]
    with connection.cursor() as cursor:
        for batch in (kinds, in_flight):
            for kind, status, count, due, enqueued, started, finished in batch:
                values = {"enqueued": enqueued, "started": started, "finished": finished, "count": count}
                cursor.execute(
                    runs, {"job": DELAYED.name, "kind": kind, "at": early, "due": due, "status": status, **values}
                )
            if batch is kinds:
                cursor.execute("ANALYZE job_runs")


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_the_runs_in_flight_are_read_through_their_own_indexes(check_history: None, plan_cache_mode: str):
    window = CheckWindow.ending(NOW)
    problems = runs_in_flight(window=window)
    # Due, retrying (whenever due), enqueued by the horizon and running: not the later ones.
    assert len(problems) == 5 * DUE, problems
    (statement, params), *others = _statements(lambda: runs_in_flight(window=window))
    assert not others, others
    scans = _entries_read(statement, params, plan_cache_mode)
    # Each kind through its own index ("Index Scan job_run_due"; a Seq Scan names none) ...
    assert {scan.split(" ")[-1] for scan, _ in scans} == IN_FLIGHT_INDEXES, scans
    # ... reading the runs in flight (and, in job_run_due's range, the retries due by then),
    # not the FINISHED runs or the LATER ones.
    assert all(rows <= DUE_READ for _, rows in scans), scans


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_the_metrics_backlog_is_read_through_the_due_and_enqueued_indexes(check_history: None, plan_cache_mode: str):
    # Due and never enqueued, and enqueued (before NOW and at it); not the retries, due
    # after NOW, nor the LATER runs.
    assert sql.backlog(now=NOW, limit=10 * DUE) == sql.backlog(now=NOW, limit=100_000)
    waiting = sql.backlog(now=NOW, limit=100_000)
    assert (waiting.due, waiting.enqueued) == (DUE, 2 * DUE), waiting
    scans = []
    for statement, params in _statements(lambda: list(_backlog(NOW))):
        scans += _entries_read(statement, params, plan_cache_mode)
    # Through the two indexes ("Index Only Scan job_run_due"; a Seq Scan names none) ...
    assert {scan.split(" ")[-1] for scan, _ in scans} == {"job_run_due", "job_run_enqueued_since"}, scans
    # ... reading the runs due and enqueued, not the FINISHED runs or the LATER ones.
    assert all(rows <= DUE_READ for _, rows in scans), scans


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
def test_the_metrics_last_finishes_read_a_step_of_an_index_each(check_history: None, plan_cache_mode: str):
    early, older = NOW - timedelta(days=1), NOW - timedelta(days=8)
    # A weekly job's one success, older than every run of the delayed job: the walk of
    # job_run_finished (every final run, newest first) to it reads all FINISHED of them.
    JobRun.objects.create(**_fields(_run(CRON, -10_000, RunStatus.SUCCEEDED, finished_at=older, attempts=1)))
    with registry.replaced(DELAYED, CRON):
        schedules_register(now=NOW)
        finishes = jobs_last_finishes()
        (statement, params), *others = _statements(jobs_last_finishes)
    assert not others, others
    # The FINISHED succeeded runs, the failed and abandoned ones (finished, retrying).
    nothing = {"dead": None, "skipped": None, "superseded": None}
    assert finishes == {
        CRON.name: {"succeeded": older, "failed": None, "abandoned": None, **nothing},
        DELAYED.name: {"succeeded": early, "failed": early, "abandoned": early, **nothing},
    }
    scans = _entries_read(statement, params, plan_cache_mode)
    # Each job and status a backward step of job_run_job_finished: not the job's runs read
    # and sorted (the generic plan of ``status = $1``: a Seq Scan here, job_run_by_job on
    # more), nor the walk of job_run_finished to the weekly job's success (``status = 'succeeded'``).
    assert scans and all(rows <= DUE_READ for _, rows in scans), scans
    assert {scan.split(" ")[-1] for scan, _ in scans} == {"job_run_job_finished"}, scans
