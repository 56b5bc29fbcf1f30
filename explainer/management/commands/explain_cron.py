from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from explainer.explain import MAX_COUNT, Explanation, cron_explain
from scheduling import cron
from tiffin import clock
from tiffin.cli import JsonCommand, parse_instant


class Command(JsonCommand):
    help = (
        "Explain a five-field cron expression: each field in words, the DST rule, warnings for "
        "the traps, and the next fire times in UTC and in the zone. Quote the expression."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("expr", nargs="+", help="the expression, quoted: '30 2 * * 1-5'")
        parser.add_argument("--tz", default="UTC", help="IANA time zone the expression runs in (default UTC)")
        parser.add_argument("--count", type=int, default=5, help=f"how many fire times to list (1-{MAX_COUNT})")
        parser.add_argument("--from", dest="start", help="ISO instant to start from (default now; no offset = UTC)")

    def handle(self, *args: Any, **options: Any) -> None:
        expr = " ".join(options["expr"])
        if not 1 <= options["count"] <= MAX_COUNT:
            raise CommandError(f"--count must be between 1 and {MAX_COUNT}, got {options['count']}")
        after = _start(options["start"])
        try:
            explanation = cron_explain(expr=expr, tz=options["tz"], count=options["count"], after=after)
        except cron.CronError as exc:
            hint = " (quote the whole expression, or the shell expands '*')" if len(options["expr"]) > 1 else ""
            raise CommandError(f"{exc}{hint}") from None
        self.emit(options, explanation.as_dict(), _text(explanation))


def _start(value: str | None) -> datetime:
    if value is None:
        return clock.now()
    try:
        return parse_instant(value, option="--from")
    except OverflowError:
        raise CommandError(f"--from: {value!r} is out of range") from None


def _text(explanation: Explanation) -> str:
    width = max(len(f.text) for f in explanation.fields)
    lines = [f"{explanation.normalized}  ({explanation.tz})", explanation.summary, ""]
    lines += [f"  {f.name:<13} {f.text:<{width}}  {f.meaning}" for f in explanation.fields]
    lines += ["", f"DST: {explanation.dst_rule}"]
    if explanation.warnings:
        lines += ["", "Warnings:"] + [f"  ! {w.message}" for w in explanation.warnings]
    lines += ["", f"Next {len(explanation.fires)} fire time(s):"]
    lines += [
        f"  {f.utc:%Y-%m-%d %H:%M} UTC   {f.local:%Y-%m-%d %H:%M} {f.local.tzname()} ({f.local:%a})"
        for f in explanation.fires
    ] or ["  none"]
    return "\n".join(lines)
