"""The history prune: exactly what retention allows goes, in batches, and nothing inside
the claim guard horizon; before the horizon, manual claims, backfills and re-runs are refused."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
import time_machine
from axes.models import AccessAttempt, AccessFailureLog, AccessLog  # type: ignore[import-untyped]
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django_q.models import OrmQ, Task
from django_q.signing import SignedPackage

from operations.monitoring import runs_check
from operations.retention import HistoryPrune, history_prune
from payouts.models import Payout
from scheduling import services
from scheduling.checks import job_problems
from scheduling.dispatch import tick_pass
from scheduling.models import (
    JobRun,
    JobRunEvent,
    ProblemKind,
    RunAlert,
    RunStatus,
    Schedule,
    SchedulerNode,
    SkipReason,
    Trigger,
)
from scheduling.policies import claim_guard_horizon
from scheduling.queue import EXECUTE_TASK
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.engine import T0, make_job

NOW = T0  # 2027-03-01 12:00 UTC
DAY = timedelta(days=1)
# Look-back 20 days, check window 1 day: the horizon is 21 days back (20 + the 1-day margin),
# past the 14-day retention, so a finished cron run 15 days old is inside it and kept.
LOOKBACK_DAYS = 20
HORIZON = NOW - (LOOKBACK_DAYS + 1) * DAY

JOBS = (
    make_job("tick-job", cron="*/10 * * * *"),
    make_job("rare-job", cron="0 0 1 1 *"),
    make_job("delayed-job", delayed=True),
    make_job("kept-job", cron="0 * * * *", retention_days=None),
    make_job("month-job", delayed=True, retention_days=30),
)


@pytest.fixture
def jobs(settings: Any) -> Any:
    settings.SCHEDULER_LOOKBACK_SECONDS = LOOKBACK_DAYS * 86400
    settings.SCHEDULER_CHECK_WINDOW_SECONDS = 86400
    with registry.replaced(*JOBS):
        schedules_register(now=NOW - 200 * DAY)
        yield


def run(
    job_name: str,
    age: timedelta,
    status: RunStatus = RunStatus.SUCCEEDED,
    *,
    trigger: Trigger | None = None,
    finished_age: timedelta | None = None,
    subject: str | None = None,
) -> JobRun:
    """A run whose tick is ``age`` before NOW, finished ``finished_age`` before NOW (default:
    a minute after its tick), with two events."""
    delayed = job_name in ("delayed-job", "month-job", "cancel-stale-order")
    trigger = trigger or (Trigger.DELAYED if delayed else Trigger.CRON)
    scheduled_for = NOW - age
    final = status in (RunStatus.SUCCEEDED, RunStatus.SKIPPED, RunStatus.SUPERSEDED, RunStatus.DEAD)
    finished_at = NOW - (finished_age if finished_age is not None else age - timedelta(minutes=1))
    made = JobRun.objects.create(
        job_name=job_name,
        subject=subject if subject is not None else (f"order:{uuid.uuid4().int % 10**9}" if delayed else ""),
        scheduled_for=scheduled_for,
        due_at=scheduled_for,
        status=status,
        trigger=trigger,
        created_at=scheduled_for,
        enqueued_at=None if status in (RunStatus.SCHEDULED, RunStatus.SKIPPED) else scheduled_for,
        finished_at=finished_at if final else None,
        skip_reason=SkipReason.OVERLAP if status == RunStatus.SKIPPED else "",
    )
    for kind in ("claimed", str(status)):
        JobRunEvent.objects.create(run=made, at=scheduled_for, kind=kind)
    return made


def prune(batch_size: int = 1000, **kwargs: Any) -> HistoryPrune:
    return history_prune(now=NOW, batch_size=batch_size, **kwargs)


def remaining() -> set[int]:
    return set(JobRun.objects.values_list("id", flat=True))


@pytest.mark.django_db
def test_it_deletes_exactly_the_finished_runs_past_retention_and_outside_the_horizon(jobs):
    gone = [
        run("tick-job", 22 * DAY),
        run("tick-job", 22 * DAY + timedelta(minutes=10), RunStatus.SKIPPED),
        run("tick-job", 22 * DAY + timedelta(minutes=20), RunStatus.SUPERSEDED),
        run("tick-job", 23 * DAY, trigger=Trigger.MANUAL),
        run("tick-job", 91 * DAY, RunStatus.DEAD),
        run("delayed-job", 15 * DAY),  # a delayed run: retention alone, no horizon
        run("delayed-job", 91 * DAY, RunStatus.DEAD),
        run("month-job", 31 * DAY),  # its own 30 days
        run("renamed-job", 41 * DAY),  # no longer declared: the default retention
        run("rare-job", 400 * DAY),  # an older tick than the cursor
    ]
    kept = [
        run("tick-job", 15 * DAY),  # past retention, inside the horizon
        run("tick-job", 10 * DAY),
        run("delayed-job", 13 * DAY),  # inside its retention
        run("tick-job", 60 * DAY, RunStatus.DEAD),  # dead runs are kept 90 days
        run("delayed-job", 60 * DAY, RunStatus.DEAD),
        run("month-job", 25 * DAY),
        run("kept-job", 300 * DAY),  # retention_days=None
        run("rare-job", 30 * DAY),  # its newest cron tick: the scheduler's cursor
        run("renamed-job", 40 * DAY),  # the cursor of any job, declared or not
        *(
            run("tick-job", 100 * DAY + n * timedelta(minutes=10), status)
            for n, status in enumerate(
                [RunStatus.SCHEDULED, RunStatus.ENQUEUED, RunStatus.RUNNING, RunStatus.FAILED, RunStatus.ABANDONED]
            )
        ),
        run("delayed-job", 100 * DAY, RunStatus.SCHEDULED),
    ]
    result = prune()
    assert remaining() == {r.id for r in kept}
    assert (result.runs, result.cascaded) == (len(gone), 2 * len(gone))
    assert set(JobRunEvent.objects.values_list("run_id", flat=True)) == {r.id for r in kept}


@pytest.mark.django_db
def test_it_judges_age_by_when_a_run_finished_not_by_its_tick(jobs):
    # A delayed run due 20 days ago that died of retries only 5 days ago is not old.
    late_death = run("delayed-job", 100 * DAY, RunStatus.DEAD, finished_age=5 * DAY)
    due_next_month = run("delayed-job", -30 * DAY, RunStatus.SCHEDULED)
    prune()
    assert remaining() == {late_death.id, due_next_month.id}


@pytest.mark.django_db
def test_it_keeps_every_run_a_payout_references(jobs, restaurant):
    referenced = run("tick-job", 100 * DAY)
    Payout.objects.create(
        restaurant=restaurant,
        period_start=NOW - 107 * DAY,
        period_end=NOW - 100 * DAY,
        week_start_local=(NOW - 107 * DAY).date(),
        gross=Decimal("100.00"),
        commission=Decimal("15.00"),
        net=Decimal("85.00"),
        order_count=1,
        commission_rate=Decimal("0.15"),
        tzdata_version="2026f",
        job_run=referenced,
        fence=1,
        created_at=NOW - 100 * DAY,
    )
    unreferenced = run("tick-job", 100 * DAY + timedelta(minutes=10))
    result = prune()
    assert remaining() == {referenced.id}
    assert result.runs == 1 and unreferenced.id not in remaining()


@pytest.mark.django_db
def test_a_second_prune_of_the_same_tick_deletes_nothing(jobs):
    for n in range(5):
        run("tick-job", 30 * DAY + n * timedelta(minutes=10))
    run("tick-job", 1 * DAY)
    first = prune()
    second = prune()
    assert first.runs == 5
    assert second == HistoryPrune()


@pytest.mark.django_db
def test_it_deletes_in_batches_of_the_batch_size_each_reported(jobs):
    for n in range(7):
        run("tick-job", 30 * DAY + n * timedelta(minutes=10))
    run("tick-job", 1 * DAY)
    seen: list[HistoryPrune] = []
    result = prune(batch_size=2, on_batch=seen.append)
    run_batches = [p.runs for p in seen if p.runs or p.cascaded]
    assert result.runs == 7
    assert run_batches == [2, 4, 6, 7]  # running totals after each committed batch
    assert len(remaining()) == 1


@pytest.mark.django_db
@pytest.mark.postgres
def test_each_batch_runs_without_jit_on_postgresql(jobs):
    # The planner costs a batch by the whole prunable range, past jit_above_cost: with JIT
    # on, a 20 ms batch spent 1-2 s compiling each statement (bench.history, 3M runs).
    from django.test.utils import CaptureQueriesContext

    for n in range(5):
        run("tick-job", 30 * DAY + n * timedelta(minutes=10))
    run("tick-job", 1 * DAY)
    with CaptureQueriesContext(connection) as captured:
        prune(batch_size=2)
    statements = [q["sql"] for q in captured.captured_queries]
    picks = [i for i, sql in enumerate(statements) if sql.startswith("SELECT job_runs.finished_at, job_runs.id")]
    assert len(picks) >= 3  # batches of two
    assert all(statements[i - 1] == "SET LOCAL jit = off" for i in picks), statements
    assert len(remaining()) == 1


@pytest.mark.django_db
def test_it_prunes_django_q_results_and_queue_entries_no_run_needs(jobs):
    def task(stopped_age: timedelta, *, success: bool) -> str:
        task_id = uuid.uuid4().hex
        Task.objects.create(
            id=task_id,
            name=task_id[:8],
            func=EXECUTE_TASK,
            started=NOW - stopped_age,
            stopped=NOW - stopped_age,
            success=success,
        )
        return task_id

    kept_tasks = {task(13 * DAY, success=True), task(60 * DAY, success=False)}
    task(15 * DAY, success=True), task(91 * DAY, success=False)

    def entry(run_ids: list[int], *, lock_age: timedelta, func: str = EXECUTE_TASK) -> int:
        payload = SignedPackage.dumps({"id": uuid.uuid4().hex, "func": func, "args": (run_ids,), "kwargs": {}})
        return OrmQ.objects.create(key="tiffin", payload=payload, lock=NOW - lock_age).id

    finished = run("tick-job", 1 * DAY)
    waiting = run("tick-job", 2 * DAY, RunStatus.ENQUEUED)
    stale = entry([finished.id], lock_age=DAY)
    kept_entries = {
        entry([waiting.id, finished.id], lock_age=DAY),  # one of its runs can still start
        entry([finished.id], lock_age=timedelta(minutes=1)),  # too young to judge
        entry([finished.id], lock_age=DAY, func="someone.elses.task"),
    }
    result = prune()
    assert set(Task.objects.values_list("id", flat=True)) == kept_tasks
    assert set(OrmQ.objects.values_list("id", flat=True)) == kept_entries
    assert stale not in kept_entries and (result.task_results, result.queued_tasks) == (2, 1)


@pytest.mark.django_db
def test_it_forgets_resolved_alerts_and_gone_scheduler_nodes(jobs):
    def alert(n: int, resolved_age: timedelta | None) -> int:
        resolved_at = None if resolved_age is None else NOW - resolved_age
        return RunAlert.objects.create(
            job_name="tick-job",
            scheduled_for=NOW - 40 * DAY + n * timedelta(minutes=10),
            kind=ProblemKind.DEAD,
            alerted_at=NOW - 40 * DAY,
            resolved_at=resolved_at,
        ).id

    kept_alerts = {alert(0, None), alert(1, 29 * DAY)}
    alert(2, 31 * DAY)
    for name, age in (("gone:1", 8 * DAY), ("alive:2", timedelta(seconds=5))):
        SchedulerNode.objects.create(name=name, started_at=NOW - 9 * DAY, last_pass_at=NOW - age)
    result = prune()
    assert set(RunAlert.objects.values_list("id", flat=True)) == kept_alerts
    assert list(SchedulerNode.objects.values_list("name", flat=True)) == ["alive:2"]
    assert (result.alerts, result.nodes) == (1, 1)


@pytest.mark.django_db
def test_after_pruning_a_scheduler_pass_over_the_same_period_claims_nothing_again(settings):
    """Three weeks of real passes, finished and pruned: the passes after the prune (on
    time, and from a clock a whole look-back slow) claim nothing, and the check sees no gap."""
    settings.SCHEDULER_LOOKBACK_SECONDS = 2 * 86400
    settings.SCHEDULER_CHECK_WINDOW_SECONDS = 86400
    settings.SCHEDULER_MAX_TICKS_PER_PASS = 1000
    settings.SCHEDULER_RUN_RETENTION_DAYS = 3
    job = make_job("tick-job", cron="0 * * * *")
    start = NOW - 21 * DAY
    with registry.replaced(job):
        schedules_register(now=start)
        at = start
        while at < NOW:
            at += timedelta(hours=6)
            tick_pass(now=at)
            JobRun.objects.filter(status=RunStatus.ENQUEUED).update(status=RunStatus.SUCCEEDED, finished_at=at)
        claimed = JobRun.objects.count()
        pruned = history_prune(now=NOW, batch_size=100)
        again = [tick_pass(now=NOW), tick_pass(now=NOW - 2 * DAY), tick_pass(now=NOW + timedelta(minutes=30))]
        problems = runs_check(now=NOW)
    assert claimed == 21 * 24
    assert pruned.runs >= 17 * 24  # finished and ticked over 3 days ago (the horizon is 2 + 1 days)
    assert [report.claimed for report in again] == [[], [], []]
    assert JobRun.objects.order_by("-scheduled_for").first().scheduled_for == NOW  # type: ignore[union-attr]
    assert [p for p in problems if p.kind == ProblemKind.NEVER_CLAIMED] == []


@pytest.mark.django_db
def test_run_job_before_the_horizon_is_refused_and_writes_nothing(jobs):
    tick = HORIZON - timedelta(minutes=10)
    before = (
        JobRun.objects.count(),
        list(Schedule.objects.values_list("job_name", "registered_at")),
        OrmQ.objects.count(),
    )
    with time_machine.travel(NOW, tick=False), pytest.raises(CommandError, match="before the claim guard horizon"):
        call_command("run_job", "tick-job", "--scheduled-for", tick.isoformat(), stdout=StringIO())
    after = (
        JobRun.objects.count(),
        list(Schedule.objects.values_list("job_name", "registered_at")),
        OrmQ.objects.count(),
    )
    assert after == before


@pytest.mark.django_db
def test_run_job_just_inside_the_horizon_still_claims(jobs):
    tick = HORIZON + timedelta(minutes=10)
    with time_machine.travel(NOW, tick=False):
        call_command("run_job", "tick-job", "--scheduled-for", tick.isoformat(), stdout=StringIO())
    assert JobRun.objects.get().scheduled_for == tick


@pytest.mark.django_db
def test_a_backfill_or_re_run_before_the_horizon_is_refused_and_writes_nothing(jobs):
    dead = run("tick-job", 40 * DAY, RunStatus.DEAD)
    with pytest.raises(services.SchedulingError, match="before the claim guard horizon"):
        services.runs_backfill(job_name="tick-job", start=HORIZON - DAY, end=HORIZON + DAY, actor="ops", now=NOW)
    with pytest.raises(services.SchedulingError, match="before the claim guard horizon"):
        services.run_rerun(run_id=dead.id, actor="ops", now=NOW)
    dead.refresh_from_db()
    assert (JobRun.objects.count(), dead.status, OrmQ.objects.count()) == (1, RunStatus.DEAD, 0)


@pytest.mark.django_db
def test_a_job_that_keeps_every_run_may_still_be_claimed_before_the_horizon(jobs):
    # weekly-payouts keeps its runs (retention_days=None), so its claims are never forgotten
    # and a catch-up as of any date is as safe as ever.
    tick = datetime(2026, 1, 1, tzinfo=NOW.tzinfo)
    claimed = services.run_claim_manual(job_name="kept-job", scheduled_for=tick, now=NOW, enqueue=False)
    assert claimed is not None and claimed.scheduled_for < HORIZON
    assert registry.get("kept-job").retention_days is None


def test_the_horizon_is_the_longer_of_look_back_and_check_window_plus_a_day(settings):
    settings.SCHEDULER_LOOKBACK_SECONDS = 35 * 86400
    settings.SCHEDULER_CHECK_WINDOW_SECONDS = 86400
    assert claim_guard_horizon(now=NOW) == NOW - 36 * DAY
    settings.SCHEDULER_CHECK_WINDOW_SECONDS = 40 * 86400
    assert claim_guard_horizon(now=NOW) == NOW - 41 * DAY


def test_a_bad_retention_declaration_is_named():
    assert job_problems(make_job(retention_days=0)) == [
        "retention_days must be a whole number of days of at least 1, or None to keep every run"
    ]
    assert job_problems(make_job(retention_days=None)) == []
    assert registry.get("weekly-payouts").retention_days is None
    assert registry.has("prune-history")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_run_another_transaction_holds_is_skipped_not_waited_for(jobs):
    held, free = run("tick-job", 30 * DAY), run("tick-job", 30 * DAY + timedelta(minutes=10))
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                JobRun.objects.select_for_update().get(id=held.id)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        result = prune()
    finally:
        release.set()
        holder.join()
    assert result.runs == 1 and remaining() == {held.id}
    assert free.id not in remaining()


@pytest.mark.django_db
def test_it_forgets_expired_login_counts_and_old_login_logs(settings):
    """django-axes' failed-login counts go once the lockout's cool-off has passed; its logs
    of logins and failures after LOGIN_LOG_RETENTION_DAYS; newer ones stay."""
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    settings.LOGIN_LOG_RETENTION_DAYS = 30

    def record(model: Any, age: timedelta, **fields: Any) -> int:
        # One attempt row per (username, address, user agent): the age stands in for the agent.
        row = model.objects.create(username="ops", ip_address="198.51.100.7", user_agent=f"agent {age}", **fields)
        model.objects.filter(id=row.id).update(attempt_time=NOW - age)  # attempt_time is auto_now_add
        return row.id

    counted = {
        "get_data": "",
        "post_data": "",
        "http_accept": "",
        "path_info": "/admin/login/",
        "failures_since_start": 3,
    }
    kept_attempts = {record(AccessAttempt, timedelta(minutes=14), **counted)}
    record(AccessAttempt, timedelta(minutes=16), **counted)
    kept_logs = {record(AccessLog, 29 * DAY, path_info="/admin/login/", http_accept="")}
    record(AccessLog, 31 * DAY, path_info="/admin/login/", http_accept="")
    kept_failures = {record(AccessFailureLog, 29 * DAY, path_info="/admin/login/", http_accept="", locked_out=True)}
    record(AccessFailureLog, 31 * DAY, path_info="/admin/login/", http_accept="", locked_out=False)
    result = prune()
    assert set(AccessAttempt.objects.values_list("id", flat=True)) == kept_attempts
    assert set(AccessLog.objects.values_list("id", flat=True)) == kept_logs
    assert set(AccessFailureLog.objects.values_list("id", flat=True)) == kept_failures
    assert result.logins == 3
    assert prune() == HistoryPrune()  # nothing more
