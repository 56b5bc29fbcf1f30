"""Shared parsing for the scheduling commands: ISO instants and --json output."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tiffin import clock


def parse_instant(value: str, *, option: str) -> datetime:
    """An ISO 8601 instant; a value without an offset is taken as UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"{option}: {value!r} is not an ISO 8601 date-time (e.g. 2027-03-29T02:00:00Z)") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


# How far past the clock a --now may be: schedulers' clocks may disagree by this much.
FUTURE_TOLERANCE = timedelta(seconds=90)


def parse_now(value: str | None, *, option: str = "--now") -> datetime:
    """``--now`` for a command that acts as of that instant: the clock when not given.

    A later instant is refused: it would claim ticks that have not happened (the claims
    would then block the real ones), and treat delayed runs as due early.
    """
    now = clock.now()
    if value is None:
        return now
    instant = parse_instant(value, option=option)
    if instant > now + FUTURE_TOLERANCE:
        raise CommandError(f"{option}: {instant.isoformat()} is in the future (the clock says {now.isoformat()})")
    return instant


class JsonCommand(BaseCommand):
    """A command with a --json flag: ``emit`` prints either JSON or the human text."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print machine-readable JSON")

    def emit(self, options: dict[str, Any], data: Any, text: str) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2, default=str))
        else:
            self.stdout.write(text)
