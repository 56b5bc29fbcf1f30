"""Reads for commands, admin and health: what each job is and how it last ran."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max

from scheduling import cron
from scheduling.models import JobRun, Schedule, SchedulerNode
from scheduling.registry import Job, registry


@dataclass(frozen=True)
class JobOverview:
    job: Job
    schedule: Schedule | None
    next_fire_times: list[datetime]
    last_run: JobRun | None


def jobs_overview(*, now: datetime, count: int = 3) -> list[JobOverview]:
    """Every declared job with its stored state, next ``count`` fire times and last run."""
    schedules = {s.job_name: s for s in Schedule.objects.all()}
    return [
        JobOverview(
            job=job,
            schedule=schedules.get(job.name),
            next_fire_times=cron.next_ticks(job.cron, job.timezone, now, count) if job.is_cron else [],
            last_run=job_last_run(job_name=job.name),
        )
        for job in registry.all()
    ]


def job_last_run(*, job_name: str) -> JobRun | None:
    """The run with the latest logical time that has started or been skipped."""
    return (
        JobRun.objects.filter(job_name=job_name).exclude(status="scheduled").order_by("-scheduled_for", "-id").first()
    )


def scheduler_last_pass_at() -> datetime | None:
    """The newest pass of any scheduler loop (one SchedulerNode row per loop)."""
    latest: datetime | None = SchedulerNode.objects.aggregate(latest=Max("last_pass_at"))["latest"]
    return latest
