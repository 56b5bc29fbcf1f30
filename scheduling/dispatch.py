"""Tick and dispatch: one scheduler pass, safe on any number of servers at once.

A pass (``tick_pass``):

1. reads the stored schedules with every cron job's cursor (one statement), registering
   the declared jobs first (idempotent upsert) if any is missing or changed;
2. for every cron job, computes the logical ticks due since its last claimed tick
   (never "now minus an interval") and applies the misfire policy; then claims every
   job's ticks with INSERT ... ON CONFLICT DO NOTHING, all in one transaction (job by
   job if it fails: ``cron_ticks_claim``, the statement itself ``queries.CLAIM_RUNS``);
   only the winner enqueues, in the same transaction;
3. abandons running runs that stopped showing signs of life;
4. enqueues due delayed runs and due retries, taken with FOR UPDATE SKIP LOCKED;
5. re-enqueues runs that sat in ``enqueued`` too long (a lost task or a queue head).
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from scheduling import cron, metrics, sql
from scheduling.events import claim_event_kind, runs_log, runs_record
from scheduling.models import JobRun, RunStatus, Schedule, Trigger
from scheduling.policies import PlannedTick, misfire_plan
from scheduling.queue import queued_run_ids
from scheduling.queue_bulk import enqueue_runs_bulk
from scheduling.registry import Job, registry
from scheduling.schedules import schedules_ensure
from scheduling.transitions import runs_fail

logger = logging.getLogger("scheduling.dispatch")


@dataclass(frozen=True)
class ClaimedTick:
    job_name: str
    scheduled_for: datetime
    status: str
    skip_reason: str


@dataclass
class TickReport:
    now: datetime
    claimed: list[ClaimedTick] = field(default_factory=list)
    abandoned: int = 0
    dead: int = 0
    enqueued_due: int = 0
    requeued: int = 0
    # True when a batch limit was hit: the loop should come back at once.
    more_due: bool = False
    # The earliest due_at of a waiting delayed run or retry, as the pass's probe read it,
    # when the pass took none (else unknown: None and first_due_known False).
    first_due: datetime | None = None
    first_due_known: bool = False

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["now"] = self.now.isoformat()
        data["claimed"] = [{**asdict(c), "scheduled_for": c.scheduled_for.isoformat()} for c in self.claimed]
        return data


def tick_pass(*, now: datetime) -> TickReport:
    """One pass of the scheduler at ``now`` (see the module doc for the steps)."""
    schedules = schedules_ensure(now=now)
    report = TickReport(now=now)
    plans, report.more_due = cron_jobs_plan(schedules=schedules, now=now)
    # A cron job whose claim keeps failing must not stop the rest of the pass: the due
    # delayed runs (every order's cancellation), retries and abandonments still go out,
    # then its error is raised, so the failure is never silent.
    claim_error: Exception | None = None
    try:
        report.claimed = cron_ticks_claim(plans=plans, now=now)
    except Exception as error:  # re-raised below, after steps 3 to 5
        claim_error = error
    paused = {name for name, schedule in schedules.items() if schedule.paused}
    work = pass_work_find(now=now, paused=paused)
    if work.long_running_jobs:
        report.abandoned, report.dead = runs_abandon_silent(now=now, suspects=work.long_running_jobs)
    if work.due:
        report.enqueued_due, more_due = runs_enqueue_due(now=now, paused=paused)
        report.more_due = report.more_due or more_due
    elif not report.abandoned:
        # Read before this pass's abandonments: each of those is a retry due after its
        # backoff, which the probe could not see (then next_wakeup asks again).
        report.first_due, report.first_due_known = work.first_due, True
    if work.stale:
        report.requeued = runs_requeue_stale(now=now)
    if claim_error is not None:
        raise claim_error
    return report


def pass_work_find(*, now: datetime, paused: set[str]) -> sql.PassWork:
    """Which of the run queries (steps 3 to 5) have anything to take, in one statement
    without locks. Each step's own query locks and re-checks its rows, so a run that
    turns silent, due or stale after this read is taken by the next pass, as one
    arriving just after the step's own query always was. Why: the steps' locking
    queries nearly always find nothing (docs/benchmark-history.md)."""
    jobs = registry.all()
    shortest_timeout = min((job.timeout_seconds for job in jobs), default=0)
    return sql.find_pass_work(
        started_before=now - timedelta(seconds=shortest_timeout),
        due_by=now,
        active=[job.name for job in jobs if job.name not in paused],
        enqueued_before=now - timedelta(seconds=settings.SCHEDULER_REQUEUE_AFTER_SECONDS),
        declared=[job.name for job in jobs],
    )


@dataclass(frozen=True)
class CronPlan:
    """The due ticks of one cron job in this pass, each with its misfire decision."""

    job: Job
    ticks: list[PlannedTick]


def cron_jobs_plan(*, schedules: dict[str, sql.ScheduleState], now: datetime) -> tuple[list[CronPlan], bool]:
    """Every cron job's due ticks after its cursor (read with the schedules), with their misfire decisions (only the
    jobs with any); and whether a job has more due ticks than one pass takes (after a
    long outage: the loop comes back at once for the rest)."""
    limit = settings.SCHEDULER_MAX_TICKS_PER_PASS
    plans, more = [], False
    for job in registry.cron_jobs():
        schedule = schedules[job.name]
        ticks = cron_job_due_ticks(job=job, schedule=schedule, now=now)
        if ticks:
            planned = misfire_plan(job=job, ticks=ticks, now=now, paused=schedule.paused, limit=limit)
            plans.append(CronPlan(job, planned))
            more = more or len(ticks) > limit
    return plans, more


def cron_job_due_ticks(*, job: Job, schedule: sql.ScheduleState, now: datetime) -> list[datetime]:
    """Ticks after the cursor (or first sighting), within the bounded look-back, up to now."""
    lookback = now - timedelta(seconds=settings.SCHEDULER_LOOKBACK_SECONDS)
    bounds = [b for b in (schedule.cursor, schedule.first_seen_at, lookback) if b is not None]
    return cron.ticks_between(job.cron, job.timezone, max(bounds), now)


def cron_ticks_claim(*, plans: list[CronPlan], now: datetime) -> list[ClaimedTick]:
    """Claim the planned ticks of every job (planned after cursors read at the start of
    the pass: another server's claim since then only makes a tick lose ON CONFLICT),
    enqueue the ones won that should run; return the ones this server won.

    1. All the jobs' claims, with their events and the winners' tasks, in one
       transaction: one claim statement for the whole pass.
    2. If it fails, none of it is kept: claims, events and tasks roll back together and
       no cursor moved, so the next pass plans the same ticks again. The jobs are then
       claimed one transaction each, so a job whose claim or enqueue keeps failing
       costs only its own ticks, never another job's; its error is raised once the
       others are committed, so the failure is never silent.
    """
    rows = [claim_row(plan.job.name, "", planned, Trigger.CRON, now) for plan in plans for planned in plan.ticks]
    try:
        with transaction.atomic():
            won = claim_rows_insert(rows, now=now)
    except Exception:  # any: nothing of the transaction is kept, and each job is retried alone
        logger.warning("the pass's claims failed together; claiming job by job", exc_info=True)
        won, error = [], None
        for plan in plans:
            try:
                with transaction.atomic():
                    job_won = claim_rows_insert([row for row in rows if row.job_name == plan.job.name], now=now)
            except Exception as job_error:  # the first is raised below, once the other jobs are committed
                logger.exception("claiming the due ticks of %s failed; the other jobs' claims stand", plan.job.name)
                error = error or job_error
            else:
                claims_log(job_won, now=now)
                won += job_won
        if error is not None:
            raise error from None
    else:
        claims_log(won, now=now)
    return [ClaimedTick(run.job_name, run.scheduled_for, run.status, run.skip_reason) for run in won]


def runs_claim(
    *,
    job: Job,
    plan: list[PlannedTick],
    trigger: Trigger,
    now: datetime,
    subject: str = "",
    enqueue: bool = True,
    overlap: str = "",
) -> list[JobRun]:
    """Claim the planned runs of one job (delayed, manual, backfill) and enqueue the ones
    won that should run (unless the caller executes them itself); return them. Call
    inside a transaction: claim and enqueue commit together. ``overlap``: the policy the
    runs follow instead of the job's (a backfill's)."""
    rows = [claim_row(job.name, subject, planned, trigger, now, overlap) for planned in plan]
    won = claim_rows_insert(rows, now=now, enqueue=enqueue)
    claims_log(won, now=now)
    return won


def claim_rows_insert(rows: list[sql.ClaimRow], *, now: datetime, enqueue: bool = True) -> list[JobRun]:
    """Insert the claim rows (``sql.claim_runs``), count them per job, and enqueue one task
    per run won that should run; return the runs won in claim key order.

    The rows go in claim key order (job_name, subject, scheduled_for), so two servers
    claiming the same ticks wait for each other's keys in the same order and cannot deadlock.
    """
    rows = sorted(rows, key=lambda row: (row.job_name, row.subject, row.scheduled_for))
    won = sorted(sql.claim_runs(rows), key=lambda run: (run.job_name, run.subject, run.scheduled_for))
    attempted, won_per_job = Counter(row.job_name for row in rows), Counter(run.job_name for run in won)
    for job_name, count in attempted.items():
        metrics.claims_count(job_name=job_name, won=won_per_job[job_name], attempted=count)
    if enqueue:
        enqueue_runs_bulk(tasks=[(run.job_name, [run.id]) for run in won if run.status == RunStatus.ENQUEUED])
    return won


def claims_log(won: list[JobRun], *, now: datetime) -> None:
    """The log lines of the runs a claim won (their events were written with the claims)."""
    for kind, runs in itertools.groupby(won, key=claim_event_kind):
        runs_log(list(runs), kind=kind, now=now)


def claim_row(
    job_name: str, subject: str, planned: PlannedTick, trigger: Trigger, now: datetime, overlap: str = ""
) -> sql.ClaimRow:
    """The claim of one planned run: due at its logical time, enqueued or skipped at ``now``."""
    return sql.ClaimRow(
        job_name=job_name,
        subject=subject,
        scheduled_for=planned.scheduled_for,
        due_at=planned.scheduled_for,
        status=planned.status,
        trigger=trigger,
        created_at=now,
        enqueued_at=now if planned.status == RunStatus.ENQUEUED else None,
        finished_at=now if planned.status == RunStatus.SKIPPED else None,
        skip_reason=planned.skip_reason,
        overlap=overlap,
    )


def runs_abandon_silent(*, now: datetime, suspects: Collection[str] | None = None) -> tuple[int, int]:
    """Mark running runs with no sign of life for longer than their job's timeout.

    An abandoned run counts as a failed attempt: it is retried after backoff (a new
    start takes a new fence, so the lost worker can no longer write) or, out of
    attempts, it is dead. ``suspects``: the jobs that may have one (read by the caller),
    else ``_jobs_with_long_runs``. Returns (abandoned, dead).
    """
    abandoned = dead = 0
    if suspects is None:
        suspects = _jobs_with_long_runs(now=now)
    for job in registry.all():
        if job.name not in suspects:
            continue
        # A job that heartbeats must do so every timeout_seconds; for any other job the
        # timeout bounds the whole run, whatever it reports on the way.
        sign_of_life = "heartbeat_at" if job.heartbeat else "started_at"
        cutoff = now - timedelta(seconds=job.timeout_seconds)
        with transaction.atomic():
            silent = list(
                JobRun.objects.select_for_update(skip_locked=True).filter(
                    job_name=job.name, status=RunStatus.RUNNING, **{f"{sign_of_life}__lt": cutoff}
                )
            )
            for run in silent:
                message = _silence(run, heartbeat=job.heartbeat)
                outcome = runs_fail(job=job, runs=[run], now=now, error=message, abandoned=True)
                abandoned += outcome == RunStatus.ABANDONED
                dead += outcome == RunStatus.DEAD
    return abandoned, dead


def _jobs_with_long_runs(*, now: datetime) -> set[str]:
    """The jobs with a run started longer ago than the shortest timeout: the only ones
    that can have a silent run (a heartbeat is never older than the start).

    One query without locks for every job (the partial index job_run_running holds exactly
    the running runs), so a pass with nothing silent, nearly every pass,
    costs one round trip here instead of a transaction per job. Under a stream of due
    runs the loop passes several times a second, and on a busy machine every round trip
    waits for a CPU (bench/cancellations.py).
    """
    jobs = registry.all()
    if not jobs:
        return set()
    earliest = now - timedelta(seconds=min(job.timeout_seconds for job in jobs))
    started_long_ago = JobRun.objects.filter(status=RunStatus.RUNNING, started_at__lt=earliest)
    return set(started_long_ago.order_by().values_list("job_name", flat=True).distinct())


def _silence(run: JobRun, *, heartbeat: bool) -> str:
    if heartbeat:
        return f"no heartbeat since {run.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC from {run.worker or '?'}"
    return f"still running past its timeout (started {run.started_at:%Y-%m-%d %H:%M:%S} UTC on {run.worker or '?'})"


def runs_enqueue_due(*, now: datetime, paused: set[str]) -> tuple[int, bool]:
    """Enqueue due delayed runs and due retries, batched per job (``sql.enqueue_due_runs``:
    the rows taken with FOR UPDATE SKIP LOCKED, so several schedulers take disjoint ones).
    Returns (count, more_due)."""
    limit = settings.SCHEDULER_DUE_BATCH
    # Only declared, unpaused jobs, in the query itself: rows of a job no longer declared
    # (renamed, removed) would otherwise take the batch's slots on every pass.
    active = [job.name for job in registry.all() if job.name not in paused]
    with transaction.atomic():
        due = sql.enqueue_due_runs(now=now, job_names=active, limit=limit)
        _enqueue_by_job(due)
        runs_log(due, kind="enqueued", now=now)
    return len(due), len(due) == limit


def _enqueue_by_job(runs: list[JobRun]) -> None:
    """One task per job and batch_size runs (a delayed job's batch handler takes many),
    all stored with one statement."""
    tasks: list[tuple[str, list[int]]] = []
    for job_name, group in itertools.groupby(sorted(runs, key=lambda r: r.job_name), key=lambda r: r.job_name):
        size = registry.get(job_name).batch_size
        run_ids = [run.id for run in group]
        tasks += [(job_name, run_ids[start : start + size]) for start in range(0, len(run_ids), size)]
    enqueue_runs_bulk(tasks=tasks)


def runs_requeue_stale(*, now: datetime) -> int:
    """Enqueue another task for runs left in ``enqueued`` too long.

    Covers a task that was acknowledged without starting its run (the worker died
    before the start committed) and the head of a ``queue`` job whose predecessor's
    hand-off was lost. A duplicate delivery is harmless: the start is conditional.

    A run whose task still waits in django-q2's queue table, not yet taken by a cluster,
    is not requeued: the broker delivers it. Requeuing it anyway made a loaded machine's
    backlog grow with every pass: an accelerated simulation at 480x had 1,282 queue rows
    for 202 waiting runs after 4,860 requeues (simulate --chaos 7319 --duration 2h --speed
    480, load average 12). A task a cluster took and never acknowledged (the cluster died,
    or lost the database in a failover) is requeued: the broker would wait
    ``Q_RETRY_SECONDS`` to hand it out again (``make failover`` found cancellations stuck).
    """
    cutoff = now - timedelta(seconds=settings.SCHEDULER_REQUEUE_AFTER_SECONDS)
    with transaction.atomic():
        declared = [job.name for job in registry.all()]
        stale = sql.stale_runs(enqueued_before=cutoff, declared=declared, limit=settings.SCHEDULER_DUE_BATCH)
        # The queue table is read only when there is a stale run to look for in it.
        waiting = (queued_run_ids(among=[run.id for run in stale]) or set()) if stale else set()
        stale = [run for run in stale if run.id not in waiting]
        JobRun.objects.filter(id__in=[run.id for run in stale]).update(enqueued_at=now)
        _enqueue_by_job(stale)
        runs_record(stale, kind="requeued", now=now)
    return len(stale)


def next_wakeup(*, now: datetime, report: TickReport | None = None) -> datetime:
    """The next instant a pass has work: the next cron tick of any job or the next due
    run, whichever is first (the loop caps the sleep with SCHEDULER_POLL_SECONDS).

    ``report``: the pass just made at ``now``. If it took no due run, its probe already
    read the next one (``TickReport.first_due``), so no query is made: a run created
    since (an order placed during the pass) is seen by the next pass, at the latest
    after the poll cap, as one created just after this query always was.

    A due run is not worth a pass of its own sooner than SCHEDULER_DUE_WINDOW_SECONDS
    after this one: under a stream of delayed runs (an order placed every few ms, each
    with its cancellation) waking for every next due run made the loop pass back to back,
    each pass handing the workers a task of one or two runs. Waiting out the window costs
    each run at most the window in lateness and lets one pass and one task take them all.
    Cron ticks are never delayed by it.
    """
    candidates = [now + timedelta(days=1)]
    for job in registry.cron_jobs():
        candidates += cron.next_ticks(job.cron, job.timezone, now, 1)
    due = report.first_due if report is not None and report.first_due_known else _first_due()
    if due is not None:
        candidates.append(max(due, now + timedelta(seconds=settings.SCHEDULER_DUE_WINDOW_SECONDS)))
    return min(candidates)


def _first_due() -> datetime | None:
    """The earliest due_at of a waiting delayed run or retry of a declared, unpaused job."""
    paused = set(Schedule.objects.filter(paused=True).values_list("job_name", flat=True))
    return sql.first_due_at(active=[job.name for job in registry.all() if job.name not in paused])
