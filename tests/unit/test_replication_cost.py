"""bench.replication_cost's pure helpers: the order the commit modes take turns in, and
the latency figures (the benchmark itself runs with ``make bench-replication``)."""

from __future__ import annotations

import math
from collections import Counter

from bench.replication_cost import block_sizes, commit_plan, held_through, latencies


def test_every_mode_commits_as_often_and_leads_a_round_in_turn() -> None:
    plan = commit_plan(["local", "on", "remote_apply"], 4)
    assert Counter(plan) == {"local": 4, "on": 4, "remote_apply": 4}
    rounds = [plan[i : i + 3] for i in range(0, len(plan), 3)]
    assert [r[0] for r in rounds] == ["local", "on", "remote_apply", "local"]
    assert all(sorted(r) == ["local", "on", "remote_apply"] for r in rounds)


def test_one_mode_is_just_its_commits() -> None:
    assert commit_plan(["on"], 3) == ["on", "on", "on"]


def test_latencies_are_observed_values_in_milliseconds() -> None:
    figures = latencies([0.001 * n for n in range(1, 101)])
    assert figures["p50"] == 50.0
    assert figures["p99"] == 99.0
    assert figures["max"] == 100.0
    assert math.isclose(figures["mean"], 50.5)
    assert math.isnan(latencies([])["p50"])


def test_blocks_share_the_commits_evenly_and_none_is_empty() -> None:
    assert block_sizes(300, 10) == [30] * 10
    assert block_sizes(7, 3) == [3, 2, 2]
    assert block_sizes(2, 5) == [1, 1]


def _step(rate: float, held: bool) -> dict[str, object]:
    return {"rate": rate, "held": held}


def test_a_step_held_after_one_that_broke_does_not_raise_the_rate_held_throughout() -> None:
    steps = [_step(100, True), _step(199, True), _step(294, False), _step(334, True)]
    assert held_through(steps) == 199
    assert held_through([_step(100, False), _step(200, True)]) == 0
    assert held_through([]) == 0
