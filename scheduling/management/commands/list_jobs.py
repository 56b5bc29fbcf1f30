from __future__ import annotations

from typing import Any

from scheduling.selectors import JobOverview, jobs_overview
from tiffin import clock
from tiffin.cli import JsonCommand


class Command(JsonCommand):
    help = "List every declared job: schedule and zone, policies, next three fire times, last run."

    def handle(self, *args: Any, **options: Any) -> None:
        overviews = jobs_overview(now=clock.now())
        self.emit(options, [_as_dict(o) for o in overviews], "\n\n".join(_text(o) for o in overviews))


def _as_dict(overview: JobOverview) -> dict[str, Any]:
    job, last = overview.job, overview.last_run
    return {
        "name": job.name,
        "kind": job.kind,
        "cron": job.cron,
        "timezone": job.timezone,
        "overlap": job.overlap,
        "misfire": job.misfire,
        "misfire_deadline_seconds": job.misfire_deadline_seconds,
        "max_attempts": job.max_attempts,
        "paused": bool(overview.schedule and overview.schedule.paused),
        "next_fire_times": [t.isoformat() for t in overview.next_fire_times],
        "last_run": None
        if last is None
        else {"scheduled_for": last.scheduled_for.isoformat(), "status": last.status, "id": last.id},
    }


def _text(overview: JobOverview) -> str:
    data = _as_dict(overview)
    schedule = f"{data['cron']} ({data['timezone']})" if data["cron"] else "delayed (one-off runs created by code)"
    deadline = f" {data['misfire_deadline_seconds']}s" if data["misfire_deadline_seconds"] else ""
    last = data["last_run"]
    lines = [
        f"{data['name']}{'  [PAUSED]' if data['paused'] else ''}",
        f"  schedule: {schedule}",
        f"  policies: overlap={data['overlap']} misfire={data['misfire']}{deadline} attempts={data['max_attempts']}",
        f"  next: {', '.join(data['next_fire_times']) or '-'}",
        f"  last run: {last['scheduled_for'] + ' ' + last['status'] if last else 'never'}",
    ]
    return "\n".join(lines)
