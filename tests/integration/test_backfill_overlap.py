"""A backfill of a job that forbids overlap: by default its ticks run one after another
(each waits, enqueued, until the one before it has finished, then is handed its task),
so two workers taking two of its tasks at once no longer skip one of them; under the
job's own policy they do, as the job's ticks would."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine

from scheduling.context import RunContext
from scheduling.execution import runs_call_handler, runs_start
from scheduling.models import JobRun, JobRunEvent, Overlap, RunStatus, SkipReason, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from scheduling.services import runs_backfill
from tests.engine import T0, drain_queue, make_job, queued_tasks

NIGHTLY = make_job("nightly-clean", cron="0 2 * * *", overlap=Overlap.FORBID)
NOW = T0 + timedelta(days=4)


@pytest.fixture(autouse=True)
def nightly(db):
    with registry.replaced(NIGHTLY), time_machine.travel(NOW, tick=False):
        schedules_register(now=T0 - timedelta(days=2))
        yield


def _backfill(**choice: bool) -> list[JobRun]:
    return runs_backfill(
        job_name=NIGHTLY.name, start=T0, end=T0 + timedelta(days=3), actor="operator", now=NOW, **choice
    )


def _workers_take_at_once(runs: list[JobRun]) -> list[RunContext]:
    """Each run's task taken by its own worker before any of them has finished: the
    contexts of the runs that started."""
    return [c for run in runs for c in runs_start(job=NIGHTLY, run_ids=[run.id], now=NOW, worker="w")]


def test_by_default_a_backfill_runs_its_ticks_one_after_another_and_none_is_skipped():
    runs = _backfill()
    assert len(runs) == 3
    tasks_before = len(queued_tasks())
    started = _workers_take_at_once(runs)
    assert [c.run_id for c in started] == [runs[0].id]
    assert dict(JobRun.objects.values_list("id", "status")) == {
        runs[0].id: RunStatus.RUNNING,
        runs[1].id: RunStatus.ENQUEUED,  # waiting, not skipped
        runs[2].id: RunStatus.ENQUEUED,
    }
    # The first one finishes: the next, oldest first, is handed a task of its own.
    runs_call_handler(job=NIGHTLY, contexts=started)
    assert [task["args"][0] for task in queued_tasks()[tasks_before:]] == [[runs[1].id]]
    drain_queue()
    done = JobRun.objects.filter(trigger=Trigger.BACKFILL).order_by("scheduled_for")
    assert [r.status for r in done] == [RunStatus.SUCCEEDED] * 3
    # Started oldest first, each once: the events follow the order of the writes.
    started_order = JobRunEvent.objects.filter(kind="started").order_by("id").values_list("run_id", flat=True)
    assert list(started_order) == [run.id for run in runs]


def test_under_the_jobs_own_policy_two_workers_at_once_skip_one_as_forbid_says():
    runs = _backfill(one_after_another=False)
    assert [c.run_id for c in _workers_take_at_once(runs)] == [runs[0].id]
    skipped = JobRun.objects.filter(status=RunStatus.SKIPPED).order_by("scheduled_for")
    assert [(r.id, r.skip_reason) for r in skipped] == [
        (runs[1].id, SkipReason.OVERLAP),
        (runs[2].id, SkipReason.OVERLAP),
    ]
