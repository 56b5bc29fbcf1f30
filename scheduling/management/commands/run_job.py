"""``manage.py run_job``: one logical tick of a job by hand, through the normal claim.

Without ``--sync`` the run is claimed and enqueued for a worker. With ``--sync`` it is
claimed and executed here, or, when the job's overlap policy does not let it start now,
refused before anything is claimed, naming the runs it waits behind (so the same
command can be retried once they have finished; see
``scheduling.services.run_execute_here``).

Exit status: 0 when the run ran (``--sync``) or was enqueued, or when that tick had
already run successfully; 1 when it failed, could not run, or is claimed and not done.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from scheduling.execution import worker_name
from scheduling.models import JobRun, RunStatus
from scheduling.registry import UnknownJobError
from scheduling.selectors import RunState
from scheduling.services import (
    RunCannotStartError,
    SchedulingError,
    job_latest_tick,
    job_tick_check,
    run_claim_manual,
    run_execute_here,
)
from tiffin import clock
from tiffin.cli import JsonCommand, parse_instant


class Command(JsonCommand):
    help = (
        "Run one logical tick of a job by hand, through the normal claim (trigger 'manual'). "
        "Default tick: the latest at or before now. A tick already claimed is reported and not run again "
        "(exit 1 unless it succeeded)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("name", help="job name (see list_jobs)")
        parser.add_argument("--scheduled-for", help="ISO instant of the logical tick (default: latest tick)")
        parser.add_argument("--sync", action="store_true", help="execute here and now instead of on a worker")

    def handle(self, *args: Any, **options: Any) -> None:
        now = clock.now()
        name, sync = options["name"], options["sync"]
        try:
            scheduled_for = (
                parse_instant(options["scheduled_for"], option="--scheduled-for")
                if options["scheduled_for"]
                else job_latest_tick(job_name=name, at=now)
            )
            job_tick_check(job_name=name, scheduled_for=scheduled_for)
            if sync:
                run = run_execute_here(job_name=name, scheduled_for=scheduled_for, now=now, worker=worker_name())
            else:
                run = run_claim_manual(job_name=name, scheduled_for=scheduled_for, now=now)
        except RunCannotStartError as exc:
            self._cannot_start(options, exc, scheduled_for=scheduled_for)
        except (UnknownJobError, SchedulingError) as exc:
            raise CommandError(str(exc)) from None
        if run is None:
            self._already_claimed(options, scheduled_for, now=now)
            return
        self.emit(options, _as_dict(run), _text(run, synced=sync))
        if sync and run.status != RunStatus.SUCCEEDED:
            raise CommandError(f"run {run.id} did not succeed: {run.status}")

    def _cannot_start(self, options: dict[str, Any], exc: RunCannotStartError, *, scheduled_for: datetime) -> None:
        if options["json"]:
            data = {
                "job": options["name"],
                "scheduled_for": scheduled_for.isoformat(),
                "ran": False,
                "claimed": False,
                "waits_behind": [state.as_dict() for state in exc.waiting_on],
            }
            self.emit(options, data, "")
        raise CommandError(str(exc)) from None

    def _already_claimed(self, options: dict[str, Any], when: datetime, *, now: datetime) -> None:
        """Asking again for a tick that ran is a harmless no-op (exit 0); a claim that has
        not succeeded did nothing for this caller, who is told why it has not (exit 1)."""
        existing = JobRun.objects.filter(job_name=options["name"], subject="", scheduled_for=when).first()
        status = existing.status if existing else "unknown"
        data = {"job": options["name"], "scheduled_for": when.isoformat(), "already_claimed": True, "status": status}
        if existing is not None and existing.status == RunStatus.SUCCEEDED:
            text = f"{options['name']} @ {when.isoformat()} is already claimed (status: {status}); nothing run"
            self.emit(options, data, text)
            return
        if options["json"]:
            self.emit(options, data, "")
        state = RunState(run=existing, now=now).explained() if existing else "gone"
        raise CommandError(
            f"{options['name']} @ {when.isoformat()} is already claimed as run {existing.id if existing else '?'}, "
            f"which is {state}; nothing run"
        )


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
