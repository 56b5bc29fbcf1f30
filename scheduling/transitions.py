"""How a started run ends: succeeded, failed (retry later), abandoned, dead, and the
hand-off to the next waiting run of a ``queue`` job.

Every update is conditional on (status = running, fence = the run's fence): a worker
that lost its run (abandoned, superseded, re-run elsewhere) cannot overwrite the state
the newer attempt wrote. Its late word is recorded as an event instead.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from scheduling import metrics, sql
from scheduling.events import runs_record
from scheduling.models import ENQUEUED_OF_A_JOB, JobRun, Overlap, RunStatus
from scheduling.pings import job_ping_on_commit
from scheduling.queue import enqueue_runs
from scheduling.registry import Job

logger = logging.getLogger("scheduling.runs")


def _owned(run: JobRun) -> Q:
    return Q(id=run.id, status=RunStatus.RUNNING, fence=run.fence)


def runs_succeed(*, job: Job, runs: list[JobRun], now: datetime, result: Any) -> list[JobRun]:
    """Mark ``runs`` succeeded; return the ones that were no longer this worker's.

    Set-based: one conditional update of the runs still owned (``sql.succeed_runs``)
    tells which they were, so the update and the list of lost runs agree. One UPDATE
    per run cost a batch of 200 delayed runs 200 round trips, half of the worker's time
    in bench/cancellations.py.
    """
    with transaction.atomic():
        owned = sql.succeed_runs(runs, now=now, result=result)
        lost = [run for run in runs if run.id not in owned]
        for run in runs:
            if run.id in owned:
                run.status, run.finished_at, run.result = RunStatus.SUCCEEDED, now, result
        runs_record([r for r in runs if r.id in owned], kind="succeeded", now=now)
        runs_record(lost, kind="finish_rejected", now=now, message="the run was no longer this worker's")
        metrics.runs_finished_observe(runs=[r for r in runs if r.id in owned], outcome=RunStatus.SUCCEEDED, now=now)
        metrics.fence_rejected_count(stage="finish", count=len(lost))
        queue_hand_off(job=job, now=now)
        if len(lost) < len(runs):
            job_ping_on_commit(job_name=job.name, failed=False)
    return lost


def runs_fail(*, job: Job, runs: list[JobRun], now: datetime, error: str, abandoned: bool = False) -> RunStatus | None:
    """Record a failed attempt of each run: retry after backoff, or dead when out of attempts.

    ``abandoned`` marks a run that stopped showing signs of life. Returns the outcome of
    the last run (None if no run was still this worker's).
    """
    outcome: RunStatus | None = None
    with transaction.atomic():
        for run in runs:
            outcome = _fail_one(job=job, run=run, now=now, error=error, abandoned=abandoned)
        queue_hand_off(job=job, now=now)
    return outcome


def _fail_one(*, job: Job, run: JobRun, now: datetime, error: str, abandoned: bool) -> RunStatus | None:
    out_of_attempts = run.attempts >= job.max_attempts
    status = RunStatus.DEAD if out_of_attempts else (RunStatus.ABANDONED if abandoned else RunStatus.FAILED)
    retry_at = now + timedelta(seconds=job.backoff_for(run.attempts))
    changed = JobRun.objects.filter(_owned(run)).update(
        status=status, finished_at=now, error=error[:10000], due_at=run.due_at if out_of_attempts else retry_at
    )
    if not changed:
        runs_record([run], kind="fail_rejected", now=now, message=error)
        metrics.fence_rejected_count(stage="finish")
        return None
    metrics.runs_finished_observe(runs=[run], outcome=status, now=now, timed=not abandoned)
    run.status, run.finished_at, run.error = status, now, error
    runs_record([run], kind=str(status), now=now, message=error)
    if status == RunStatus.DEAD:
        logger.error("run %s of %s is dead after %s attempts: %s", run.id, job.name, run.attempts, error[:300])
        job_ping_on_commit(job_name=job.name, failed=True, body=error)
    return status


def queue_hand_off(*, job: Job, now: datetime) -> None:
    """Once nothing runs, enqueue the oldest waiting run that queues: any of a ``queue``
    job, or one that queues by its own choice (a backfill run one after another).

    A waiting run's own task found a run in progress and left it ``enqueued``; this
    gives it another task. A duplicate is harmless (the start is conditional).
    """
    waiting = JobRun.objects.filter(ENQUEUED_OF_A_JOB, job_name=job.name)
    if job.overlap != Overlap.QUEUE:
        if not job.is_cron:
            return
        waiting = waiting.filter(overlap=Overlap.QUEUE)
    if JobRun.objects.filter(job_name=job.name, status=RunStatus.RUNNING).exists():
        return
    head = waiting.order_by("scheduled_for", "id").first()
    if head is not None:
        enqueue_runs(job_name=job.name, run_ids=[head.id])
