"""The scheduler loop sleeps to computed instants, never by fixed intervals."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import override_settings

from scheduling import services, sql
from scheduling.dispatch import next_wakeup, runs_enqueue_due, tick_pass
from scheduling.execution import runs_start
from scheduling.loop import ERROR_BACKOFF_SECONDS, SchedulerLoop
from scheduling.models import JobRun, JobRunEvent, RunStatus, SchedulerNode
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.engine import T0, make_job, queued_tasks
from tests.locks import held_in_thread


@pytest.mark.django_db
def test_next_wakeup_is_the_next_cron_tick_or_the_next_due_run():
    hourly = make_job("hourly", cron="0 * * * *")
    later = make_job("later", delayed=True)
    with registry.replaced(hourly, later):
        assert next_wakeup(now=T0 + timedelta(minutes=1)) == T0 + timedelta(hours=1)
        services.run_schedule_delayed(job_name="later", subject="x:1", scheduled_for=T0 + timedelta(minutes=7), now=T0)
        assert next_wakeup(now=T0 + timedelta(minutes=1)) == T0 + timedelta(minutes=7)


@pytest.mark.django_db
def test_it_wakes_for_the_next_due_run_its_pass_read_without_asking_again(django_assert_num_queries):
    hourly = make_job("hourly", cron="0 * * * *")
    later = make_job("later", delayed=True)
    with registry.replaced(hourly, later):
        services.run_schedule_delayed(job_name="later", subject="x:1", scheduled_for=T0 + timedelta(minutes=7), now=T0)
        report = tick_pass(now=T0 + timedelta(minutes=1))
        assert (report.first_due_known, report.first_due) == (True, T0 + timedelta(minutes=7))
        with django_assert_num_queries(0):
            assert next_wakeup(now=T0 + timedelta(minutes=1), report=report) == T0 + timedelta(minutes=7)
        # A pass that took due runs does not know the next one: it is read again.
        report = tick_pass(now=T0 + timedelta(minutes=8))
        assert (report.enqueued_due, report.first_due_known) == (1, False)
        assert next_wakeup(now=T0 + timedelta(minutes=8), report=report) == T0 + timedelta(hours=1)


@override_settings(SCHEDULER_POLL_SECONDS=3600)
@pytest.mark.django_db
def test_a_pass_sleeps_exactly_until_the_next_tick_and_stamps_its_node():
    with (
        registry.replaced(make_job("hourly", cron="0 * * * *")),
        time_machine.travel(T0 + timedelta(minutes=59, seconds=30), tick=False),
    ):
        loop = SchedulerLoop(name="test-node")
        sleep = loop.process_one_pass()
    assert sleep == pytest.approx(30.0, abs=0.01)
    node = SchedulerNode.objects.get(name="test-node")
    assert (node.passes, node.last_pass_at) == (1, T0 + timedelta(minutes=59, seconds=30))


@override_settings(SCHEDULER_POLL_SECONDS=2.5)
@pytest.mark.django_db
def test_the_poll_cap_bounds_the_sleep():
    # The next tick is 15 hours away: the loop sleeps the whole poll interval, no less
    # (a loop that never slept would spin) and no more (a new delayed run waits at most that).
    with registry.replaced(make_job("daily", cron="0 3 * * *")), time_machine.travel(T0, tick=False):
        assert SchedulerLoop(name="n").process_one_pass() == pytest.approx(2.5, abs=0.01)


@pytest.mark.django_db
def test_a_pass_after_an_outage_claims_the_missed_ticks():
    with registry.replaced(make_job("hourly", cron="0 * * * *")):
        with time_machine.travel(T0, tick=False):
            SchedulerLoop(name="n").process_one_pass()
        with time_machine.travel(T0 + timedelta(hours=3, minutes=5), tick=False):
            SchedulerLoop(name="n").process_one_pass()
    assert JobRun.objects.count() == 3


@pytest.mark.django_db
def test_a_pass_that_raises_something_other_than_a_database_error_backs_off_instead_of_ending_the_loop(caplog):
    def broken(*, now):
        raise RuntimeError("a pre_enqueue handler refused")

    loop = SchedulerLoop(name="test-node")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("scheduling.loop.tick_pass", broken)
        delay = loop.process_one_pass_safely()
    assert delay == ERROR_BACKOFF_SECONDS
    assert "a pre_enqueue handler refused" in caplog.text


@pytest.mark.django_db
def test_after_a_pass_that_abandoned_a_run_it_wakes_for_that_runs_retry():
    job = make_job("hourly", cron="0 * * * *", timeout_seconds=300, backoff_seconds=10, max_attempts=3)
    with registry.replaced(job):
        schedules_register(now=T0 - timedelta(minutes=1))
        tick_pass(now=T0)
        [run] = JobRun.objects.filter(job_name="hourly")
        runs_start(job=job, run_ids=[run.id], now=T0, worker="frozen")
        later = T0 + timedelta(seconds=301)
        report = tick_pass(now=later)
        assert report.abandoned == 1
        assert next_wakeup(now=later, report=report) == later + timedelta(seconds=10)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_schedulers_taking_due_runs_at_once_take_each_run_once(settings):
    # Each pass takes at most 30 of the 100 due runs; one holds its rows locked while the
    # other takes its own: SKIP LOCKED hands them disjoint runs, each with one event and
    # one task.
    settings.SCHEDULER_DUE_BATCH = 30
    later = make_job("later", delayed=True)
    with registry.replaced(later):
        for n in range(100):
            services.run_schedule_delayed(job_name="later", subject=f"x:{n}", scheduled_for=T0, now=T0)
        taken: dict[str, list[int]] = {}

        def first() -> None:
            taken["first"] = [run.id for run in sql.enqueue_due_runs(now=T0, job_names=["later"], limit=30)]

        with held_in_thread(first):
            count, more_due = runs_enqueue_due(now=T0, paused=set())
        taken["second"] = list(
            JobRun.objects.filter(status=RunStatus.ENQUEUED).exclude(id__in=taken["first"]).values_list("id", flat=True)
        )
    assert (count, more_due) == (30, True)
    assert len(taken["first"]) == len(taken["second"]) == 30
    assert not set(taken["first"]) & set(taken["second"])
    enqueued_events = JobRunEvent.objects.filter(kind="enqueued").values_list("run_id", flat=True)
    assert sorted(enqueued_events) == sorted(taken["first"] + taken["second"])
    assert sorted(run_id for task in queued_tasks() for run_id in task["args"][0]) == sorted(taken["second"])


def generic_plans(work: Callable[[], object]) -> list[str]:
    """The plans of the statements ``work`` runs, each planned once for any parameters, as
    a prepared statement may be after five runs (tiffin/env.py), and with sequential scans
    priced out, as on a table too large to read whole (this one has a row or two), through
    auto_explain."""
    plans: list[str] = []
    connection.ensure_connection()
    connection.connection.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    with connection.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL auto_explain.log_min_duration = 0")
        cursor.execute("SET LOCAL auto_explain.log_nested_statements = on")
        cursor.execute("SET LOCAL auto_explain.log_level = notice")
    work()
    with connection.cursor() as cursor:
        # auto_explain reports a statement when its portal closes: the next one.
        cursor.execute("SELECT 1")
    return plans


# With the statuses as a parameter a generic plan cannot use job_run_due, and read
# job_runs whole on every scheduler pass; they are literals (scheduling/queries.py).


@pytest.fixture
def one_due_run() -> Iterator[None]:
    """A delayed job "later" with one run, subject "x", due at T0."""
    with registry.replaced(make_job("later", delayed=True)):
        services.run_schedule_delayed(job_name="later", subject="x", scheduled_for=T0, now=T0)
        yield


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_due_run_pick_uses_its_partial_index_even_in_a_generic_plan(one_due_run):
    taken: list[str] = []
    plans = generic_plans(
        lambda: taken.extend(run.subject for run in sql.enqueue_due_runs(now=T0, job_names=["later"], limit=30))
    )
    assert taken == ["x"]
    picks = [plan for plan in plans if "FOR UPDATE SKIP LOCKED" in plan]
    assert picks and "job_run_due" in picks[-1], plans


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_first_due_run_after_a_pass_is_read_from_its_partial_index_even_in_a_generic_plan(one_due_run):
    first: list[object] = []
    plans = generic_plans(lambda: first.append(sql.first_due_at(active=["later"])))
    assert first == [T0]
    reads = [plan for plan in plans if "ORDER BY due_at LIMIT 1" in plan]
    assert reads and "job_run_due" in reads[-1], plans
