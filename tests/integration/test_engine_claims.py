"""Claims: one run per logical tick, whoever and however many ask."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.signals import pre_enqueue
from django_q.tasks import async_task

from orders.models import Restaurant
from scheduling import queue, queue_bulk, services
from scheduling.dispatch import runs_requeue_stale, tick_pass
from scheduling.models import JobRun, JobRunEvent, RunStatus, Schedule, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from scheduling.sql import SubjectInsert
from tests.engine import T0, make_job, queued_tasks


def _in_thread(fn):
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return wrapper


@pytest.mark.django_db
def test_it_claims_each_due_tick_once_and_enqueues_it():
    job = make_job(cron="*/10 * * * *")
    with registry.replaced(job):
        schedules_register(now=T0)
        report = tick_pass(now=T0 + timedelta(minutes=35))
        again = tick_pass(now=T0 + timedelta(minutes=35))
    assert [c.scheduled_for for c in report.claimed] == [T0 + timedelta(minutes=m) for m in (10, 20, 30)]
    assert again.claimed == []
    assert JobRun.objects.filter(status=RunStatus.ENQUEUED, trigger=Trigger.CRON).count() == 3
    assert len(queued_tasks()) == 3


@pytest.mark.django_db
def test_it_never_claims_ticks_before_the_job_was_first_seen():
    job = make_job(cron="*/10 * * * *")
    with registry.replaced(job):
        schedules_register(now=T0)
        schedules_register(now=T0 + timedelta(hours=5))  # a later server start keeps first_seen_at
        tick_pass(now=T0 + timedelta(minutes=15))
    assert Schedule.objects.get().first_seen_at == T0
    assert list(JobRun.objects.values_list("scheduled_for", flat=True)) == [T0 + timedelta(minutes=10)]


@pytest.mark.django_db
def test_a_manual_run_of_a_claimed_tick_runs_nothing():
    job = make_job(cron="*/10 * * * *")
    with registry.replaced(job):
        schedules_register(now=T0)
        tick_pass(now=T0 + timedelta(minutes=10))
        second = services.run_claim_manual(
            job_name=job.name, scheduled_for=T0 + timedelta(minutes=10), now=T0 + timedelta(minutes=11)
        )
    assert second is None
    assert JobRun.objects.count() == 1


@pytest.mark.django_db
def test_a_delayed_run_rolled_back_with_its_transaction_leaves_nothing():
    job = make_job("later", delayed=True)
    with registry.replaced(job), pytest.raises(RuntimeError), transaction.atomic():
        services.run_schedule_delayed(job_name="later", subject="order:1", scheduled_for=T0, now=T0)
        raise RuntimeError("the order failed to save")
    assert JobRun.objects.count() == 0


def _restaurant_insert(name: str) -> SubjectInsert:
    # Any table will do for a subject; a restaurant needs no other row.
    return SubjectInsert(
        sql="INSERT INTO orders_restaurant (name, timezone, commission_rate, onboarded_at, is_active) "
        "VALUES (%s, 'UTC', 0.1, %s, %s) RETURNING id, name",
        params=(name, T0, True),
        subject_prefix="restaurant:",
    )


@pytest.mark.django_db
def test_a_new_subject_and_its_delayed_run_are_written_together():
    with registry.replaced(make_job("later", delayed=True)):
        (subject_id, name), run = services.run_schedule_delayed_with_subject(
            job_name="later", subject=_restaurant_insert("Udupi"), scheduled_for=T0 + timedelta(minutes=5), now=T0
        )
    assert name == "Udupi"
    assert run is not None
    stored = JobRun.objects.get()
    assert (stored.pk, stored.subject, stored.status, stored.due_at) == (
        run.pk,
        f"restaurant:{subject_id}",
        RunStatus.SCHEDULED,
        T0 + timedelta(minutes=5),
    )
    assert list(JobRunEvent.objects.values_list("run_id", "kind")) == [(run.pk, "claimed")]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("job", "prefix", "message"),
    [
        (make_job("reports"), "restaurant:", "is a cron job"),
        (make_job("later", delayed=True), "", "needs a prefix"),
    ],
)
def test_a_subject_insert_for_a_cron_job_or_without_a_prefix_is_refused_and_writes_nothing(job, prefix, message):
    subject = dataclasses.replace(_restaurant_insert("Udupi"), subject_prefix=prefix)
    with registry.replaced(job), pytest.raises(services.SchedulingError, match=message):
        services.run_schedule_delayed_with_subject(job_name=job.name, subject=subject, scheduled_for=T0, now=T0)
    assert not JobRun.objects.exists()
    assert not Restaurant.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_32_threads_claiming_the_same_tick_get_exactly_one_run():
    job = make_job(cron="*/10 * * * *")
    barrier = threading.Barrier(32)

    @_in_thread
    def claim(_: int):
        barrier.wait()
        return services.run_claim_manual(job_name=job.name, scheduled_for=T0, now=T0 + timedelta(minutes=1))

    with registry.replaced(job):
        schedules_register(now=T0)
        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(claim, range(32)))
    assert sum(run is not None for run in results) == 1
    assert JobRun.objects.filter(job_name=job.name).count() == 1
    assert len(queued_tasks()) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_tick_passes_over_200_ticks_produce_exactly_200_runs():
    job_a = make_job("every-minute", cron="* * * * *")
    job_b = make_job("every-other-minute", cron="*/2 * * * *")
    start = T0 - timedelta(minutes=200)
    barrier = threading.Barrier(8)

    @_in_thread
    def one_pass(offset: int):
        barrier.wait()
        # Each "server" sees a slightly different now; all are past the 200th tick.
        return tick_pass(now=T0 + timedelta(seconds=offset))

    with registry.replaced(job_a, job_b):
        schedules_register(now=start)
        with ThreadPoolExecutor(8) as pool:
            reports = list(pool.map(one_pass, range(8)))
    assert JobRun.objects.filter(job_name="every-minute").count() == 200
    assert JobRun.objects.filter(job_name="every-other-minute").count() == 100
    assert sum(len(r.claimed) for r in reports) == 300
    assert len(queued_tasks()) == 300


@pytest.mark.django_db
def test_a_pass_claims_every_jobs_due_ticks_in_one_statement():
    jobs = [make_job(f"job-{i}", cron="*/10 * * * *") for i in range(5)]
    with registry.replaced(*jobs):
        schedules_register(now=T0)
        with CaptureQueriesContext(connection) as queries:
            report = tick_pass(now=T0 + timedelta(minutes=25))
    claims = [q for q in queries.captured_queries if "INSERT INTO job_runs" in q["sql"]]
    assert len(report.claimed) == 10
    assert len(claims) == 1
    assert JobRunEvent.objects.filter(kind="claimed").count() == 10
    assert len(queued_tasks()) == 10


def _queue_refusing(job_name: str) -> AbstractContextManager[object]:
    """django-q2's queue refusing every task of ``job_name`` (a pre_enqueue handler that raises)."""

    def refuse(sender: object, task: dict[str, object], **kwargs: object) -> None:
        if task["group"] == job_name:
            raise RuntimeError("the queue refused the task")

    @contextmanager
    def connected() -> Iterator[None]:
        pre_enqueue.connect(refuse)
        try:
            yield
        finally:
            pre_enqueue.disconnect(refuse)

    return connected()


@pytest.mark.django_db
def test_a_job_whose_enqueue_fails_costs_only_its_own_ticks():
    jobs = [make_job("before", cron="*/10 * * * *"), make_job("broken"), make_job("after")]
    with registry.replaced(*jobs):
        schedules_register(now=T0)
        with _queue_refusing("broken"), pytest.raises(RuntimeError, match="refused"):
            tick_pass(now=T0 + timedelta(minutes=10))
        claimed = sorted(JobRun.objects.values_list("job_name", flat=True))
        tasks = sorted(task["group"] for task in queued_tasks())
        retried = tick_pass(now=T0 + timedelta(minutes=11))
    assert claimed == tasks == ["after", "before"]
    assert [(c.job_name, c.scheduled_for) for c in retried.claimed] == [("broken", T0 + timedelta(minutes=10))]


@pytest.mark.django_db
def test_a_cron_job_whose_claim_fails_still_lets_the_pass_hand_out_due_delayed_runs():
    jobs = [make_job("broken"), make_job("cancel-later", delayed=True)]
    with registry.replaced(*jobs):
        schedules_register(now=T0)
        with transaction.atomic():
            services.run_schedule_delayed(job_name="cancel-later", subject="order:1", scheduled_for=T0, now=T0)
        with _queue_refusing("broken"), pytest.raises(RuntimeError, match="refused"):
            tick_pass(now=T0 + timedelta(minutes=10))
        delayed = JobRun.objects.get(job_name="cancel-later")
    assert delayed.status == RunStatus.ENQUEUED
    assert [task["group"] for task in queued_tasks()] == ["cancel-later"]
    assert not JobRun.objects.filter(job_name="broken").exists()


@pytest.mark.django_db
def test_a_task_enqueued_in_a_batch_is_the_task_async_task_stores():
    with registry.replaced(make_job("reports")):
        async_task(queue.EXECUTE_TASK, [7, 8], task_name="reports:7", group="reports")
        queue_bulk.enqueue_runs_bulk(tasks=[("reports", [7, 8])])
    by_django_q, batched = queued_tasks()
    assert by_django_q.keys() == batched.keys()
    assert {k: v for k, v in by_django_q.items() if k not in ("id", "started")} == {
        k: v for k, v in batched.items() if k not in ("id", "started")
    }
    assert len(batched["id"]) == len(by_django_q["id"]) == 32
    assert list(OrmQ.objects.values_list("key", flat=True).distinct()) == [get_broker().list_key]


@pytest.mark.django_db
def test_a_pass_with_no_silent_due_or_stale_runs_locks_no_run():
    with registry.replaced(make_job(cron="*/10 * * * *"), make_job("later", delayed=True)):
        schedules_register(now=T0)
        tick_pass(now=T0 + timedelta(minutes=10))
        with CaptureQueriesContext(connection) as queries:
            report = tick_pass(now=T0 + timedelta(minutes=11))
    assert (report.abandoned, report.enqueued_due, report.requeued) == (0, 0, 0)
    assert not [q for q in queries.captured_queries if "FOR UPDATE" in q["sql"]]


@pytest.mark.django_db
def test_a_stale_run_whose_task_is_still_queued_is_not_requeued_and_one_without_a_task_is():
    # Two runs left 'enqueued' past the requeue delay: one's task still waits in django-q2's
    # queue table (behind a backlog: the broker will deliver it), the other's is gone (a
    # task acknowledged without starting its run). Only the second gets another task.
    with registry.replaced(make_job(cron="*/10 * * * *")):
        schedules_register(now=T0)
        tick_pass(now=T0 + timedelta(minutes=10))
        tick_pass(now=T0 + timedelta(minutes=20))
        waiting, lost = JobRun.objects.order_by("scheduled_for")
        OrmQ.objects.all().delete()
        queue.enqueue_runs(job_name=waiting.job_name, run_ids=[waiting.id])
        assert queue.queued_run_ids(among=[waiting.id, lost.id]) == {waiting.id}
        later = T0 + timedelta(minutes=20, seconds=settings.SCHEDULER_REQUEUE_AFTER_SECONDS + 1)
        assert runs_requeue_stale(now=later) == 1
    assert queue.queued_run_ids(among=[waiting.id, lost.id]) == {waiting.id, lost.id}
    assert queue.queued_run_ids(among=[lost.id]) == {lost.id}
    assert OrmQ.objects.count() == 2
    assert list(JobRunEvent.objects.filter(kind="requeued").values_list("run_id", flat=True)) == [lost.id]


@pytest.mark.django_db
def test_a_stale_run_whose_task_a_cluster_took_and_never_acknowledged_is_requeued():
    # A failover: a worker's cluster took the task (django-q2 moves its lock ahead) and
    # lost the database before starting the run or acknowledging the task. The broker
    # would hand it out again only after Q_RETRY_SECONDS; the scheduler requeues the run.
    with registry.replaced(make_job(cron="*/10 * * * *")):
        schedules_register(now=T0)
        tick_pass(now=T0 + timedelta(minutes=10))
        (run,) = JobRun.objects.all()
        assert queue.queued_run_ids(among=[run.id]) == {run.id}
        OrmQ.objects.update(lock=timezone.now() + timedelta(seconds=60))  # taken: dequeue moves the lock ahead
        assert queue.queued_run_ids(among=[run.id]) == set()
        later = T0 + timedelta(minutes=10, seconds=settings.SCHEDULER_REQUEUE_AFTER_SECONDS + 1)
        assert runs_requeue_stale(now=later) == 1
    assert list(JobRunEvent.objects.filter(kind="requeued").values_list("run_id", flat=True)) == [run.id]
