"""Execution: duplicate deliveries, overlap and misfire policies, retries, abandonment, fencing."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.test import override_settings

from scheduling import services
from scheduling.context import RunContext, RunLostError
from scheduling.dispatch import tick_pass
from scheduling.execution import runs_execute, runs_start
from scheduling.fencing import StaleFenceError, fence_check
from scheduling.models import Fence, JobRun, Misfire, Overlap, RunStatus, SkipReason
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.engine import T0, drain_queue, make_job, queued_tasks


def _claim(job, minutes: int):
    run = services.run_claim_manual(
        job_name=job.name, scheduled_for=T0 + timedelta(minutes=minutes), now=T0 + timedelta(minutes=minutes)
    )
    assert run is not None
    return run


def _status(run) -> str:
    run.refresh_from_db()
    return run.status


@pytest.mark.django_db
def test_a_duplicate_delivery_runs_the_handler_once():
    calls: list[RunContext] = []
    job = make_job(handler=calls.append)
    with registry.replaced(job), time_machine.travel(T0, tick=False):
        run = _claim(job, 0)
        runs_execute(run_ids=[run.id], worker="w1")
        runs_execute(run_ids=[run.id], worker="w2")
    assert len(calls) == 1
    assert _status(run) == RunStatus.SUCCEEDED
    assert run.attempts == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_deliveries_of_one_task_run_the_handler_once():
    calls: list[int] = []
    job = make_job(handler=lambda ctx: calls.append(ctx.fence))
    barrier = threading.Barrier(4)

    def deliver(run_id: int) -> int:
        try:
            barrier.wait()
            return len(runs_execute(run_ids=[run_id], worker="w"))
        finally:
            connection.close()

    with registry.replaced(job), time_machine.travel(T0, tick=False):
        run = _claim(job, 0)
        with ThreadPoolExecutor(4) as pool:
            started = list(pool.map(deliver, [run.id] * 4))
    assert sorted(started) == [0, 0, 0, 1]
    assert len(calls) == 1


def _start_blocking_run(job, minutes: int):
    """A run of ``job`` that is running (started, handler not finished)."""
    run = _claim(job, minutes)
    [ctx] = runs_start(job=job, run_ids=[run.id], now=T0 + timedelta(minutes=minutes), worker="slow")
    return run, ctx


@pytest.mark.django_db
def test_overlap_forbid_records_the_new_tick_as_skipped():
    job = make_job(overlap=Overlap.FORBID)
    with registry.replaced(job), time_machine.travel(T0 + timedelta(minutes=10), tick=False):
        first, _ = _start_blocking_run(job, 0)
        second = _claim(job, 10)
        assert runs_execute(run_ids=[second.id], worker="w") == []
    assert _status(first) == RunStatus.RUNNING
    assert _status(second) == RunStatus.SKIPPED
    assert second.skip_reason == SkipReason.OVERLAP


@pytest.mark.django_db
def test_overlap_queue_starts_the_waiting_run_when_the_running_one_ends():
    job = make_job(overlap=Overlap.QUEUE)
    with registry.replaced(job), time_machine.travel(T0 + timedelta(minutes=10), tick=False):
        first, _ctx = _start_blocking_run(job, 0)
        second = _claim(job, 10)
        assert runs_execute(run_ids=[second.id], worker="w") == []
        assert _status(second) == RunStatus.ENQUEUED
        from scheduling.transitions import runs_succeed

        runs_succeed(job=job, runs=[JobRun.objects.get(id=first.id)], now=T0 + timedelta(minutes=12), result=None)
        # The hand-off enqueued the waiting run; a worker now starts it.
        drain_queue()
    assert _status(first) == RunStatus.SUCCEEDED
    assert _status(second) == RunStatus.SUCCEEDED


@pytest.mark.django_db
def test_overlap_replace_supersedes_the_running_run_and_its_fence_goes_stale():
    job = make_job(overlap=Overlap.REPLACE)
    with registry.replaced(job), time_machine.travel(T0 + timedelta(minutes=10), tick=False):
        first, old_ctx = _start_blocking_run(job, 0)
        second, new_ctx = _start_blocking_run(job, 10)
        with transaction.atomic():
            fence_check("ledger", new_ctx.fence, now=T0)
        with pytest.raises(StaleFenceError), transaction.atomic():
            fence_check("ledger", old_ctx.fence, now=T0)
        with pytest.raises(RunLostError):
            old_ctx.heartbeat()
    assert _status(first) == RunStatus.SUPERSEDED
    assert _status(second) == RunStatus.RUNNING
    assert new_ctx.fence > old_ctx.fence


@pytest.mark.django_db
def test_overlap_allow_runs_both():
    job = make_job(overlap=Overlap.ALLOW)
    with registry.replaced(job), time_machine.travel(T0 + timedelta(minutes=10), tick=False):
        first, _ = _start_blocking_run(job, 0)
        second, _ = _start_blocking_run(job, 10)
    assert (_status(first), _status(second)) == (RunStatus.RUNNING, RunStatus.RUNNING)


@pytest.mark.parametrize(
    ("misfire", "deadline", "expected"),
    [
        (Misfire.CATCH_UP, None, ["enqueued"] * 6),
        (Misfire.COALESCE, None, ["skipped"] * 5 + ["enqueued"]),
        # now is 12:65 -> ticks at :10.. :60 are 55..5 minutes late; deadline 20 min.
        (Misfire.DEADLINE, 20 * 60, ["skipped"] * 4 + ["enqueued"] * 2),
    ],
)
@pytest.mark.django_db
def test_misfire_policies_after_an_outage(misfire, deadline, expected):
    job = make_job(cron="*/10 * * * *", misfire=misfire, misfire_deadline_seconds=deadline)
    with registry.replaced(job):
        schedules_register(now=T0)
        # The scheduler was down for an hour: the first pass after it sees six missed ticks.
        tick_pass(now=T0 + timedelta(minutes=65))
    runs = list(JobRun.objects.order_by("scheduled_for"))
    assert [r.status for r in runs] == expected
    reasons = {r.skip_reason for r in runs if r.status == RunStatus.SKIPPED}
    assert reasons <= {SkipReason.COALESCED if misfire == Misfire.COALESCE else SkipReason.MISSED_DEADLINE}
    assert len(queued_tasks()) == expected.count("enqueued")


@override_settings(SCHEDULER_MAX_TICKS_PER_PASS=4)
@pytest.mark.django_db
def test_after_a_long_outage_every_missed_tick_gets_a_row_over_several_passes():
    job = make_job(cron="*/10 * * * *", misfire=Misfire.COALESCE)
    now = T0 + timedelta(minutes=105)
    with registry.replaced(job):
        schedules_register(now=T0)
        reports = [tick_pass(now=now) for _ in range(4)]
    assert [len(r.claimed) for r in reports] == [4, 4, 2, 0]
    assert [r.more_due for r in reports] == [True, True, False, False]
    runs = list(JobRun.objects.order_by("scheduled_for"))
    assert [r.scheduled_for for r in runs] == [T0 + timedelta(minutes=10 * n) for n in range(1, 11)]
    assert [r.status for r in runs] == [RunStatus.SKIPPED] * 9 + [RunStatus.ENQUEUED]


@pytest.mark.django_db
def test_a_paused_job_records_its_ticks_as_skipped_and_runs_none():
    job = make_job(cron="*/10 * * * *")
    with registry.replaced(job):
        schedules_register(now=T0)
        services.schedule_pause(job_name=job.name, actor="ops", now=T0)
        tick_pass(now=T0 + timedelta(minutes=25))
        services.schedule_resume(job_name=job.name, actor="ops", now=T0 + timedelta(minutes=25))
        tick_pass(now=T0 + timedelta(minutes=31))
    assert [(r.status, r.skip_reason) for r in JobRun.objects.order_by("scheduled_for")] == [
        (RunStatus.SKIPPED, SkipReason.PAUSED),
        (RunStatus.SKIPPED, SkipReason.PAUSED),
        (RunStatus.ENQUEUED, ""),
    ]


def _failing(ctx):
    raise ValueError(f"boom on attempt {ctx.attempt}")


@pytest.mark.django_db
def test_a_failing_run_is_retried_with_backoff_then_dead():
    job = make_job(handler=_failing, max_attempts=3, backoff_seconds=60)
    with registry.replaced(job):
        schedules_register(now=T0)
        with time_machine.travel(T0, tick=False):
            run = _claim(job, 0)
            drain_queue()
        assert _status(run) == RunStatus.FAILED
        assert run.due_at == T0 + timedelta(seconds=60)
        assert tick_pass(now=T0 + timedelta(seconds=59)).enqueued_due == 0
        for attempt_at in (T0 + timedelta(seconds=60), T0 + timedelta(seconds=60 + 120)):
            with time_machine.travel(attempt_at, tick=False):
                assert tick_pass(now=attempt_at).enqueued_due == 1
                drain_queue()
    assert _status(run) == RunStatus.DEAD
    assert run.attempts == 3
    assert "boom on attempt 3" in run.error
    assert [e.kind for e in run.events.all()].count("failed") == 2


def _exits(ctx):
    raise SystemExit("the handler called sys.exit: config file missing")


def _interrupted(ctx):
    with transaction.atomic():
        JobRun.objects.filter(id=ctx.run_id).update(worker="written by the handler")
        raise KeyboardInterrupt


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("handler", "raised", "cause"),
    [
        (_exits, SystemExit, "SystemExit: the handler called sys.exit: config file missing"),
        (_interrupted, KeyboardInterrupt, "KeyboardInterrupt"),
    ],
)
def test_a_handler_that_raises_a_base_exception_fails_its_run_with_the_cause_and_still_stops(handler, raised, cause):
    job = make_job(handler=handler, max_attempts=3, backoff_seconds=60)
    with registry.replaced(job), time_machine.travel(T0, tick=False):
        run = _claim(job, 0)
        with pytest.raises(raised):  # recorded, then passed on: the process stops as asked
            runs_execute(run_ids=[run.id], worker="w1")
    assert _status(run) == RunStatus.FAILED  # not left running until its timeout
    assert (run.finished_at, run.due_at) == (T0, T0 + timedelta(seconds=60))
    assert cause in run.error
    assert run.worker == "w1"  # the handler's own transaction rolled back
    assert [e.kind for e in run.events.all()].count("failed") == 1


@pytest.mark.django_db
def test_an_abandoned_run_is_rerun_with_a_new_fence_and_the_old_fence_is_refused():
    writes: list[int] = []

    def pay(ctx):
        with transaction.atomic():
            fence_check("payouts", ctx.fence, now=ctx.scheduled_for)
            writes.append(ctx.fence)

    job = make_job(handler=pay, timeout_seconds=300, backoff_seconds=10, max_attempts=3)
    with registry.replaced(job):
        schedules_register(now=T0)
        with time_machine.travel(T0, tick=False):
            run = _claim(job, 0)
            # A worker starts the run, then freezes (SIGSTOP) before writing anything.
            [lost] = runs_start(job=job, run_ids=[run.id], now=T0, worker="frozen")
        later = T0 + timedelta(seconds=301)
        assert tick_pass(now=later).abandoned == 1
        assert _status(run) == RunStatus.ABANDONED
        retry_at = later + timedelta(seconds=10)
        with time_machine.travel(retry_at, tick=False):
            tick_pass(now=retry_at)
            drain_queue()
        assert _status(run) == RunStatus.SUCCEEDED
        assert run.fence > lost.fence
        # The frozen worker wakes up and tries its write: the fence refuses it.
        with pytest.raises(StaleFenceError), transaction.atomic():
            fence_check("payouts", lost.fence, now=retry_at)
        with pytest.raises(RunLostError):
            lost.heartbeat()
    assert writes == [run.fence]
    assert [e.kind for e in run.events.order_by("id")] == [
        "claimed",
        "started",
        "abandoned",
        "enqueued",
        "started",
        "succeeded",
    ]


@pytest.mark.django_db
def test_a_lost_worker_is_refused_at_the_write_before_the_new_attempt_has_written():
    job = make_job(timeout_seconds=300, backoff_seconds=60)
    with registry.replaced(job):
        schedules_register(now=T0)
        with time_machine.travel(T0, tick=False):
            run = _claim(job, 0)
            [lost] = runs_start(job=job, run_ids=[run.id], now=T0, worker="frozen")
        # Its token is still the highest the ledger has seen, but the run is abandoned.
        assert tick_pass(now=T0 + timedelta(seconds=301)).abandoned == 1
        with (
            time_machine.travel(T0 + timedelta(seconds=302), tick=False),
            pytest.raises(StaleFenceError, match=f"run {run.id} is no longer running"),
            transaction.atomic(),
        ):
            lost.fence_check("ledger")
    assert not Fence.objects.filter(resource="ledger").exists()


@pytest.mark.django_db
def test_a_running_run_passes_its_own_fence_check():
    job = make_job()
    with registry.replaced(job), time_machine.travel(T0, tick=False):
        [ctx] = runs_start(job=job, run_ids=[_claim(job, 0).id], now=T0, worker="w")
        with transaction.atomic():
            ctx.fence_check("ledger")
    assert Fence.objects.get(resource="ledger").token == ctx.fence


@pytest.mark.django_db
def test_delayed_runs_are_enqueued_in_batches_when_due():
    seen: list[list[str]] = []
    job = make_job("cancel", delayed=True, batch_size=3, handler=lambda batch: seen.append([c.subject for c in batch]))
    with registry.replaced(job):
        schedules_register(now=T0)
        for n in range(7):
            services.run_schedule_delayed(
                job_name="cancel", subject=f"order:{n}", scheduled_for=T0 + timedelta(minutes=10), now=T0
            )
        assert tick_pass(now=T0 + timedelta(minutes=9)).enqueued_due == 0
        assert tick_pass(now=T0 + timedelta(minutes=10)).enqueued_due == 7
        with time_machine.travel(T0 + timedelta(minutes=10), tick=False):
            drain_queue()
    assert sorted(len(batch) for batch in seen) == [1, 3, 3]
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 7


@override_settings(SCHEDULER_DUE_BATCH=3)
@pytest.mark.django_db
def test_due_runs_of_a_job_no_longer_declared_do_not_block_the_others():
    gone = make_job("renamed-away", delayed=True)
    here = make_job("still-here", delayed=True)
    with registry.replaced(gone):
        for n in range(3):
            services.run_schedule_delayed(job_name=gone.name, subject=f"x:{n}", scheduled_for=T0, now=T0)
    with registry.replaced(here):
        services.run_schedule_delayed(job_name=here.name, subject="y:1", scheduled_for=T0, now=T0)
        report = tick_pass(now=T0 + timedelta(minutes=1))
    assert (report.enqueued_due, report.more_due) == (1, False)
    assert JobRun.objects.get(job_name=here.name).status == RunStatus.ENQUEUED
    assert set(JobRun.objects.filter(job_name=gone.name).values_list("status", flat=True)) == {RunStatus.SCHEDULED}


@pytest.mark.parametrize(("heartbeat", "abandoned"), [(True, 0), (False, 1)])
@pytest.mark.django_db
def test_only_a_job_that_heartbeats_extends_its_lease_by_heartbeating(heartbeat, abandoned):
    job = make_job(timeout_seconds=300, heartbeat=heartbeat)
    with registry.replaced(job):
        schedules_register(now=T0)
        with time_machine.travel(T0, tick=False):
            [ctx] = runs_start(job=job, run_ids=[_claim(job, 0).id], now=T0, worker="w")
        with time_machine.travel(T0 + timedelta(seconds=250), tick=False):
            ctx.heartbeat()
        assert tick_pass(now=T0 + timedelta(seconds=400)).abandoned == abandoned
