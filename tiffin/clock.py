"""The one place that reads the time.

Everything else takes ``now`` or ``scheduled_for`` as an argument. ``now()`` is aware
and in UTC.

For the failure scenarios and ``simulate`` the clock can be accelerated and skewed per
process through the environment (production leaves these unset):

- ``TIFFIN_CLOCK_START``: ISO instant the simulated clock showed at ``TIFFIN_CLOCK_ANCHOR``;
- ``TIFFIN_CLOCK_ANCHOR``: real UNIX time at which the simulation started (shared by all
  processes of one simulation, so they agree on the simulated time);
- ``TIFFIN_CLOCK_SPEED``: simulated seconds per real second (default 1);
- ``TIFFIN_CLOCK_SKEW``: seconds added to this process's reading (may be negative);
- ``TIFFIN_CLOCK_FILE``: a JSON file of later speeds, ``[[start, anchor, speed], ...]``:
  from real time ``anchor`` on, the clock shows ``start`` and runs at ``speed``. A
  simulation's governor appends one to slow the clock (or speed it up again) while its
  processes run; each appended segment starts where the one before it stands, and a
  little in the future, so every process has read it before it applies and all of them
  read one continuous clock. Read again whenever the file changes.

A decision that must not depend on which server makes it (has an order's deadline
passed?) asks the database's clock instead, inside the statement that acts on it:
``DatabaseNow`` is that clock as an ORM expression. In production it is PostgreSQL's
``statement_timestamp()``; on an accelerated clock it is the same start, anchor and
speed computed from the database's reading, without any process's skew, so every
process of a simulation judges by one clock, the database's.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Expression
from django.db.models.sql.compiler import SQLCompiler

from tiffin.env import env_float


@dataclass(frozen=True)
class ClockSegment:
    """From real UNIX time ``anchor`` on, the clock shows ``start`` and runs ``speed`` times
    faster than real time (until the next segment's anchor)."""

    start: datetime
    anchor: float
    speed: float

    def at(self, real: float) -> datetime:
        return self.start + timedelta(seconds=(real - self.anchor) * self.speed)

    def real_time_at(self, instant: datetime) -> float:
        return self.anchor + (instant - self.start).total_seconds() / self.speed


@dataclass(frozen=True)
class SimulatedClock:
    start: datetime
    anchor: float
    speed: float
    skew: float
    # Later segments (TIFFIN_CLOCK_FILE), by anchor; the first applies before its anchor too.
    later: tuple[ClockSegment, ...] = ()

    def segments(self) -> tuple[ClockSegment, ...]:
        return (ClockSegment(self.start, self.anchor, self.speed), *self.later)

    def segment(self, real: float | None = None) -> ClockSegment:
        """The segment in force at real time ``real`` (default: now)."""
        real = time.time() if real is None else real
        found = ClockSegment(self.start, self.anchor, self.speed)
        for segment in self.later:
            if segment.anchor > real:
                break
            found = segment
        return found

    def now(self) -> datetime:
        real = time.time()
        return self.segment(real).at(real) + timedelta(seconds=self.skew)

    def real_seconds(self, simulated_seconds: float) -> float:
        return simulated_seconds / self.segment().speed

    def real_time_at(self, instant: datetime) -> float:
        """The real UNIX time at which this clock (without skew) shows ``instant``, by the
        segments known now."""
        found = self.segments()[0]
        for segment in self.later:
            if segment.start > instant:
                break
            found = segment
        return found.real_time_at(instant)


def read_segments(path: str) -> tuple[ClockSegment, ...]:
    """The later segments a clock file holds ([] while it is missing or half written)."""
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return ()
    return tuple(
        ClockSegment(start=datetime.fromisoformat(start).astimezone(UTC), anchor=float(anchor), speed=float(speed))
        for start, anchor, speed in rows
    )


def write_segments(path: str, segments: tuple[ClockSegment, ...]) -> None:
    """Replace the clock file at once (a reader sees the old list or the new one)."""
    rows = [[segment.start.isoformat(), segment.anchor, segment.speed] for segment in segments]
    partial = Path(f"{path}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(rows))
    partial.replace(path)


def _from_environment() -> SimulatedClock | None:
    start = os.environ.get("TIFFIN_CLOCK_START")
    if not start:
        return None
    parsed = datetime.fromisoformat(start)
    if parsed.tzinfo is None:
        raise ValueError(f"TIFFIN_CLOCK_START={start!r} must carry a UTC offset")
    # Read as every other number setting is: nan and inf refused with the variable's name.
    speed = env_float("TIFFIN_CLOCK_SPEED", 1.0)
    if speed <= 0:
        raise ValueError(f"TIFFIN_CLOCK_SPEED={speed} must be positive")
    return SimulatedClock(
        start=parsed.astimezone(UTC),
        anchor=env_float("TIFFIN_CLOCK_ANCHOR", time.time()),
        speed=speed,
        skew=env_float("TIFFIN_CLOCK_SKEW", 0.0),
    )


@functools.cache
def _environment_clock() -> SimulatedClock | None:
    return _from_environment()


# The clock file's modification time and the clock read with its segments.
_file_state: dict[str, Any] = {}


def _simulated() -> SimulatedClock | None:
    base = _environment_clock()
    path = os.environ.get("TIFFIN_CLOCK_FILE")
    if base is None or not path:
        return base
    try:
        status = Path(path).stat()
    except OSError:
        stored: SimulatedClock = _file_state.get("clock", base)
        return stored
    stamp = (status.st_ino, status.st_mtime_ns)  # a replaced file is a new inode
    if _file_state.get("stamp") != stamp or _file_state.get("path") != path:
        _file_state.update(stamp=stamp, path=path, clock=replace(base, later=read_segments(path)))
    clock: SimulatedClock = _file_state["clock"]
    return clock


def reset() -> None:
    """Forget the cached environment reading (for tests that change the variables)."""
    _environment_clock.cache_clear()
    _file_state.clear()


def now() -> datetime:
    """The current instant, aware, in UTC (simulated when the environment says so)."""
    simulated = _simulated()
    if simulated is not None:
        return simulated.now()
    return datetime.now(UTC)


def sleep(seconds: float) -> None:
    """Sleep for ``seconds`` of clock time (shorter in real time when accelerated)."""
    if seconds > 0:
        time.sleep(real_seconds(seconds))


def real_seconds(seconds: float) -> float:
    """How many real seconds ``seconds`` of clock time take (fewer when accelerated)."""
    simulated = _simulated()
    return simulated.real_seconds(seconds) if simulated is not None else seconds


# --- The database's clock ---------------------------------------------------------------

# Unix time at the Julian day 0 of SQLite's julianday(): 'now' as seconds since the epoch.
_SQLITE_EPOCH_SECONDS = "((julianday('now') - 2440587.5) * 86400.0)"
# The text Django stores a datetime as on SQLite (naive UTC), to the millisecond.
_SQLITE_FORMAT = "'%%Y-%%m-%%d %%H:%%M:%%f'"


def database_now_sql(vendor: str, *, minus_seconds: float = 0.0) -> tuple[str, list[Any]]:
    """SQL for the database's "now", ``minus_seconds`` earlier, and its parameters, on the
    backend ``vendor`` (``postgresql``: ``_postgresql_now_sql``, ``sqlite``: ``_sqlite_now_sql``).

    On an accelerated clock (``TIFFIN_CLOCK_START``), ``start + (db_now - anchor) * speed``
    from the same variables as ``now()``, without ``TIFFIN_CLOCK_SKEW``.
    """
    backend_sql = _NOW_SQL.get(vendor)
    if backend_sql is None:
        raise NotImplementedError(f"no database clock for the {vendor} backend")
    return backend_sql(_simulated(), minus_seconds)


def _postgresql_now_sql(simulated: SimulatedClock | None, minus_seconds: float) -> tuple[str, list[Any]]:
    """``statement_timestamp()``, the start of the current statement. Not ``now()``, which is
    the start of the transaction and lags inside a long one; not ``clock_timestamp()``,
    which is volatile: evaluated again for every row, it cannot bound an index scan and
    would give each row of one UPDATE its own instant."""
    if simulated is None:
        return "(statement_timestamp() - %s * interval '1 second')", [minus_seconds]
    return _piecewise(
        simulated,
        lambda segment: (
            "(%s::timestamptz + (statement_timestamp() - to_timestamp(%s)) * %s - %s * interval '1 second')",
            [segment.start, segment.anchor, segment.speed, minus_seconds],
        ),
        lambda anchor: ("statement_timestamp() >= to_timestamp(%s)", [anchor]),
    )


def _sqlite_now_sql(simulated: SimulatedClock | None, minus_seconds: float) -> tuple[str, list[Any]]:
    """SQLite's own ``'now'`` (fixed for the duration of a statement, to the millisecond),
    which is the operating system's clock of the machine the processes share: SQLite has
    no server of its own."""

    # In production the same formula with start 0, anchor 0 and speed 1: the OS clock.
    def sqlite(segment: ClockSegment | None) -> tuple[str, list[Any]]:
        start, anchor, speed = (
            (segment.start.timestamp(), segment.anchor, segment.speed) if segment else (0.0, 0.0, 1.0)
        )
        sql = f"strftime({_SQLITE_FORMAT}, %s + ({_SQLITE_EPOCH_SECONDS} - %s) * %s - %s, 'unixepoch')"
        return sql, [float(start), float(anchor), float(speed), minus_seconds]

    if simulated is None:
        return sqlite(None)
    return _piecewise(simulated, sqlite, lambda anchor: (f"{_SQLITE_EPOCH_SECONDS} >= %s", [float(anchor)]))


_NOW_SQL = {"postgresql": _postgresql_now_sql, "sqlite": _sqlite_now_sql}


def _piecewise(
    simulated: SimulatedClock,
    segment_sql: Callable[[ClockSegment], tuple[str, list[Any]]],
    from_anchor_sql: Callable[[float], tuple[str, list[Any]]],
) -> tuple[str, list[Any]]:
    """The segment in force now, and any the governor has announced for later, as one
    expression: ``CASE WHEN db_now >= later.anchor THEN later ... ELSE current END``."""
    real = time.time()
    current = simulated.segment(real)
    sql, params = segment_sql(current)
    upcoming = [segment for segment in simulated.later if segment.anchor > real]
    if not upcoming:
        return sql, params
    cases, case_params = [], []
    for segment in reversed(upcoming):
        condition, condition_params = from_anchor_sql(segment.anchor)
        value, value_params = segment_sql(segment)
        cases.append(f"WHEN {condition} THEN {value}")
        case_params += [*condition_params, *value_params]
    return f"(CASE {' '.join(cases)} ELSE {sql} END)", [*case_params, *params]


class DatabaseNow(Expression):
    """The database's clock, ``minus_seconds`` earlier, as an ORM expression: compare a
    stored instant with it, or write it, in the statement that acts on the decision."""

    output_field = DateTimeField()

    def __init__(self, *, minus_seconds: float = 0.0) -> None:
        super().__init__()
        self.minus_seconds = float(minus_seconds)

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> tuple[str, list[Any]]:
        # seam: the compiling connection's backend (Django hands it in), the clock's one.
        return database_now_sql(connection.vendor, minus_seconds=self.minus_seconds)
