"""Benchmark 3's goals across its runs and the lateness plot's data, without a database or a
worker: the peers' steps, where a side stops stepping, its kill rate and the goals, the
0.9 x shares, the step figures kept in the JSON, the plot's series and the summary's lines
(bench/cancellations.py, bench/peers/cancellations.py, bench/lateness.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import cancellations as base
from bench import lateness
from bench.peers import cancellations as peers


def _result(rate: float, *, late: float = 0.2, missed: int = 0, kill: bool = False, twice: int = 0) -> dict[str, Any]:
    """One step's raw result as bench.cancellations.step returns it (8 placers, on time)."""
    placed = round(rate * 30 / 8)
    return {
        "rate": rate, "seconds": 30.0, "start_at": 0.0, "cpu": 3.0, "rss": 0, "twice": twice, "kill": kill,
        "placers": [{"placed": placed, "accepted": 0, "errors": [], "lag": 0.0, "placed_until": 29.99}] * 8,
        "late": [late] * 100, "missed": [20.0 + n for n in range(missed)], "early": 0, "errors_count": 0,
    }  # fmt: skip


def test_a_sides_kill_step_runs_at_the_highest_rate_it_held_else_its_lowest() -> None:
    steps = [_result(25), _result(50), _result(100, late=5.0), _result(200, missed=3)]
    assert peers.kill_rate(steps, (25.0, 50.0, 100.0, 200.0)) == 50.0
    assert peers.kill_rate([_result(25, late=3.0), _result(50, missed=1)], (25.0, 50.0)) == 25.0
    assert peers.kill_rate([_result(25, kill=True)], (25.0, 50.0)) == 25.0  # a kill step is no peak


def test_the_steps_go_on_past_400_to_benchmark_3s_top() -> None:
    assert peers.RATES[:5] == (25.0, 50.0, 100.0, 200.0, 400.0)
    assert max(peers.RATES) == max(base.RATES) == 2000.0
    assert list(peers.RATES) == sorted(set(peers.RATES))  # each step higher than the last


@pytest.mark.parametrize(
    ("step", "ends"),
    [
        (_result(400, late=0.35), False),  # held: on to the next rate
        (_result(400, late=0.999), False),
        (_result(400, late=1.0), True),  # p99 of 1 s is no hold, though nothing was missed
        (_result(400, late=5.0), True),
        (_result(400, missed=1), True),
        (_result(400, twice=1), True),
        ({**_result(400), "early": 1}, True),  # cancelled before its deadline
        ({**_result(400), "errors_count": 1}, True),  # a placer failed
    ],
)
def test_a_side_steps_on_only_after_a_step_it_held(step: dict[str, Any], ends: bool) -> None:
    assert peers.stepping_ends(step) is ends


def test_a_side_that_held_every_step_is_noted_as_a_lower_bound() -> None:
    rates = (25.0, 400.0, 800.0)
    assert peers.held_to_the_top([_result(25), _result(400), _result(800), _result(800, kill=True)], rates)
    assert not peers.held_to_the_top([_result(25), _result(400), _result(800, late=1.5)], rates)
    assert not peers.held_to_the_top([_result(25), _result(400, missed=2)], rates)  # stopped before the top
    assert not peers.held_to_the_top([], rates)
    args = base.arguments(peers.argument_parser(), ["--rates", "25,400,800", "--only", "project", "--only", "celery"])
    rep = peers.report(args, {"project": [_result(25), _result(400), _result(800)], "celery": [_result(25, late=3.0)]})
    assert "Tiffin held every step to 800/s: its ceiling is a lower bound" in rep.notes
    assert not any(note.startswith("Celery held") for note in rep.notes)


def test_the_project_must_hold_at_least_each_peers_ceiling_and_survive_the_kill() -> None:
    results = {
        "project": [_result(25), _result(50), _result(100), _result(100, kill=True)],
        "procrastinate": [_result(25), _result(50, late=2.0), _result(25, kill=True)],
        "celery": [_result(25, missed=2), _result(25, kill=True, missed=75, twice=1)],
    }
    rows = {row.measure: row for row in peers.goal_rows(results)}
    beside = rows["ceiling beside procrastinate (p99 < 1 s, none missed or twice)"]
    assert beside.passed is True
    assert beside.project == pytest.approx(100, rel=0.05)
    assert beside.reference == pytest.approx(25, rel=0.05)
    assert beside.ratio == pytest.approx(0.25, rel=0.05)  # the peer's rate over the project's
    assert rows["ceiling beside Celery (p99 < 1 s, none missed or twice)"].reference == 0.0
    assert rows["worker killed at 100/s: missed / executed twice, Tiffin"].passed is True
    celery = rows["worker killed at 25/s: missed / executed twice, Celery"]
    assert (celery.project, celery.passed) == ("75 / 1", None)
    results["project"][-1] = _result(100, kill=True, twice=1)
    assert peers.goal_rows(results)[2].passed is False


def test_a_step_with_missed_orders_keeps_their_wait_as_a_lower_bound() -> None:
    result = _result(100, missed=5)
    result["late"] = [0.3] * 10
    figures = base.step_figures(result, base.summary(result))
    assert figures["bound"] is True and figures["p99"] == 20.0 and figures["missed"] == 5
    assert figures["p50"] == 0.3 and figures["held"] is False
    assert base.step_figures(_result(25), base.summary(_result(25)))["bound"] is False


@pytest.mark.parametrize(("mine", "other", "passed"), [(900.0, 1000.0, True), (899.0, 1000.0, False)])
def test_the_share_goal_is_nine_tenths(mine: float, other: float, passed: bool) -> None:
    row = base.share_row("ceiling against the raw pipeline's", mine, other, "raw")
    assert row.passed is passed and row.goal == ">= 0.9 x raw"


def test_pgbouncer_is_measured_against_the_last_direct_run_of_the_same_step_length(tmp_path: Path) -> None:
    path = tmp_path / "cancellations.json"
    assert base.direct_ceiling(30, path) == (None, "no cancellations.json in bench/results/")
    path.write_text(json.dumps({"started_at": "2026-12-05T08:00:00+00:00", "data": {}}))
    assert base.direct_ceiling(30, path)[0] is None
    assert base.share_row("behind PgBouncer", 700.0, None, "direct").passed is None
    steps = {"project": [{"rate": 1379.0, "seconds": 30.0}], "raw": [{"rate": 1500.0, "seconds": 30.0}]}
    path.write_text(
        json.dumps({"started_at": "2026-12-05T08:00:00+00:00", "data": {"ceiling": 1379.0, "steps": steps}})
    )
    assert base.direct_ceiling(30, path) == (1379.0, "the direct run of 2026-12-05T08:00:00+00:00 (30 s steps)")
    # A 10 s step places before the first deadline: its ceiling is not a 30 s step's.
    assert base.direct_ceiling(10, path) == (
        None,
        "the direct run of 2026-12-05T08:00:00+00:00 had steps of 30 s, this one 10 s",
    )
    unrecorded = {"ceiling": 1379.0, "steps": {"project": [{"rate": 1379.0}]}}
    path.write_text(json.dumps({"started_at": "2026-12-05T08:00:00+00:00", "data": unrecorded}))
    assert base.direct_ceiling(30, path)[0] is None


def test_a_steps_figures_say_how_long_it_placed() -> None:
    assert base.step_figures(_result(25), base.summary(_result(25)))["seconds"] == _result(25)["seconds"]


@pytest.mark.parametrize(
    ("argv", "official"),
    [(["--kill"], True), ([], False), (["--kill", "--quick"], False), (["--kill", "--kill-rate", "50"], False)],
)
def test_only_make_benchs_peers_run_is_official(argv: list[str], official: bool) -> None:
    from bench.common import official_run

    def parse(rest: list[str]) -> Any:
        return base.arguments(peers.argument_parser(), rest)

    assert official_run("peers.cancellations", parse(argv), parse) is official


def _step(rate: float, p99: float, *, bound: bool = False, kill: bool = False, achieved: float = 0) -> dict[str, Any]:
    return {"target": rate, "rate": achieved or rate, "p50": p99 / 2, "p99": p99, "max": p99, "bound": bound,
            "missed": 0, "wrong": 0, "held": not bound, "kill": kill}  # fmt: skip


RESULTS = {
    "cancellations": {
        "data": {"ceiling": 400.0, "steps": {"project": [_step(400, 0.5), _step(200, 0.3)], "raw": [_step(200, 0.1)]}},
        "rows": [
            {"measure": "ceiling against the raw pipeline's", "project": 400.0, "reference": 500.0, "passed": False,
             "goal": ">= 0.9 x raw"},
            {"measure": "placer errors, all steps", "project": 0, "reference": None, "passed": True, "goal": "0"},
        ],
    },
    "cancellations_peers": {
        "data": {"steps": {"celery": [_step(25, 8.0), _step(50, 11.0, bound=True, achieved=47.5),
                                      _step(25, 30.0, kill=True)]}},
        "rows": [{"measure": "worker killed at 25/s: missed / executed twice, Celery", "project": "75 / 0",
                  "reference": None, "passed": None, "goal": ""}],
    },
}  # fmt: skip


def test_the_plot_has_one_series_per_system_run_by_rate_without_kill_steps() -> None:
    series = lateness.lateness_series(RESULTS)
    assert [s.label for s in series] == ["Tiffin", "raw SQL pipeline", "Celery"]
    assert series[0].rates == [200, 400] and series[0].p99 == [0.3, 0.5]
    assert series[2].rates == [25, 47.5] and series[2].bound == [False, True]
    assert series[2].targets == [25, 50]  # the plot's x ticks: the rates its steps asked for


def test_the_plot_and_the_summary_are_drawn_from_the_results_files(tmp_path: Path) -> None:
    for name, result in RESULTS.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
    assert lateness.lateness_plot(tmp_path / "none", tmp_path / "none.png") is None
    drawn = lateness.lateness_plot(tmp_path, tmp_path / "plot.png")
    assert drawn is not None and drawn.stat().st_size > 0
    assert lateness.cancellation_goals(tmp_path) == [
        "FAIL  cancellations: ceiling against the raw pipeline's: 400 against 500 (0.800 x), goal >= 0.9 x raw",
        "-     cancellations_peers: worker killed at 25/s: missed / executed twice, Celery: 75 / 0",
    ]


def test_the_reports_state_the_nine_tenths_goals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "RESULTS", tmp_path)
    main = base.report(base.arguments(base.argument_parser(), []), {"project": [_result(400)], "raw": [_result(500)]})
    rows = {row.measure: row for row in main.rows}
    assert rows["ceiling against the raw pipeline's"].passed is False  # 400 against 500: 0.8 x
    assert main.data["ceiling"] == pytest.approx(400, rel=0.05)
    (tmp_path / "cancellations.json").write_text(json.dumps({"started_at": "t", "data": main.data}))
    pooled = base.report(base.arguments(base.argument_parser(), ["--pgbouncer"]), {"project": [_result(380)]})
    row = next(row for row in pooled.rows if row.measure == "ceiling behind PgBouncer against direct")
    assert (row.passed, row.goal) == (True, ">= 0.9 x direct")
    assert "direct ceiling from the direct run of t (30 s steps)" in pooled.notes
    quick = base.report(base.arguments(base.argument_parser(), ["--quick", "--pgbouncer"]), {"project": [_result(380)]})
    row = next(row for row in quick.rows if row.measure == "ceiling behind PgBouncer against direct")
    assert (row.passed, row.goal) == (None, ">= 0.9 x direct (not measured)")
