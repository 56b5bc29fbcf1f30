"""Shared parsing for the commands of every app, in public so no app imports another's
private module: blank values, ISO instants, finite numbers, and --json output. Every
command derives from ``TiffinCommand`` and parses instants and numbers here, so each
refuses the same bad values with the same message."""

from __future__ import annotations

import argparse
import functools
import json
import math
from collections.abc import Callable
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


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 week``, ``3 weeks``: a count with its noun in the right number."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


class TiffinCommand(BaseCommand):
    """The base of every command here: an option (or argument) given an empty or blank
    value is refused with exit status 1 before the command does anything, instead of
    meaning "not given" (``--as-of ""`` from a script's unset variable would pay as of
    now). One check, in ``execute``, which both the command line and ``call_command``
    go through; typed options let a blank value through their type so that it reaches
    the check rather than argparse's own message and exit status 2."""

    _value_options: dict[str, str]

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        self._value_options = {}
        for action in parser._actions:  # argparse's list of them, which call_command reads too
            if action.nargs == 0 or action.choices is not None:
                continue
            self._value_options[action.dest] = max(action.option_strings, key=len, default=action.dest)
            if callable(action.type):
                action.type = _blank_passes(action.type)
        return parser

    def execute(self, *args: Any, **options: Any) -> str | None:
        for dest, option in getattr(self, "_value_options", {}).items():
            value = options.get(dest)
            if any(isinstance(v, str) and not v.strip() for v in (value if isinstance(value, list) else [value])):
                raise CommandError(f"{option}: an empty value is not allowed; give a value or leave {option} out")
        return super().execute(*args, **options)


def _blank_passes(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    @functools.wraps(parse, updated=())
    def parse_unless_blank(value: str) -> Any:
        return value if not value.strip() else parse(value)

    return parse_unless_blank


class JsonCommand(TiffinCommand):
    """A command with a --json flag: ``emit`` prints either JSON or the human text."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print machine-readable JSON")

    def emit(self, options: dict[str, Any], data: Any, text: str) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2, default=str))
        else:
            self.stdout.write(text)
