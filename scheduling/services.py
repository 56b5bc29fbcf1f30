"""What code and operators ask of the engine: delayed runs, manual runs, backfills,
pause and resume, re-runs. Each is a keyword-only function; the caller passes ``now``."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction

from scheduling import cron, metrics, sql
from scheduling.dispatch import claim_row, claims_log, runs_claim
from scheduling.events import runs_logged, runs_record
from scheduling.execution import runs_blocking, runs_call_handler, runs_running, runs_start
from scheduling.models import JobRun, Overlap, RunStatus, Schedule, Trigger
from scheduling.policies import PlannedTick, claim_guard_horizon
from scheduling.queue import enqueue_runs
from scheduling.registry import Job, registry
from scheduling.schedules import schedules_ensure
from scheduling.selectors import RunState

logger = logging.getLogger("scheduling.actions")


class SchedulingError(Exception):
    """A request the engine refuses, with a message for the person who made it."""


class RunCannotStartError(SchedulingError):
    """A manual run to execute here that the job's overlap policy does not let start now.

    Nothing was claimed; ``waiting_on`` are the runs in its way, as of the refusal.
    """

    def __init__(self, *, job_name: str, scheduled_for: datetime, subject: str, waiting_on: list[RunState]) -> None:
        self.waiting_on = waiting_on
        what = f"{job_name} @ {scheduled_for.isoformat()}" + (f" ({subject})" if subject else "")
        behind = "; and behind ".join(f"{state.label()}, {state.explained()}" for state in waiting_on)
        them = "that run has" if len(waiting_on) == 1 else "those runs have"
        super().__init__(
            f"{what} cannot run now: it waits behind {behind}. Nothing was claimed: run the same command "
            f"again once {them} finished."
        )


def run_schedule_delayed(*, job_name: str, subject: str, scheduled_for: datetime, now: datetime) -> JobRun | None:
    """Create a delayed run of ``job_name`` for ``subject``, due at ``scheduled_for``.

    Call it inside the transaction that creates or changes the subject, so the two commit
    or roll back together; for a new row, ``run_schedule_delayed_with_subject`` writes both
    in one statement. Idempotent: a second call for the same (job, subject, time) returns
    None and changes nothing.
    """
    job = _delayed_job(job_name)
    if not subject:
        raise SchedulingError("a delayed run needs a subject, such as 'order:123'")
    plan = [PlannedTick(scheduled_for, RunStatus.SCHEDULED)]
    # No savepoint: inside the caller's transaction (the subject being created) a failure
    # rolls everything back anyway, and a SAVEPOINT/RELEASE pair is two more round trips.
    with transaction.atomic(savepoint=False):
        won = runs_claim(job=job, plan=plan, trigger=Trigger.DELAYED, now=now, subject=subject)
    return won[0] if won else None


def run_schedule_delayed_with_subject(
    *, job_name: str, subject: sql.SubjectInsert, scheduled_for: datetime, now: datetime
) -> tuple[tuple[Any, ...], JobRun | None]:
    """Insert a new subject's row (``subject``: its INSERT and the prefix of the run's
    subject, such as ``order:``) and create its delayed run of ``job_name``, due at
    ``scheduled_for``: both or neither. On PostgreSQL one statement, its own transaction
    when the caller has none and part of the caller's when it has one; on SQLite two in
    one atomic block. Returns the subject's row as its INSERT returned it, and the run.
    """
    row, inserted, run_id = _claim_with_subject(job_name, subject, scheduled_for, now)
    run = None if run_id is None else sql.run_claimed(row, run_id=run_id, subject_id=inserted[0])
    claims_log([run] if run else [], now=now)
    return inserted, run


def run_schedule_delayed_with_subject_fast(
    *, job_name: str, subject: sql.SubjectInsert, scheduled_for: datetime, now: datetime
) -> tuple[tuple[Any, ...], int | None]:
    """``run_schedule_delayed_with_subject`` for a caller that only asks whether a run was
    created: the same statement, the run's id instead of the run, which is built only for
    its log line when runs are logged. The fast path of placing an order (benchmark 3's
    placers; what it saves is measured in docs/benchmark-history.md)."""
    row, inserted, run_id = _claim_with_subject(job_name, subject, scheduled_for, now)
    if run_id is not None and runs_logged():
        claims_log([sql.run_claimed(row, run_id=run_id, subject_id=inserted[0])], now=now)
    return inserted, run_id


def _claim_with_subject(
    job_name: str, subject: sql.SubjectInsert, scheduled_for: datetime, now: datetime
) -> tuple[sql.ClaimRow, tuple[Any, ...], int | None]:
    """The claim row, the subject's row and the run's id (None if not created)."""
    job = _delayed_job(job_name)
    if not subject.subject_prefix:
        raise SchedulingError("a delayed run's subject needs a prefix, such as 'order:'")
    row = claim_row(
        job.name, subject.subject_prefix, PlannedTick(scheduled_for, RunStatus.SCHEDULED), Trigger.DELAYED, now
    )
    inserted, run_id = sql.claim_run_with_subject(row, subject)
    metrics.claims_count(job_name=job.name, won=0 if run_id is None else 1, attempted=1)
    return row, inserted, run_id


def _delayed_job(job_name: str) -> Job:
    job = registry.get(job_name)
    if job.is_cron:
        raise SchedulingError(f"job {job_name!r} is a cron job; delayed runs need a delayed job")
    return job


def job_latest_tick(*, job_name: str, at: datetime) -> datetime:
    """The latest tick of a cron job at or before ``at``."""
    job = registry.get(job_name)
    if not job.is_cron:
        raise SchedulingError(f"job {job_name!r} is a delayed job; it has no ticks")
    tick = cron.latest_tick(job.cron, job.timezone, at)
    if tick is None:
        raise SchedulingError(f"job {job_name!r} has no tick at or before {at.isoformat()}")
    return tick


def job_tick_check(*, job_name: str, scheduled_for: datetime) -> None:
    """Refuse an instant that is not a tick of the job's schedule (``run_job`` runs one
    logical tick; a made-up instant would be a run no schedule ever asked for)."""
    if job_latest_tick(job_name=job_name, at=scheduled_for) != scheduled_for:
        job = registry.get(job_name)
        raise SchedulingError(
            f"{scheduled_for.isoformat()} is not a tick of {job_name!r} ({job.cron} in {job.timezone}); "
            "list_jobs shows its next fire times"
        )


def run_claim_manual(
    *,
    job_name: str,
    scheduled_for: datetime,
    now: datetime,
    trigger: Trigger = Trigger.MANUAL,
    enqueue: bool = True,
    subject: str = "",
) -> JobRun | None:
    """Claim one logical run by hand through the normal claim path.

    Returns None when the (job, scheduled_for) tick is already claimed: a second manual
    run of the same tick runs nothing. With ``enqueue=False`` the caller starts the run
    itself in the same transaction (``run_execute_here``).
    """
    job = registry.get(job_name)
    _manual_run_check(job=job, scheduled_for=scheduled_for, now=now)
    schedules_ensure(now=now)
    plan = [PlannedTick(scheduled_for, RunStatus.ENQUEUED)]
    with transaction.atomic():
        won = runs_claim(job=job, plan=plan, trigger=trigger, now=now, enqueue=enqueue, subject=subject)
    return won[0] if won else None


# No logical time of a run is older: it keeps the tick arithmetic far from datetime.min
# (a backfill from 0001-01-01 overflowed) and refuses the 1970s a mistyped date gives.
EARLIEST_LOGICAL_TIME = datetime(2000, 1, 1, tzinfo=UTC)


def guard_horizon_check(*, job: Job, scheduled_for: datetime, now: datetime) -> None:
    """Refuse a manual claim, backfill or re-run of a logical time that no run can have:

    1. before EARLIEST_LOGICAL_TIME, for every job;
    2. before the job's own ``earliest`` (the payout job: the first restaurant's
       onboarding; before it there is nothing to pay, and a run there only waits in line);
    3. before the claim guard horizon (scheduling.policies) for a job whose runs are
       pruned: the claims of that time may be gone, so "not claimed" no longer proves
       "never ran". A job that keeps every run is not bounded by it.
    """
    if scheduled_for < EARLIEST_LOGICAL_TIME:
        raise SchedulingError(
            f"{scheduled_for.isoformat()} is before {EARLIEST_LOGICAL_TIME:%Y-%m-%d}, the earliest logical time "
            "a run may have"
        )
    earliest = job.earliest() if job.earliest is not None else None
    if earliest is not None and scheduled_for < earliest:
        raise SchedulingError(
            f"{scheduled_for.isoformat()} is before the first logical time a run of {job.name!r} can mean "
            f"anything ({earliest.isoformat()})"
        )
    horizon = claim_guard_horizon(now=now)
    if scheduled_for < horizon and job.retention_days is not None:
        raise SchedulingError(
            f"{scheduled_for.isoformat()} is before the claim guard horizon {horizon.isoformat()} "
            f"(the look-back or the missed-run check's window, whichever is longer, plus a day): runs of "
            f"{job.name!r} that old may have been pruned, so the engine can no longer tell whether it already ran"
        )


def _manual_run_check(*, job: Job, scheduled_for: datetime, now: datetime) -> None:
    if not job.is_cron:
        raise SchedulingError(f"job {job.name!r} is a delayed job: its runs are created by code, one per subject")
    if scheduled_for > now:
        raise SchedulingError(f"{scheduled_for.isoformat()} is in the future; a run's logical time must have passed")
    guard_horizon_check(job=job, scheduled_for=scheduled_for, now=now)


def run_execute_here(
    *,
    job_name: str,
    scheduled_for: datetime,
    now: datetime,
    worker: str,
    subject: str = "",
    on_batch: Callable[[Any], None] | None = None,
) -> JobRun | None:
    """Claim one logical run by hand and execute it in this process (``run_job --sync``,
    ``catch_up_payouts``); return it finished, or None when that run was claimed before.

    1. Under the job's overlap lock, look for an existing claim (None: the caller reports
       it), then for the runs the overlap policy makes it wait behind (a ``queue`` job's
       running or older waiting run, a ``forbid`` job's running one).
    2. If any, raise RunCannotStartError naming them, before anything is written. A
       claim left ``enqueued`` behind a failure message would wait for a worker that
       may not exist, and the same command could never run it ("already claimed"); a
       claim recorded as skipped would block the retry just the same. Refusing before
       the claim leaves nothing to release, so the retry works once the way is clear.
    3. Otherwise claim (trigger ``manual``, no task) and start it in the same
       transaction, then call the handler after the start has committed, as a worker
       does: if this process dies mid-run, the run is abandoned and retried like any other.
       A handler that reports its batches (``ctx.batch_done``) reaches ``on_batch``.
    """
    job = registry.get(job_name)
    _manual_run_check(job=job, scheduled_for=scheduled_for, now=now)
    with transaction.atomic():
        if job.overlap != Overlap.ALLOW:
            sql.lock_job(job.name)
        if JobRun.objects.filter(job_name=job.name, subject=subject, scheduled_for=scheduled_for).exists():
            return None
        blockers = runs_blocking(job=job, scheduled_for=scheduled_for, running=runs_running(job=job))
        if blockers:
            waiting_on = [RunState(run=blocker, now=now) for blocker in blockers]
            raise RunCannotStartError(
                job_name=job.name, scheduled_for=scheduled_for, subject=subject, waiting_on=waiting_on
            )
        run = run_claim_manual(job_name=job.name, scheduled_for=scheduled_for, now=now, enqueue=False, subject=subject)
        contexts = runs_start(job=job, run_ids=[run.id], now=now, worker=worker) if run else []
        if run is not None and not contexts:
            # Cannot happen under the lock; if it ever does, the rollback releases the claim.
            raise SchedulingError(f"run {run.id} of {job.name} could not be started; nothing was claimed")
    if run is None:
        return None
    runs_call_handler(job=job, contexts=[dataclasses.replace(c, on_batch=on_batch) for c in contexts])
    run.refresh_from_db()
    return run


def schedule_pause(*, job_name: str, actor: str, now: datetime) -> bool:
    """Pause a job: its ticks are recorded as skipped (paused) until it is resumed.
    Returns False if it was already paused."""
    registry.get(job_name)
    schedules_ensure(now=now)
    changed = Schedule.objects.filter(job_name=job_name, paused=False).update(
        paused=True, paused_at=now, paused_by=actor
    )
    logger.info("schedule %s paused by %s (changed=%s)", job_name, actor, bool(changed))
    return bool(changed)


def schedule_resume(*, job_name: str, actor: str, now: datetime) -> bool:
    """Resume a paused job from the next tick on. Returns False if it was not paused."""
    registry.get(job_name)
    schedules_ensure(now=now)
    changed = Schedule.objects.filter(job_name=job_name, paused=True).update(paused=False, paused_at=None, paused_by="")
    logger.info("schedule %s resumed by %s (changed=%s)", job_name, actor, bool(changed))
    return bool(changed)


# A backfill's bounds, both (the admin form says so): a few weeks of a daily job, or a
# few days of a five-minute one, per request.
MAX_BACKFILL_TICKS = 1000
MAX_BACKFILL_SPAN = timedelta(days=31)
_EPSILON = timedelta(microseconds=1)


def backfill_range_check(*, start: datetime, end: datetime, now: datetime) -> None:
    """Refuse a range that is empty, reaches into the future, starts before
    EARLIEST_LOGICAL_TIME or spans more than MAX_BACKFILL_SPAN (the admin form's own check)."""
    if not start < end <= now:
        raise SchedulingError("a backfill range needs start < end <= now")
    if start < EARLIEST_LOGICAL_TIME:
        raise SchedulingError(
            f"a backfill cannot start before {EARLIEST_LOGICAL_TIME:%Y-%m-%d}, the earliest logical time a run may have"
        )
    if end - start > MAX_BACKFILL_SPAN:
        raise SchedulingError(
            f"a backfill spans at most {MAX_BACKFILL_SPAN.days} days ({end - start} asked); split the range"
        )


def runs_backfill(
    *,
    job_name: str,
    start: datetime,
    end: datetime,
    actor: str,
    now: datetime,
    one_after_another: bool = True,
) -> list[JobRun]:
    """Claim every tick of a cron job in [start, end] through the normal claim path
    (trigger ``backfill``); ticks already claimed are left alone. Returns the new runs.

    Refused, claiming nothing: a delayed job; a job that declares ``backfill_refused``
    (the payout job: its scheduled run pays every finished week, so backfilled runs
    would only queue before it and delay its money); a range that
    ``backfill_range_check`` refuses, starts before ``guard_horizon_check`` allows, or
    holds more than MAX_BACKFILL_TICKS ticks.

    ``one_after_another`` (the default) makes the runs queue: each starts once the one
    before it (or any run of the job) has finished, oldest first, whatever the job's
    overlap policy; without it they follow the job's policy as any tick does, so two
    workers taking two of them at once skip one under ``forbid``."""
    job = registry.get(job_name)
    if not job.is_cron:
        raise SchedulingError(f"job {job_name!r} is a delayed job; only cron jobs can be backfilled")
    if job.backfill_refused:
        raise SchedulingError(f"{job_name!r} is never backfilled: {job.backfill_refused}")
    backfill_range_check(start=start, end=end, now=now)
    guard_horizon_check(job=job, scheduled_for=start, now=now)
    ticks = cron.ticks_between(job.cron, job.timezone, start - _EPSILON, end)
    if len(ticks) > MAX_BACKFILL_TICKS:
        raise SchedulingError(f"{len(ticks)} ticks in that range; backfill at most {MAX_BACKFILL_TICKS} at a time")
    schedules_ensure(now=now)
    plan = [PlannedTick(tick, RunStatus.ENQUEUED) for tick in ticks]
    with transaction.atomic():
        overlap = Overlap.QUEUE if one_after_another and job.overlap != Overlap.QUEUE else ""
        won = runs_claim(job=job, plan=plan, trigger=Trigger.BACKFILL, now=now, overlap=overlap)
    order = "one after another" if one_after_another else f"under the job's overlap policy ({job.overlap})"
    logger.info("backfill of %s from %s to %s by %s: %s new runs, %s", job_name, start, end, actor, len(won), order)
    return won


def run_rerun(*, run_id: int, actor: str, now: datetime) -> JobRun:
    """Give an abandoned or dead run another attempt now (it will start with a new fence)."""
    with transaction.atomic():
        run = JobRun.objects.select_for_update().filter(id=run_id).first()
        if run is None:
            raise SchedulingError(f"there is no run {run_id}")
        if run.status not in (RunStatus.ABANDONED, RunStatus.DEAD):
            raise SchedulingError(f"run {run_id} is {run.status}; only an abandoned or dead run can be re-run")
        guard_horizon_check(job=registry.get(run.job_name), scheduled_for=run.scheduled_for, now=now)
        JobRun.objects.filter(id=run.id).update(status=RunStatus.ENQUEUED, enqueued_at=now, due_at=now)
        run.status, run.enqueued_at, run.due_at = RunStatus.ENQUEUED, now, now  # the row as stored
        enqueue_runs(job_name=run.job_name, run_ids=[run.id])
        runs_record([run], kind="rerun", now=now, message=f"re-run requested by {actor}")
    logger.info("run %s of %s re-run by %s", run_id, run.job_name, actor)
    return run
