"""Shared parsing for the commands of every app, in public so no app imports another's
private module: ISO instants, finite numbers, and --json output. Every command that takes
an instant or a number parses it here, so each refuses the same bad values with the same
message."""

from __future__ import annotations

import argparse
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tiffin import clock

# The instants a command accepts. Far enough either way for any schedule, history or
# simulation, and far from year 1 and 9999, where date arithmetic (a look-back window, a
# week's bounds, the next cron tick) overflows.
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(2200, 1, 1, tzinfo=UTC)


def parse_instant(value: str, *, option: str, require_offset: bool = False) -> datetime:
    """An ISO 8601 instant in UTC, from EARLIEST_INSTANT up to LATEST_INSTANT; a value
    without an offset is taken as UTC, unless ``require_offset``."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"{option}: {value!r} is not an ISO 8601 date-time (e.g. 2027-03-29T02:00:00Z)") from None
    if parsed.tzinfo is None and require_offset:
        raise CommandError(f"{option}: {value!r} has no UTC offset; add one, such as Z or +05:30")
    try:
        instant = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError:  # an offset that moves it past year 1 or 9999
        instant = LATEST_INSTANT if parsed.year > 1 else EARLIEST_INSTANT - timedelta(microseconds=1)
    if not EARLIEST_INSTANT <= instant < LATEST_INSTANT:
        raise CommandError(
            f"{option}: {value!r} is outside the instants this application handles "
            f"({EARLIEST_INSTANT:%Y-%m-%d} to {LATEST_INSTANT - timedelta(days=1):%Y-%m-%d}, UTC)"
        )
    return instant


def parse_finite(value: str) -> float:
    """An argparse ``type`` for a number option: a finite float, never nan or inf
    (``float()`` accepts both, and a rate or a skew of nan poisons every computation
    after it, usually after something has been written)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"{value!r} is not a finite number")
    return number


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
