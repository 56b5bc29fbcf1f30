"""Shared parsing for the scheduling commands: ISO instants and --json output."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


def parse_instant(value: str, *, option: str) -> datetime:
    """An ISO 8601 instant; a value without an offset is taken as UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"{option}: {value!r} is not an ISO 8601 date-time (e.g. 2027-03-29T02:00:00Z)") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


class JsonCommand(BaseCommand):
    """A command with a --json flag: ``emit`` prints either JSON or the human text."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print machine-readable JSON")

    def emit(self, options: dict[str, Any], data: Any, text: str) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2, default=str))
        else:
            self.stdout.write(text)
