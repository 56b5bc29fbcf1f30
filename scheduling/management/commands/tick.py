from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from scheduling.dispatch import TickReport, tick_pass
from tiffin.cli import JsonCommand, parse_now


class Command(JsonCommand):
    help = (
        "Run one scheduler pass: claim due cron ticks, enqueue due delayed runs and retries, "
        "abandon silent runs. Safe to run on many servers at once (each tick is claimed once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--now", help="ISO instant to treat as now (default: the clock)")

    def handle(self, *args: Any, **options: Any) -> None:
        now = parse_now(options["now"])
        report = tick_pass(now=now)
        self.emit(options, report.as_dict(), _text(report))


def _text(report: TickReport) -> str:
    lines = [f"tick at {report.now.isoformat()}"]
    for claim in report.claimed:
        reason = f" ({claim.skip_reason})" if claim.skip_reason else ""
        lines.append(f"  claimed {claim.job_name} @ {claim.scheduled_for.isoformat()}: {claim.status}{reason}")
    if not report.claimed:
        lines.append("  no cron tick to claim (none due, or another server claimed it)")
    lines.append(
        f"  enqueued {report.enqueued_due} due delayed runs/retries; requeued {report.requeued}; "
        f"abandoned {report.abandoned}; dead {report.dead}"
    )
    return "\n".join(lines)
