"""Benchmark 3 across its runs: lateness against rate for every system, and its goals.

``make bench`` runs the cancellation benchmark four ways (bench/__main__.py): beside the
raw pipeline and django-q2's ONCE schedules, with two workers, behind PgBouncer, and beside
procrastinate and Celery (bench/peers/cancellations.py). Each keeps its steps' figures in
its JSON (``data.steps``); from them this draws one plot, p99 lateness against the rate
placed, log axes, into docs/bench/cancellations_lateness.png, and states the goals that
span the runs (the project against raw, behind PgBouncer against direct, against each
peer, and killed at its peak) with their figures, for the summary of ``make bench``.
Only the full runs' results (bench/results/*.json, never partial/) are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import RESULTS, fmt
from bench.curves import PLOTS
from bench.plotting import log_log_plot, ticks_at

PLOT = PLOTS / "cancellations_lateness.png"
P99_GOAL_SECONDS = 1.0  # bench.cancellations.P99_GOAL_SECONDS, without importing it
# (result, side in it, label), in the legend's order; a result not there is left out.
SYSTEMS = (
    ("cancellations", "project", "Tiffin"),
    ("cancellations", "raw", "raw SQL pipeline"),
    ("cancellations_workers2", "project", "Tiffin, two workers (10 s steps)"),
    ("cancellations_pgbouncer", "project", "Tiffin behind PgBouncer"),
    ("cancellations", "reference", "django-q2 ONCE schedules"),
    ("cancellations_peers", "project", "Tiffin, beside the peers"),
    ("cancellations_peers", "procrastinate", "procrastinate"),
    ("cancellations_peers", "celery", "Celery"),
)
# The rows of those results that carry benchmark 3's goals across the runs.
GOAL_ROWS = ("ceiling", "worker killed")


@dataclass
class Series:
    label: str
    targets: list[float]  # placed per second, as each step asked (the x axis's ticks)
    rates: list[float]  # placed per second, as achieved
    p99: list[float]  # seconds; where orders were missed, how long they had waited (a lower bound)
    bound: list[bool]  # whether that p99 is a lower bound


def results_read(directory: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """The cancellation results of ``directory`` by name (``cancellations*.json``)."""
    return {path.stem: json.loads(path.read_text()) for path in sorted(directory.glob("cancellations*.json"))}


def lateness_series(results: dict[str, dict[str, Any]]) -> list[Series]:
    """One series per system with steps recorded, its steps by rate (kill steps left out)."""
    series = []
    for name, side, label in SYSTEMS:
        steps = results.get(name, {}).get("data", {}).get("steps", {}).get(side, [])
        steps = sorted((s for s in steps if not s.get("kill")), key=lambda s: s["rate"])
        if steps:
            series.append(Series(label, [s["target"] for s in steps], [s["rate"] for s in steps],
                                 [s["p99"] for s in steps], [bool(s["bound"]) for s in steps]))  # fmt: skip
    return series


def lateness_plot(directory: Path = RESULTS, out: Path = PLOT) -> Path | None:
    """Draw the plot from ``directory``'s results to ``out``; None when no result has steps."""
    series = lateness_series(results_read(directory))
    if not series:
        return None
    from matplotlib.ticker import FuncFormatter

    with log_log_plot(
        out,
        size=(7.4, 4.8),
        title="Stale-order cancellation: p99 lateness against rate (open: orders missed)",
        xlabel="orders placed per second",
        ylabel="p99 lateness of the cancellations, s",
        legend_size=8,
    ) as axes:
        markers = "osD^vP*X"
        for n, s in enumerate(series):
            (line,) = axes.plot(s.rates, s.p99, marker=markers[n % len(markers)], label=s.label, linewidth=1.2)
            bounds = [n for n, bound in enumerate(s.bound) if bound]
            if bounds:  # missed orders: an open marker at how long they had waited
                axes.scatter([s.rates[n] for n in bounds], [s.p99[n] for n in bounds], s=90, facecolors="white",
                             edgecolors=line.get_color(), zorder=3)  # fmt: skip
        axes.axhline(P99_GOAL_SECONDS, color="grey", linestyle=":", linewidth=1, label="p99 goal, 1 s")
        ticks_at(axes.xaxis, [target for s in series for target in s.targets], rotation=45)  # every step's rate
        seconds = axes.yaxis  # 0.1, 0.2, 0.5, 1, 2, 5, 10 rather than 10^-1 ... 10^1
        seconds.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        seconds.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}" if f"{value:.0e}"[0] in "25" else ""))
    return out


def cancellation_goals(directory: Path = RESULTS) -> list[str]:
    """One line per goal row of the cancellation results (GOAL_ROWS): the figures, the
    project's share of the other side's rate, the goal and the verdict."""
    lines = []
    for name, result in results_read(directory).items():
        for row in result.get("rows", []):
            if not row["measure"].startswith(GOAL_ROWS):
                continue
            mine, other = row["project"], row["reference"]
            figures = fmt(mine) if other is None else f"{fmt(mine)} against {fmt(other)}"
            if isinstance(mine, int | float) and isinstance(other, int | float) and other:
                figures += f" ({fmt(mine / other)} x)"
            verdict = {None: "-", True: "PASS", False: "FAIL"}[row["passed"]]
            goal = f", goal {row['goal']}" if row["goal"] else ""
            lines.append(f"{verdict:<4}  {name}: {row['measure']}: {figures}{goal}")
    return lines
