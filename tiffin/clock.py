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
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


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
    speed = float(os.environ.get("TIFFIN_CLOCK_SPEED", "1"))
    if speed <= 0:
        raise ValueError(f"TIFFIN_CLOCK_SPEED={speed} must be positive")
    return SimulatedClock(
        start=parsed.astimezone(UTC),
        anchor=float(os.environ.get("TIFFIN_CLOCK_ANCHOR", str(time.time()))),
        speed=speed,
        skew=float(os.environ.get("TIFFIN_CLOCK_SKEW", "0")),
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


def is_simulated() -> bool:
    return _simulated() is not None
