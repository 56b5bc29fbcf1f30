"""Executing runs on a worker: start (with the overlap policy and a new fence), call
the handler with a context, then hand the outcome to ``transitions``.

django-q2's ORM broker delivers at least once, so the same task may arrive twice, even
concurrently. The start is a conditional update (enqueued -> running): the second
delivery finds nothing to start and returns without calling the handler.
"""

from __future__ import annotations

import json
import os
import socket
import traceback
from datetime import datetime
from typing import cast

from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError, connection, transaction

from scheduling import metrics, sql
from scheduling.context import RunContext
from scheduling.events import runs_log, runs_record
from scheduling.models import ENQUEUED_OF_A_JOB, JobRun, Overlap, RunStatus, SkipReason
from scheduling.policies import OverlapDecision, overlap_blockers, overlap_decide
from scheduling.registry import Job, registry
from scheduling.transitions import runs_fail, runs_succeed
from tiffin import clock


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def runs_execute(*, run_ids: list[int], worker: str) -> list[RunContext]:
    """Start ``run_ids`` (all of one job) and run the handler; return the contexts run.

    The clock is read at each transition (start, finish): this is the edge.
    """
    job_name = sql.job_of_runs(run_ids) if run_ids else None
    if job_name is None:
        return []
    job = registry.get(job_name)
    started = _runs_start(job=job, run_ids=run_ids, now=clock.now(), worker=worker)
    contexts = _contexts(started)
    if contexts:
        runs_call_handler(job=job, contexts=contexts, runs=started)
    return contexts


def runs_call_handler(*, job: Job, contexts: list[RunContext], runs: list[JobRun] | None = None) -> None:
    """Call the handler of started runs and record the outcome (succeeded or failed).
    ``runs``: the same runs as they were started, if the caller has them (else read)."""
    if runs is None:
        runs = list(JobRun.objects.filter(id__in=[c.run_id for c in contexts]).order_by("id"))
    try:
        result = job.handler(contexts) if job.batch_size > 1 else job.handler(contexts[0])
        # Stored as JSON: a result that cannot be is the handler's failure, not the worker's.
        json.dumps(result, cls=DjangoJSONEncoder)
    # The boundary where anything a handler raises becomes a failed attempt (with its
    # traceback) instead of killing the worker; retries are job_runs' business. That
    # includes BaseException: a handler that calls sys.exit() or is interrupted would
    # otherwise leave its run "running" until the timeout, and its cause in no record.
    except BaseException as exc:
        if isinstance(exc, DatabaseError) and not connection.in_atomic_block:
            # The database went away mid-run: reconnect to record the failure.
            connection.close()
        runs_fail(job=job, runs=runs, now=clock.now(), error=traceback.format_exc(limit=8))
        if not isinstance(exc, Exception):
            raise  # recorded; a SystemExit or KeyboardInterrupt still stops the process, as it asked
        return
    runs_succeed(job=job, runs=runs, now=clock.now(), result=result)


def runs_start(*, job: Job, run_ids: list[int], now: datetime, worker: str) -> list[RunContext]:
    """Move enqueued runs to running with a new fence, applying the overlap policy.

    1. Under a transaction-scoped advisory lock on the job (unless overlap is allow),
       read the runs still enqueued; none means a duplicate delivery: return.
    2. Decide the overlap policy: start, wait (queue) or skip (forbid, or replace
       behind a newer run); replace supersedes the older running runs.
    3. Take one fence from the sequence and start with a conditional update; only
       rows still enqueued change, so a concurrent duplicate starts nothing.

    With overlap allowed there is nothing to decide, so steps 1 and 2 are skipped: the
    conditional update of step 3 alone tells which runs were still enqueued (a delayed
    job's batch of 200 runs was read whole only to learn their ids).
    """
    return _contexts(_runs_start(job=job, run_ids=run_ids, now=now, worker=worker))


def _runs_start(*, job: Job, run_ids: list[int], now: datetime, worker: str) -> list[JobRun]:
    """``runs_start``, returning the runs started as they now are."""
    with transaction.atomic():
        if not _overlap_governs(job=job, run_ids=run_ids):
            return _start(run_ids=run_ids, now=now, worker=worker)
        sql.lock_job(job.name)
        pending = list(JobRun.objects.filter(id__in=run_ids, status=RunStatus.ENQUEUED).order_by("id"))
        starting = [run.id for run in pending if _apply_overlap(job=job, run=run, now=now) == OverlapDecision.START]
        return _start(run_ids=starting, now=now, worker=worker) if starting else []


def _overlap_governs(*, job: Job, run_ids: list[int]) -> bool:
    """Whether starting these runs needs the overlap lock and decision: the job's policy
    is not ``allow``, or a cron job's run follows another (a backfill's choice). Delayed
    jobs, never backfilled, are spared the extra read."""
    if job.overlap != Overlap.ALLOW:
        return True
    return job.is_cron and JobRun.objects.filter(id__in=run_ids).exclude(overlap="").exists()


def _start(*, run_ids: list[int], now: datetime, worker: str) -> list[JobRun]:
    started = sql.start_runs(run_ids=run_ids, fence=sql.next_fence(), now=now, worker=worker)
    runs_log(started, kind="started", now=now)
    metrics.runs_started_observe(runs=started, now=now)
    return started


def _contexts(started: list[JobRun]) -> list[RunContext]:
    return [
        RunContext(
            run_id=run.id,
            job_name=run.job_name,
            subject=run.subject,
            scheduled_for=run.scheduled_for,
            fence=cast(int, run.fence),  # written by the start
            attempt=run.attempts,
            trigger=run.trigger,
        )
        for run in started
    ]


def _apply_overlap(*, job: Job, run: JobRun, now: datetime) -> OverlapDecision:
    running = runs_running(job=job, exclude_id=run.id)
    policy = run.overlap_policy(job.overlap)
    blockers = runs_blocking(job=job, scheduled_for=run.scheduled_for, running=running, policy=policy)
    decision = overlap_decide(policy=policy, blockers=blockers)
    if decision == OverlapDecision.SKIP:
        _skip_for_overlap(run=run, running=running, now=now)
    elif decision == OverlapDecision.START and run.overlap_policy(job.overlap) == Overlap.REPLACE:
        _supersede(older=running, by=run, now=now)
    return decision


def runs_blocking(
    *, job: Job, scheduled_for: datetime, running: list[JobRun], policy: str | None = None
) -> list[JobRun]:
    """``policies.overlap_blockers`` of a run at ``scheduled_for`` under ``policy`` (a
    run's own, default its job's), with the older runs still waiting read for a queue
    policy (the only one that needs them)."""
    policy = policy or job.overlap
    waiting: list[JobRun] = []
    if policy == Overlap.QUEUE:
        waiting = list(
            JobRun.objects.filter(ENQUEUED_OF_A_JOB, job_name=job.name, scheduled_for__lt=scheduled_for).order_by(
                "scheduled_for", "id"
            )
        )
    return overlap_blockers(policy=policy, scheduled_for=scheduled_for, running=running, waiting=waiting)


def runs_running(*, job: Job, exclude_id: int | None = None) -> list[JobRun]:
    """The job's runs now running (served by the partial index job_run_running)."""
    running = JobRun.objects.filter(job_name=job.name, status=RunStatus.RUNNING).order_by("id")
    return list(running.exclude(id=exclude_id) if exclude_id is not None else running)


def _skip_for_overlap(*, run: JobRun, running: list[JobRun], now: datetime) -> None:
    holders = ", ".join(f"run {other.id} ({other.scheduled_for:%Y-%m-%d %H:%M})" for other in running)
    JobRun.objects.filter(id=run.id, status=RunStatus.ENQUEUED).update(
        status=RunStatus.SKIPPED, skip_reason=SkipReason.OVERLAP, finished_at=now
    )
    run.status, run.skip_reason = RunStatus.SKIPPED, SkipReason.OVERLAP
    runs_record([run], kind="skipped", now=now, message=f"overlap: still running {holders}")


def _supersede(*, older: list[JobRun], by: JobRun, now: datetime) -> None:
    message = f"superseded by run {by.id} ({by.scheduled_for:%Y-%m-%d %H:%M}); its fence is now stale"
    JobRun.objects.filter(id__in=[run.id for run in older], status=RunStatus.RUNNING).update(
        status=RunStatus.SUPERSEDED, finished_at=now, error=message
    )
    for run in older:
        run.status = RunStatus.SUPERSEDED
    runs_record(older, kind="superseded", now=now, message=message)
    metrics.runs_finished_observe(runs=older, outcome=RunStatus.SUPERSEDED, now=now, timed=False)
