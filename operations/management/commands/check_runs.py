from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from operations.alerts import problems_alert
from operations.monitoring import CheckWindow, Problem, problems_grouped, runs_check
from tiffin.cli import JsonCommand, counted, parse_now


class Command(JsonCommand):
    help = (
        "Compare the ticks every cron job should have produced with job_runs and list each problem: "
        "never claimed, claimed but never started, overrunning or silent, retrying, dead, skipped. "
        "Exits 0 when all is well and 1 when anything needs attention (a monitoring probe)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--now", help="ISO instant to check as of (default: the clock)")
        parser.add_argument(
            "--alert",
            action="store_true",
            help="also alert the problems never alerted before, as the check-missed-runs job does",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        now = parse_now(options["now"])
        problems = runs_check(now=now)
        if options["alert"]:
            problems_alert(problems=problems, now=now)
        window = CheckWindow.ending(now)
        data = {
            "checked_at": now.isoformat(),
            "window": {"start": window.start.isoformat(), "horizon": window.horizon.isoformat()},
            "ok": not problems,
            "problems": [problem.as_dict() for problem in problems],
        }
        self.emit(options, data, _text(window, problems))
        if problems:
            noun = "problem needs" if len(problems) == 1 else "problems need"
            raise CommandError(f"{len(problems)} {noun} attention", returncode=1)


def _text(window: CheckWindow, problems: list[Problem]) -> str:
    """Problems alike on one line each (job, kind, range of logical times, count); --json has every one."""
    span = f"ticks from {window.start:%Y-%m-%d %H:%M} to {window.horizon:%Y-%m-%d %H:%M} UTC"
    if not problems:
        return f"OK: no problems ({span}, and every run in flight)"
    groups = problems_grouped(problems)
    head = f"{counted(len(problems), 'problem')}" + (f" in {len(groups)} groups" if len(groups) < len(problems) else "")
    return "\n".join([f"{head} ({span}):", *(f"  {group}" for group in groups)])
