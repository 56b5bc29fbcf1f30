"""Registration of declared jobs into the schedules table, and the operator's state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduling.models import Schedule
from scheduling.registry import Job, registry

# Columns that come from the declaration; the rest (first_seen_at, paused...) are the
# database's memory and are never overwritten by a registration.
DECLARED_FIELDS = (
    "kind",
    "cron",
    "timezone",
    "overlap",
    "misfire",
    "misfire_deadline_seconds",
    "max_attempts",
    "backoff_seconds",
    "timeout_seconds",
    "heartbeat",
    "batch_size",
)


def _declared(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in DECLARED_FIELDS}


def schedules_register(*, now: datetime) -> None:
    """Upsert one row per declared job (every server may do this at once: still one row).

    INSERT ... ON CONFLICT (job_name) DO UPDATE of the declared columns only, so
    first_seen_at keeps the first registration and paused keeps the operator's choice.
    """
    rows = [
        Schedule(job_name=job.name, first_seen_at=now, registered_at=now, **_declared(job)) for job in registry.all()
    ]
    Schedule.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["job_name"],
        update_fields=[*DECLARED_FIELDS, "registered_at"],
    )


def schedules_ensure(*, now: datetime) -> dict[str, Schedule]:
    """The stored schedule of every declared job, registering first if any is missing or stale."""
    stored = {schedule.job_name: schedule for schedule in Schedule.objects.all()}
    if any(_is_stale(job, stored.get(job.name)) for job in registry.all()):
        schedules_register(now=now)
        stored = {schedule.job_name: schedule for schedule in Schedule.objects.all()}
    return stored


def _is_stale(job: Job, schedule: Schedule | None) -> bool:
    return schedule is None or any(getattr(schedule, name) != value for name, value in _declared(job).items())
