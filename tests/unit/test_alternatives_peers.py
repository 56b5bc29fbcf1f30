"""The real tools' rows of the alternatives table (bench/peers/alternatives.py) run in
.venv-peers only; what is checked here is the part every row's counting leans on and that
needs none of their packages: a tool's real tick, on a clock whose start is put on a tick,
is the simulated minute it stands for."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bench.peers.alternatives_probe import minute_of, nearest_minute, simulated_at, tick_seconds

START = datetime(2027, 3, 7, 20, 0, tzinfo=UTC)


def test_a_simulated_minute_is_a_whole_divisor_of_a_real_one():
    assert tick_seconds(10) == 6
    assert tick_seconds(12) == 5
    with pytest.raises(ValueError, match="whole divisor of 60"):
        tick_seconds(7)
    with pytest.raises(ValueError, match="whole divisor of 60"):
        tick_seconds(120)  # half a real second: no cron says it


def test_each_real_tick_of_a_tool_is_one_simulated_minute(monkeypatch):
    anchor = 1_796_423_238.0  # a multiple of 6: the runner puts the start on a tick
    monkeypatch.setenv("TIFFIN_CLOCK_START", START.isoformat())
    monkeypatch.setenv("TIFFIN_CLOCK_ANCHOR", repr(anchor))
    monkeypatch.setenv("TIFFIN_CLOCK_SPEED", "10.0")
    ticks = [nearest_minute(simulated_at(anchor + 6 * k)) for k in range(30)]
    assert ticks == [START.replace(minute=k) for k in range(30)]
    # A Celery beat that sends 2.9 real seconds late still charges its own tick...
    assert minute_of(simulated_at(anchor + 6 * 4 + 2.9)) == START.replace(minute=4)
    # ...and one that sends a whole tick late charges the next one (its tick is missed).
    assert minute_of(simulated_at(anchor + 6 * 5)) == START.replace(minute=5)
