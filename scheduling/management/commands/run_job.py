from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from scheduling.execution import runs_execute, worker_name
from scheduling.management.commands._base import JsonCommand, parse_instant
from scheduling.models import JobRun, RunStatus
from scheduling.registry import UnknownJobError
from scheduling.services import SchedulingError, job_latest_tick, job_tick_check, run_claim_manual
from tiffin import clock


class Command(JsonCommand):
    help = (
        "Run one logical tick of a job by hand, through the normal claim (trigger 'manual'). "
        "Default tick: the latest at or before now. A tick already claimed is reported and not run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("name", help="job name (see list_jobs)")
        parser.add_argument("--scheduled-for", help="ISO instant of the logical tick (default: latest tick)")
        parser.add_argument("--sync", action="store_true", help="execute here and now instead of on a worker")

    def handle(self, *args: Any, **options: Any) -> None:
        now = clock.now()
        try:
            scheduled_for = (
                parse_instant(options["scheduled_for"], option="--scheduled-for")
                if options["scheduled_for"]
                else job_latest_tick(job_name=options["name"], at=now)
            )
            job_tick_check(job_name=options["name"], scheduled_for=scheduled_for)
            run = run_claim_manual(
                job_name=options["name"], scheduled_for=scheduled_for, now=now, enqueue=not options["sync"]
            )
        except (UnknownJobError, SchedulingError) as exc:
            raise CommandError(str(exc)) from None
        if run is None:
            self._already_claimed(options, scheduled_for.isoformat())
            return
        if options["sync"]:
            runs_execute(run_ids=[run.id], worker=worker_name())
            run.refresh_from_db()
        self.emit(options, _as_dict(run), _text(run, synced=options["sync"]))
        if options["sync"] and run.status != RunStatus.SUCCEEDED:
            raise CommandError(f"run {run.id} did not succeed: {run.status}")

    def _already_claimed(self, options: dict[str, Any], when: str) -> None:
        existing = JobRun.objects.filter(job_name=options["name"], subject="", scheduled_for=when).first()
        status = existing.status if existing else "unknown"
        data = {"job": options["name"], "scheduled_for": when, "already_claimed": True, "status": status}
        self.emit(options, data, f"{options['name']} @ {when} is already claimed (status: {status}); nothing run")


def _as_dict(run: JobRun) -> dict[str, Any]:
    return {
        "run": run.id,
        "job": run.job_name,
        "scheduled_for": run.scheduled_for.isoformat(),
        "status": run.status,
        "fence": run.fence,
        "attempts": run.attempts,
        "result": run.result,
        "error": run.error,
    }


def _text(run: JobRun, *, synced: bool) -> str:
    if not synced:
        return f"claimed run {run.id}: {run.job_name} @ {run.scheduled_for.isoformat()}, enqueued for a worker"
    lines = [f"ran {run.job_name} @ {run.scheduled_for.isoformat()} (run {run.id}, fence {run.fence}): {run.status}"]
    if run.result is not None:
        lines.append(f"  result: {run.result}")
    if run.error:
        lines.append(f"  error: {run.error.strip().splitlines()[-1]}")
    return "\n".join(lines)
