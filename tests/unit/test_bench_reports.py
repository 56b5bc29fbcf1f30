"""The benchmarks' report plumbing: kept result sections and the cost-curve verdicts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.curves import Point, curve_rows, sizes_parse
from bench.markdown import results_markdown, sections_kept

MACHINE = {"nproc": 2, "memory_gib": 8.0, "postgresql": "15", "python": "3.11", "load_average": [1.0, 1.0, 1.0]}


def _result(name: str) -> dict[str, object]:
    return {"title": f"{name} title", "command": f"python -m bench.{name}", "started_at": "2026-12-01T12:00:00+00:00",
            "passed": True, "table": f"{name} table", "machine": MACHINE}  # fmt: skip


def test_it_keeps_the_sections_of_benchmarks_not_run_here() -> None:
    before = results_markdown({"payouts": _result("payouts"), "history": _result("history")})
    after = results_markdown({"payouts": {**_result("payouts"), "table": "new table"}}, sections_kept(before))
    assert "history table" in after
    assert "new table" in after
    assert "payouts table" not in after
    assert after.index("bench:result payouts") < after.index("bench:result history")


def _point(size: int, project: float, reference: float) -> Point:
    return Point(size=size, units=size, project=project, reference=reference, extra={})


def test_it_fails_a_size_over_the_ratio_and_a_curve_that_grows() -> None:
    rows = curve_rows("time", "carts", [_point(100, 1.0, 1.0), _point(1000, 20.0, 10.0)])
    assert [row.passed for row in rows] == [True, False, False]
    assert rows[-1].project == pytest.approx(2.0)
    assert math.isclose(rows[1].ratio or 0, 2.0)


@pytest.mark.parametrize("text", ["", "10,x", "100,10", "0,10", "10,10"])
def test_it_refuses_sizes_that_are_not_positive_distinct_and_ascending(text: str) -> None:
    with pytest.raises(ValueError, match=r"sizes|comma-separated"):
        sizes_parse(text)


def test_it_reads_sizes_with_underscores() -> None:
    assert sizes_parse("1_000,10000") == [1000, 10000]


@pytest.mark.parametrize(
    ("changed", "said"),
    [
        ({"autovacuum": "off", "work_mem": "65536 x kB"}, "`autovacuum = off`, `work_mem = 65536 x kB`"),
        ({}, "PostgreSQL's default settings"),
        (None, "its settings not recorded"),
    ],
)
def test_the_machine_line_names_the_server_settings_changed(changed: dict[str, str] | None, said: str) -> None:
    machine = {**MACHINE, **({"postgresql_changed": changed} if changed is not None else {})}
    text = results_markdown({"payouts": {**_result("payouts"), "machine": machine}})
    assert said in text.split("\n\n")[0] and "stock settings" not in text


@pytest.mark.parametrize(
    ("argv", "partial"),
    [
        ([], False),
        (["--quick", "--workers", "2"], False),
        (["--pgbouncer"], False),  # in the direct run's 30 s steps
        (["--only", "project"], True),
        (["--rates", "1000,1200"], True),
        (["--step-seconds", "20"], True),
        (["--quick"], True),  # make bench runs one worker in 30 s steps
        (["--workers", "2"], True),  # and the two-worker variant in 10 s steps
        (["--quick", "--pgbouncer"], True),
        (["--quick", "--pgbouncer", "--step-seconds", "30"], True),  # --quick sets 10 s
    ],
)
def test_a_development_run_of_the_cancellations_is_partial(argv: list[str], partial: bool) -> None:
    from bench import cancellations

    args = cancellations.arguments(cancellations.argument_parser(), argv)
    assert cancellations.partial_run(args) is partial


def test_a_partial_report_is_written_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import common

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.setattr(common, "machine", lambda: MACHINE)
    common.Report(name="cancellations", title="t", command="c", project="p", reference="r", partial=True).finish()
    common.Report(name="payouts", title="t", command="c", project="p", reference="r").finish()
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json")) == [
        "partial/cancellations.json",
        "payouts.json",
    ]


@pytest.mark.parametrize(
    ("module", "argv", "official"),
    [
        ("carts", [], True),
        ("carts", ["--sizes", "100000,1000000,5000000", "--name", "carts_large"], True),
        ("carts", ["--sizes", "100000", "--name", "cartsdev"], False),
        ("carts", ["--rounds", "1"], False),
        ("carts", ["--name", "carts_large", "--sizes", "100000,1000000,5000000"], True),  # in any order
        ("payouts", [], True),
        ("payouts", ["--sizes", "1000,10000,100000", "--rounds", "1", "--name", "payouts_large"], True),
        ("payouts", ["--sizes", "10000"], False),
        ("scheduler_pass", [], True),
        ("scheduler_pass", ["--passes", "2"], False),
    ],
)
def test_a_curve_run_is_official_only_with_make_benchs_arguments(module: str, argv: list[str], official: bool) -> None:
    import importlib

    from bench.common import official_run

    parse = importlib.import_module(f"bench.{module}").argument_parser().parse_args
    assert official_run(module, parse(argv), parse) is official


def test_a_partial_curve_plot_is_drawn_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import curves

    monkeypatch.setattr(curves, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(curves, "PLOTS", tmp_path / "plots")
    points = [curves.Point(10, 10, 1.0, 1.1, {}), curves.Point(100, 100, 9.0, 10.0, {})]
    drawn = [curves.curve_plot("carts", "t", "x", points, ("a", "b"), partial=partial) for partial in (True, False)]
    assert [p.relative_to(tmp_path).as_posix() for p in drawn] == ["results/partial/carts.png", "plots/carts.png"]
    assert all(p.stat().st_size > 0 for p in drawn)
