"""The backlog benchmark's pieces that need no database, worker or peer: how the backlog is
cut and spread over the hour, the memory samples, the backlog's figures, the ratios and the
table (bench/peers/backlog.py imports neither procrastinate nor Celery at module level)."""

from __future__ import annotations

import math

import pytest

from bench.peers import backlog

RESULT = {
    "rate": 200.0, "seconds": 30.0, "start_at": 0.0, "cpu": 3.0, "rss": 0, "twice": 0, "kill": False,
    "placers": [{"placed": 750, "accepted": 520, "errors": [], "lag": 0.0, "placed_until": 29.99}] * 8,
    "late": [0.2] * 98 + [0.5, 0.9], "missed": [], "early": 0,
}  # fmt: skip


def test_it_cuts_the_backlog_into_chunks_latest_first_covering_every_row_once() -> None:
    chunks = backlog.chunks_latest_first(45_001, size=20_000)
    assert chunks == [(40_000, 45_001), (20_000, 40_000), (0, 20_000)]
    assert sorted(i for lo, hi in chunks for i in range(lo, hi)) == list(range(45_001))


def test_it_spreads_the_backlog_evenly_over_the_horizon() -> None:
    n, horizon = 1_000_000, 3600.0
    offsets = [backlog.due_offset(i, n, horizon) for i in (0, n // 2, n - 1)]
    assert offsets[0] > 0
    assert offsets[1] == pytest.approx(horizon / 2, abs=0.01)
    assert offsets[2] < horizon
    # A second of the hour holds n / horizon runs: 278 a second for a million.
    assert sum(1 for i in range(0, 3000) if backlog.due_offset(i, n, horizon) < 1.0) == 278


def test_it_keeps_the_first_the_largest_and_the_last_memory_sample() -> None:
    memory = backlog.Memory()
    for total, largest in [(100, 60), (300, 250), (200, 90)]:
        memory.add(total * 2**20, largest * 2**20)
    assert (memory.start[0], memory.peak[0], memory.end[0]) == (100 * 2**20, 300 * 2**20, 200 * 2**20)
    assert memory.peak[1] == 250 * 2**20
    assert memory.mib() == "100 / 300 / 200"


def test_the_backlog_p99_is_a_lower_bound_when_it_falls_among_the_missed() -> None:
    held = backlog.backlog_figures([0.1] * 99 + [0.7], [])
    assert (held["due"], held["cancelled"], held["missed"], held["p99"]) == (100, 100, 0, 0.1)
    lost = backlog.backlog_figures([0.1] * 50, [30.0, 25.0])
    assert lost["missed"] == 2
    assert lost["p99"] == "> 25 (missed)"
    assert math.isnan(backlog.backlog_figures([], [])["p99"])


def test_a_ratio_needs_two_numbers() -> None:
    assert backlog.ratio(0.6, 0.5) == pytest.approx(1.2)
    assert backlog.ratio("> 20 (missed)", 0.5) is None
    assert backlog.ratio(0.6, 0) is None


def test_the_table_shows_each_phase_with_its_memory_and_the_backlog_figures() -> None:
    memory = backlog.Memory()
    for mib in (350, 361, 360):
        memory.add(mib * 2**20, 68 * 2**20)
    alone = backlog.Phase(name="alone", result=RESULT, memory=memory)
    on = backlog.Phase(name="on backlog", result=RESULT, memory=memory,
                       backlog=backlog.backlog_figures([0.3] * 10_000, []))  # fmt: skip
    table = backlog.phases_table({"project": [alone, on]})
    lines = table.splitlines()
    assert len(lines) == 4
    assert "350 / 361 / 360" in lines[2]
    assert lines[3].split()[-4:] == ["10,000", "0", "0", "0.300"]
    assert backlog.rush_summary(on)["p99"] == 0.5


def test_the_defaults_are_a_development_run_and_the_rush_rate_is_the_placers_rate() -> None:
    args = backlog.arguments(backlog.argument_parser(), ["--backlog", "1000000", "--rate", "300", "--quick"])
    assert (args.backlog, args.rate, args.step_seconds, args.horizon) == (1_000_000, 300.0, 10.0, 3600.0)
    assert backlog.arguments(backlog.argument_parser(), []).rate == 200.0
