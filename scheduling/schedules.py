"""Registration of declared jobs into the schedules table, and the operator's state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduling.models import Schedule
from scheduling.registry import Job, registry
from scheduling.sql import SCHEDULE_DECLARED_COLUMNS, ScheduleState, schedule_states

# The columns that come from the declaration (sql.SCHEDULE_DECLARED_COLUMNS); the rest
# (first_seen_at, paused...) are the database's memory, never overwritten by a registration.


def _declared(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in SCHEDULE_DECLARED_COLUMNS}


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
        update_fields=[*SCHEDULE_DECLARED_COLUMNS, "registered_at"],
    )


def schedules_ensure(*, now: datetime) -> dict[str, ScheduleState]:
    """The stored schedule of every declared job, with its cron cursor; registering
    first if any is missing or stale.

    1. Read every stored schedule and cursor (one statement, ``sql.schedule_states``).
    2. If a declared job has no row, or its row holds another declaration (a changed
       cron or policy, deployed), upsert every declared job and read again. So a new
       server or a changed declaration is registered on its first pass, and a pass
       that finds everything as declared (nearly every pass) writes nothing.
    """
    stored = schedule_states()
    if any(_is_stale(job, stored.get(job.name)) for job in registry.all()):
        schedules_register(now=now)
        stored = schedule_states()
    return stored


def _is_stale(job: Job, state: ScheduleState | None) -> bool:
    return state is None or state.declared != tuple(_declared(job).values())
