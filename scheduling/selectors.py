"""Reads for commands, admin and health: what each job is and how it last ran."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import CharField, Exists, Expression, Max, OuterRef, Value
from django.db.models.functions import Cast, Concat

from scheduling import cron
from scheduling.models import IN_FLIGHT_STATUSES, RETRY_STATUSES, JobRun, RunStatus, Schedule, SchedulerNode
from scheduling.registry import Job, registry


@dataclass(frozen=True)
class JobOverview:
    job: Job
    schedule: Schedule | None
    next_fire_times: list[datetime]
    # The newest runs that have started or been skipped, newest first.
    recent_runs: list[JobRun]

    @property
    def last_run(self) -> JobRun | None:
        return self.recent_runs[0] if self.recent_runs else None


def jobs_overview(*, now: datetime, count: int = 3, recent: int = 1) -> list[JobOverview]:
    """Every declared job with its stored state, next ``count`` fire times and its
    ``recent`` newest runs."""
    schedules = {s.job_name: s for s in Schedule.objects.all()}
    return [
        JobOverview(
            job=job,
            schedule=schedules.get(job.name),
            next_fire_times=cron.next_ticks(job.cron, job.timezone, now, count) if job.is_cron else [],
            recent_runs=job_recent_runs(job_name=job.name, count=recent),
        )
        for job in registry.all()
    ]


def schedule_next_fire(*, schedule: Schedule, now: datetime) -> datetime | None:
    """The next tick of a stored cron schedule, or None: delayed, or retired (no code
    declares its job any more, so no scheduler will ever claim that tick)."""
    if not schedule.cron or not registry.has(schedule.job_name):
        return None
    ticks = cron.next_ticks(schedule.cron, schedule.timezone, now, 1)
    return ticks[0] if ticks else None


def job_last_run(*, job_name: str) -> JobRun | None:
    """The run with the latest logical time that has started or been skipped."""
    runs = job_recent_runs(job_name=job_name, count=1)
    return runs[0] if runs else None


def job_recent_runs(*, job_name: str, count: int) -> list[JobRun]:
    """The ``count`` runs with the latest logical times that have started or been skipped
    (job_run_by_job, read backwards, stopping after ``count``)."""
    runs = JobRun.objects.filter(job_name=job_name).exclude(status="scheduled").order_by("-scheduled_for", "-id")
    return list(runs[:count])


def run_in_flight_exists(*, job_name: str, subject_prefix: str, subject_id: OuterRef | Expression) -> Exists:
    """Whether ``job_name`` has a run that will still act (not finished) about the subject
    ``<subject_prefix><subject_id>``, for filtering the rows the subjects name:
    ``subject_id`` is an expression such as ``OuterRef("id")``. Served by job_run_claim_key
    (job_name, subject)."""
    subject = Concat(Value(subject_prefix), Cast(subject_id, output_field=CharField()))
    return Exists(JobRun.objects.filter(job_name=job_name, subject=subject, status__in=IN_FLIGHT_STATUSES))


def scheduler_last_pass_at() -> datetime | None:
    """The newest pass of any scheduler loop (one SchedulerNode row per loop)."""
    latest: datetime | None = SchedulerNode.objects.aggregate(latest=Max("last_pass_at"))["latest"]
    return latest


# --- Why a run has not moved: what a manual command tells its operator --------------------


@dataclass(frozen=True)
class RunState:
    """A run as an operator waiting on it needs to see it, as of ``now``."""

    run: JobRun
    now: datetime

    @property
    def seconds_waiting(self) -> int | None:
        """How long an enqueued run has waited for a worker to take it."""
        if self.run.status != RunStatus.ENQUEUED:
            return None
        assert self.run.enqueued_at is not None  # the check job_run_enqueued_has_enqueued_at
        return _seconds(self.now - self.run.enqueued_at)

    @property
    def seconds_silent(self) -> int | None:
        """How long a running run has shown no sign of life (heartbeat, else its start)."""
        sign_of_life = self.run.heartbeat_at if self._heartbeats else self.run.started_at
        if self.run.status != RunStatus.RUNNING or sign_of_life is None:
            return None
        return _seconds(self.now - sign_of_life)

    @property
    def _heartbeats(self) -> bool:
        job = registry.find(self.run.job_name)
        return job is not None and job.heartbeat

    def label(self) -> str:
        return f"run {self.run.id} ({self.run.job_name} @ {self.run.scheduled_for.isoformat()}, {self.run.trigger})"

    def explained(self) -> str:
        """What the run is doing, in words: "enqueued, and no worker has taken it for 7200 s"."""
        run = self.run
        if run.status == RunStatus.ENQUEUED:
            return f"enqueued, and no worker has taken it for {self.seconds_waiting} s (is a worker running?)"
        if run.status == RunStatus.RUNNING:
            return self._running_explained()
        if run.status in RETRY_STATUSES:
            return f"{run.status} after attempt {run.attempts}; its next attempt is due at {run.due_at.isoformat()}"
        if run.status == RunStatus.SKIPPED:
            return f"skipped ({run.get_skip_reason_display() or 'no reason recorded'})"
        if run.status == RunStatus.SCHEDULED:
            return f"scheduled, due at {run.due_at.isoformat()}"
        return str(run.status)

    def _running_explained(self) -> str:
        job = registry.find(self.run.job_name)
        silent = self.seconds_silent
        text = f"running on {self.run.worker or '?'} " + (
            f"with no heartbeat for {silent} s" if self._heartbeats else f"for {silent} s"
        )
        if job is not None and silent is not None and silent > job.timeout_seconds:
            text += (
                f", longer than its timeout of {job.timeout_seconds} s: its worker is presumably gone, and the "
                "next scheduler pass (manage.py tick) marks it abandoned"
            )
        return text

    def as_dict(self) -> dict[str, Any]:
        run = self.run
        return {
            "run": run.id,
            "job": run.job_name,
            "subject": run.subject,
            "scheduled_for": run.scheduled_for.isoformat(),
            "trigger": run.trigger,
            "status": run.status,
            "worker": run.worker,
            "seconds_waiting": self.seconds_waiting,
            "seconds_silent": self.seconds_silent,
        }


def _seconds(delta: timedelta) -> int:
    return max(int(delta.total_seconds()), 0)
