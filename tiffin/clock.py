"""The one place that reads the time.

Everything else takes ``now`` or ``scheduled_for`` as an argument. ``now()`` is aware
and in UTC.

For the failure scenarios and ``simulate`` the clock can be accelerated and skewed per
process through the environment (production leaves these unset):

- ``TIFFIN_CLOCK_START``: ISO instant the simulated clock showed at ``TIFFIN_CLOCK_ANCHOR``;
- ``TIFFIN_CLOCK_ANCHOR``: real UNIX time at which the simulation started (shared by all
  processes of one simulation, so they agree on the simulated time);
- ``TIFFIN_CLOCK_SPEED``: simulated seconds per real second (default 1);
- ``TIFFIN_CLOCK_SKEW``: seconds added to this process's reading (may be negative).

A decision that must not depend on which server makes it (has an order's deadline
passed?) asks the database's clock instead, inside the statement that acts on it:
``DatabaseNow`` is that clock as an ORM expression. In production it is PostgreSQL's
``statement_timestamp()``; on an accelerated clock it is the same start, anchor and
speed computed from the database's reading, without any process's skew, so every
process of a simulation judges by one clock, the database's.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Expression
from django.db.models.sql.compiler import SQLCompiler

from tiffin.env import env_float


@dataclass(frozen=True)
class SimulatedClock:
    start: datetime
    anchor: float
    speed: float
    skew: float

    def now(self) -> datetime:
        elapsed = (time.time() - self.anchor) * self.speed
        return self.start + timedelta(seconds=elapsed + self.skew)

    def real_seconds(self, simulated_seconds: float) -> float:
        return simulated_seconds / self.speed


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
def _simulated() -> SimulatedClock | None:
    return _from_environment()


def reset() -> None:
    """Forget the cached environment reading (for tests that change the variables)."""
    _simulated.cache_clear()


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
    """SQL for the database's "now", ``minus_seconds`` earlier, and its parameters.

    PostgreSQL: ``statement_timestamp()``, the start of the current statement. Not
    ``now()``, which is the start of the transaction and lags inside a long one; not
    ``clock_timestamp()``, which is volatile: evaluated again for every row, it cannot
    bound an index scan and would give each row of one UPDATE its own instant.

    SQLite: its own ``'now'`` (fixed for the duration of a statement, to the
    millisecond), which is the operating system's clock of the machine the processes
    share: SQLite has no server of its own.

    On an accelerated clock (``TIFFIN_CLOCK_START``), ``start + (db_now - anchor) * speed``
    from the same variables as ``now()``, without ``TIFFIN_CLOCK_SKEW``.
    """
    simulated = _simulated()
    if vendor == "postgresql":
        if simulated is None:
            return "(statement_timestamp() - %s * interval '1 second')", [minus_seconds]
        return (
            "(%s::timestamptz + (statement_timestamp() - to_timestamp(%s)) * %s - %s * interval '1 second')",
            [simulated.start, simulated.anchor, simulated.speed, minus_seconds],
        )
    if vendor == "sqlite":
        # In production the same formula with start 0, anchor 0 and speed 1: the OS clock.
        start, anchor, speed = (
            (simulated.start.timestamp(), simulated.anchor, simulated.speed) if simulated else (0.0, 0.0, 1.0)
        )
        sql = f"strftime({_SQLITE_FORMAT}, %s + ({_SQLITE_EPOCH_SECONDS} - %s) * %s - %s, 'unixepoch')"
        return sql, [float(start), float(anchor), float(speed), minus_seconds]
    raise NotImplementedError(f"no database clock for the {vendor} backend")


class DatabaseNow(Expression):
    """The database's clock, ``minus_seconds`` earlier, as an ORM expression: compare a
    stored instant with it, or write it, in the statement that acts on the decision."""

    output_field = DateTimeField()

    def __init__(self, *, minus_seconds: float = 0.0) -> None:
        super().__init__()
        self.minus_seconds = float(minus_seconds)

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> tuple[str, list[Any]]:
        return database_now_sql(connection.vendor, minus_seconds=self.minus_seconds)
