"""The dead-man's switch: what the schedules say should have happened, against job_runs.

The check never trusts that a scheduler ran: the ticks it expects come from each cron
expression, so a cluster that stopped claiming anything still shows up, tick by tick,
as "never claimed". ``runs_check`` only reads; ``operations.alerts`` remembers what was
already alerted, and the ``check-missed-runs`` job and ``check_runs`` command call both.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Min, Q

from operations.metrics import fence_state
from scheduling import cron, sql
from scheduling.models import (
    FenceEpoch,
    JobRun,
    JobRunEvent,
    ProblemKind,
    RunStatus,
    Schedule,
    SkipReason,
)
from scheduling.registry import DEFAULT_TIMEOUT_SECONDS, Job, registry

# A heartbeating run is "overrunning" once it has run this many times its recent median.
OVERRUN_FACTOR = 3
# How many recent successes the median duration is taken over.
DURATION_SAMPLE = 20
# The summaries of runs never started, which group them (each run's detail has its own instant).
NEVER_ENQUEUED = "due and never enqueued (is a scheduler running?)"
NEVER_STARTED = "enqueued and never started (is a worker running?)"
# The job name of problems about the database itself (a failover), not one job's runs.
DATABASE = "(database)"
# The lowest token with an epoch (timelines start at 1): tokens below it were handed out
# before tokens carried one, and say nothing about a failover.
FIRST_EPOCH_TOKEN = 1 << sql.FENCE_COUNTER_BITS


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    job_name: str
    scheduled_for: datetime
    subject: str = ""
    run_id: int | None = None
    detail: str = ""
    # What problems alike share, for grouping (empty: the detail): the detail without the
    # instants of one run, so 10,000 never-started cancellations are one line, not 10,000.
    summary: str = ""

    @property
    def key(self) -> tuple[str, str, datetime, str]:
        """Identifies the problem across checks (see RunAlert's unique constraint)."""
        return (self.job_name, self.subject, self.scheduled_for, str(self.kind))

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "job": self.job_name,
            "subject": self.subject,
            "scheduled_for": self.scheduled_for.isoformat(),
            "run": self.run_id,
            "detail": self.detail,
        }

    def __str__(self) -> str:
        subject = f" {self.subject}" if self.subject else ""
        run = f" (run {self.run_id})" if self.run_id else ""
        return (
            f"{self.kind.label}: {self.job_name}{subject} @ {self.scheduled_for:%Y-%m-%d %H:%M} UTC{run}: {self.detail}"
        )


@dataclass(frozen=True)
class ProblemGroup:
    """Problems alike (one job, one kind, the same detail) as people read them: the 288
    ticks an outage skipped past their deadline are one line, with their range and count.
    Machines (``check_runs --json``, the webhook's list) get every problem instead."""

    problems: tuple[Problem, ...]

    @property
    def first(self) -> Problem:
        return self.problems[0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.first.kind),
            "job": self.first.job_name,
            "count": len(self.problems),
            "first": self.first.scheduled_for.isoformat(),
            "last": self.problems[-1].scheduled_for.isoformat(),
            "detail": _grouped_detail(self.first),
        }

    def __str__(self) -> str:
        if len(self.problems) == 1:
            return str(self.first)
        first = min(problem.scheduled_for for problem in self.problems)
        last = max(problem.scheduled_for for problem in self.problems)
        what = "runs" if any(problem.subject for problem in self.problems) else "ticks"
        span = f"{len(self.problems):,} {what} from {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC"
        return f"{self.first.kind.label}: {self.first.job_name}, {span}: {_grouped_detail(self.first)}"


def _grouped_detail(problem: Problem) -> str:
    return problem.summary or problem.detail


def problems_grouped(problems: Iterable[Problem]) -> list[ProblemGroup]:
    """``problems`` (oldest first) gathered by job, kind and summary (the detail when it
    has none), in order of each group's first problem."""
    groups: dict[tuple[str, str, str], list[Problem]] = {}
    for problem in problems:
        groups.setdefault((problem.job_name, str(problem.kind), _grouped_detail(problem)), []).append(problem)
    return [ProblemGroup(tuple(group)) for group in groups.values()]


@dataclass(frozen=True)
class CheckWindow:
    """Ticks in (start, horizon] are judged; the newest GRACE seconds are left alone."""

    now: datetime
    start: datetime
    horizon: datetime

    @classmethod
    def ending(cls, now: datetime) -> CheckWindow:
        return cls(
            now=now,
            start=now - timedelta(seconds=settings.SCHEDULER_CHECK_WINDOW_SECONDS),
            horizon=now - timedelta(seconds=settings.SCHEDULER_CHECK_GRACE_SECONDS),
        )


# A check of an app's own data, run with the runs check: problems of kind INVARIANT,
# each naming the job whose work it checks (payouts declares the ledger's in its jobs.py).
Invariant = Callable[[CheckWindow], list[Problem]]
_INVARIANTS: list[Invariant] = []


def invariant(check: Invariant) -> Invariant:
    """Declare ``check`` as an invariant ``runs_check`` (and so ``check_runs``, the
    hourly alerting job and ``/healthz``'s count) reports on."""
    if check not in _INVARIANTS:
        _INVARIANTS.append(check)
    return check


def runs_check(*, now: datetime) -> list[Problem]:
    """Every problem with the runs of the check window ending at ``now``, oldest first.

    1. For every cron job, the ticks its schedule produced in the window (never before
       the job was first registered): a tick without a row was never claimed.
    2. Every run still in flight, whatever its age: enqueued (or a delayed run due) and
       not started after the grace; running with a stale heartbeat or past its expected
       duration; failed or abandoned and waiting for a retry.
    3. Runs that ended badly in the window: dead, or skipped (with the reason).
    4. The invariants the apps declared over the data their jobs write (``invariant``).
    5. Failovers (``failovers_check``): the fencing epoch moved in the window, runs still
       running under an older epoch, runs cut off by the failover and started again.
    """
    window = CheckWindow.ending(now)
    problems = [*ticks_unclaimed(window=window), *runs_in_flight(window=window), *runs_ended_badly(window=window)]
    problems += failovers_check(window=window)
    problems += [problem for check in _INVARIANTS for problem in check(window)]
    return sorted(problems, key=lambda p: (p.scheduled_for, p.job_name, p.subject, str(p.kind)))


def ticks_unclaimed(*, window: CheckWindow) -> list[Problem]:
    schedules = {schedule.job_name: schedule for schedule in Schedule.objects.all()}
    problems: list[Problem] = []
    for job in registry.cron_jobs():
        schedule = schedules.get(job.name)
        if schedule is None:
            continue  # never registered: no scheduler ever ran this code (healthz says so)
        problems += _job_ticks_unclaimed(job=job, schedule=schedule, window=window)
    return problems


def _job_ticks_unclaimed(*, job: Job, schedule: Schedule, window: CheckWindow) -> list[Problem]:
    # Same lower bounds as the scheduler: nothing before the job's first registration.
    after = max(window.start, schedule.first_seen_at)
    if after >= window.horizon:
        return []
    expected = cron.ticks_between(job.cron, job.timezone, after, window.horizon)
    # Served by the claim key index (job_name, subject, scheduled_for).
    claimed = set(
        JobRun.objects.filter(
            job_name=job.name, subject="", scheduled_for__gt=after, scheduled_for__lte=window.horizon
        ).values_list("scheduled_for", flat=True)
    )
    paused = " (the job is paused, and no scheduler recorded the tick as skipped)" if schedule.paused else ""
    return [
        Problem(ProblemKind.NEVER_CLAIMED, job.name, tick, detail=f"no scheduler claimed this tick{paused}")
        for tick in expected
        if tick not in claimed
    ]


def runs_in_flight(*, window: CheckWindow) -> list[Problem]:
    # Each kind of run in flight read through the partial index that holds exactly it; a
    # scheduled run due after the horizon, or one enqueued after it, is not late yet.
    runs = _ordered(sql.runs_in_flight(horizon=window.horizon))
    problems = (_in_flight_problem(run, window=window) for run in runs)
    return [problem for problem in problems if problem is not None]


def _in_flight_problem(run: JobRun, *, window: CheckWindow) -> Problem | None:
    if run.status == RunStatus.SCHEDULED:
        detail = f"due at {_hm(run.due_at)} and never enqueued"
        return _problem(run, ProblemKind.NOT_STARTED, detail, summary=NEVER_ENQUEUED)
    if run.status == RunStatus.ENQUEUED:
        assert run.enqueued_at is not None  # the check job_run_enqueued_has_enqueued_at
        detail = f"enqueued at {_hm(run.enqueued_at)} and never started"
        return _problem(run, ProblemKind.NOT_STARTED, detail, summary=NEVER_STARTED)
    if run.status == RunStatus.RUNNING:
        return _running_problem(run, window=window)
    return _problem(run, ProblemKind.RETRYING, _retry_detail(run))


def _running_problem(run: JobRun, *, window: CheckWindow) -> Problem | None:
    timeout = _job_timeout_seconds(run.job_name)
    started_at = run.started_at or run.created_at
    sign_of_life = run.heartbeat_at or started_at
    if window.now - sign_of_life > timedelta(seconds=timeout):
        detail = f"no heartbeat since {_hm(sign_of_life)} (timeout {timeout}s) on {run.worker or 'an unknown worker'}"
        return _problem(run, ProblemKind.STALE_HEARTBEAT, detail)
    expected = run_expected_duration(job_name=run.job_name, timeout_seconds=timeout)
    running_for = window.now - started_at
    if running_for > expected:
        detail = f"running for {_span(running_for)}, expected at most {_span(expected)}"
        return _problem(run, ProblemKind.OVERRUNNING, detail)
    return None


def run_expected_duration(*, job_name: str, timeout_seconds: int) -> timedelta:
    """How long a run of the job may take before it counts as overrunning.

    OVERRUN_FACTOR times the median of its recent successes, but never less than the
    check's grace; a job with no history gets its timeout (the abandon threshold).
    """
    recent = JobRun.objects.filter(
        job_name=job_name, status=RunStatus.SUCCEEDED, started_at__isnull=False, finished_at__isnull=False
    ).order_by("-scheduled_for")[:DURATION_SAMPLE]
    durations = [run.duration() for run in recent.only("started_at", "finished_at")]
    seconds = [duration.total_seconds() for duration in durations if duration is not None]
    if not seconds:
        return timedelta(seconds=timeout_seconds)
    expected = OVERRUN_FACTOR * statistics.median(seconds)
    return timedelta(seconds=max(expected, settings.SCHEDULER_CHECK_GRACE_SECONDS))


def runs_ended_badly(*, window: CheckWindow) -> list[Problem]:
    # Dead runs are rare: the (status, scheduled_for) index job_run_status_rare finds them all;
    # one that died in the window is reported even if its tick is older.
    dead = JobRun.objects.filter(status=RunStatus.DEAD).filter(
        Q(scheduled_for__gt=window.start) | Q(finished_at__gt=window.start)
    )
    # Skips are more common: job_run_status_rare serves status = 'skipped' AND scheduled_for > start.
    # A run end_simulation retired is not a problem of this deployment.
    skipped = JobRun.objects.filter(status=RunStatus.SKIPPED, scheduled_for__gt=window.start).exclude(
        skip_reason=SkipReason.SIMULATION_ENDED
    )
    return [_ended_problem(run) for run in _ordered(dead, skipped)]


def failovers_check(*, window: CheckWindow) -> list[Problem]:
    """What a PostgreSQL failover left behind, as problems of kind FAILOVER (nothing on SQLite).

    The fencing tokens' epoch is the primary's timeline (``queries.NEXT_FENCE``), and every
    promotion moves it. The check remembers each epoch it sees in ``job_fence_epochs`` (the
    one write of the check: an INSERT of a row that does not exist yet), so it can report:

    1. the failover itself, while its instant is in the window: epoch N -> M at T, T being
       the first start of a run in the window under epoch M (else when the check first saw
       M). The first epoch ever seen is remembered, not reported: there is nothing before it.
    2. each run still running under an epoch (1 or more) older than the current one: the
       old primary started it, and it will be abandoned and retried;
    3. each run of the window started again under a newer epoch after an attempt under an
       older one: cut off by the failover and claimed again. (A claim whose commit never
       reached the standby left no row at all; the new primary claims that tick as new.)
    """
    if connection.vendor != "postgresql":  # seam: SQLite has no standby, so no failover
        return []
    epoch, _ = fence_state()
    FenceEpoch.objects.get_or_create(epoch=epoch, defaults={"first_seen_at": window.now})
    problems = _epoch_changes(window=window)
    problems += [_problem(run, ProblemKind.FAILOVER, _stale_epoch_detail(run, epoch)) for run in _runs_older(epoch)]
    problems += _runs_claimed_again(window=window, epoch=epoch)
    return problems


def _epoch_changes(*, window: CheckWindow) -> list[Problem]:
    problems: list[Problem] = []
    seen = list(FenceEpoch.objects.order_by("epoch"))
    for before, after in itertools.pairwise(seen):
        base = after.epoch << sql.FENCE_COUNTER_BITS
        first_start = JobRun.objects.filter(
            scheduled_for__gt=window.start,
            fence__gte=base,
            fence__lt=base + FIRST_EPOCH_TOKEN,
            started_at__isnull=False,
        ).aggregate(first=Min("started_at"))["first"]
        at = min(moment for moment in (first_start, after.first_seen_at) if moment is not None)
        if not window.start < at <= window.now:
            continue
        detail = (
            f"the database failed over: epoch {before.epoch} -> {after.epoch} at {_hm(at)}; runs started before it "
            f"under epoch {before.epoch} that are still running will be abandoned and retried"
        )
        problems.append(Problem(ProblemKind.FAILOVER, DATABASE, at, subject=f"epoch {after.epoch}", detail=detail))
    return problems


def _runs_older(epoch: int) -> list[JobRun]:
    """Runs still running with a token of an epoch below ``epoch`` (the partial index
    job_run_running holds the running runs only)."""
    base = epoch << sql.FENCE_COUNTER_BITS
    running = JobRun.objects.filter(status=RunStatus.RUNNING, fence__gte=FIRST_EPOCH_TOKEN, fence__lt=base)
    return list(running.order_by("scheduled_for", "id"))


def _stale_epoch_detail(run: JobRun, epoch: int) -> str:
    old = sql.fence_epoch(run.fence or 0)
    return (
        f"started under epoch {old}, before the database failed over to epoch {epoch}: "
        f"its writes are refused, and it will be abandoned and retried"
    )


def _runs_claimed_again(*, window: CheckWindow, epoch: int) -> list[Problem]:
    """Runs of the window started again under ``epoch`` after an attempt under an older one
    (job_run_recent finds the window's runs, the events' run_id index their history; only
    runs of more than one attempt qualify, which are few)."""
    base = epoch << sql.FENCE_COUNTER_BITS
    cut_off = (
        JobRunEvent.objects.filter(
            run__scheduled_for__gt=window.start,
            run__attempts__gt=1,
            run__fence__gte=base,
            kind="started",
            fence__gte=FIRST_EPOCH_TOKEN,
            fence__lt=base,
        )
        .select_related("run")
        .order_by("run__scheduled_for", "run_id", "id")
    )
    problems: list[Problem] = []
    reported: set[int] = set()
    for event in cut_off:
        run = event.run
        if run.id in reported or run.fence is None or event.fence is None:
            continue
        old, new = sql.fence_epoch(event.fence), sql.fence_epoch(run.fence)
        if old >= new:
            continue
        reported.add(run.id)
        detail = (
            f"cut off by the database's failover: attempt {event.attempt} started under epoch {old}, "
            f"attempt {run.attempts} under epoch {new} (now {run.status})"
        )
        problems.append(_problem(run, ProblemKind.FAILOVER, detail))
    return problems


def _ordered(*querysets: Iterable[JobRun]) -> list[JobRun]:
    return sorted((run for queryset in querysets for run in queryset), key=lambda run: (run.scheduled_for, run.id))


def _ended_problem(run: JobRun) -> Problem:
    if run.status == RunStatus.DEAD:
        # The last line of a traceback names the exception.
        last_line = (run.error.strip().splitlines() or ["no error recorded"])[-1]
        return _problem(run, ProblemKind.DEAD, f"dead after {run.attempts} attempts: {last_line[:300]}")
    reason = run.get_skip_reason_display() if run.skip_reason else "no reason recorded"
    return _problem(run, ProblemKind.SKIPPED, f"skipped: {reason}")


def _retry_detail(run: JobRun) -> str:
    last_line = (run.error.strip().splitlines() or ["no error recorded"])[-1]
    what = "abandoned (heartbeat lost)" if run.status == RunStatus.ABANDONED else "failed"
    return f"attempt {run.attempts} {what}; next attempt at {_hm(run.due_at)}: {last_line[:300]}"


def _problem(run: JobRun, kind: ProblemKind, detail: str, *, summary: str = "") -> Problem:
    return Problem(
        kind, run.job_name, run.scheduled_for, subject=run.subject, run_id=run.id, detail=detail, summary=summary
    )


def _job_timeout_seconds(job_name: str) -> int:
    job = registry.find(job_name)
    return job.timeout_seconds if job is not None else DEFAULT_TIMEOUT_SECONDS


def _hm(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _span(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )
