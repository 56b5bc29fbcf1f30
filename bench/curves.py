"""Cost curves: one benchmark at several sizes, each size beside its reference.

A curve benchmark runs each size in a child process of its own (a fresh database, the
same code as the single-size benchmark) that writes one point, ``--point OUT``: the
project's seconds, the reference's, and the units of work (payout weeks, carts, claims).
Then it reports, per size, the ratio to the reference and the time per unit, and whether
the time per unit stayed flat from the smallest size to the largest; and it draws the
curve (time against size, log axes, project and reference) into docs/bench/<name>.png.

The plot's scaffolding (log axes, grid, legend, the file) is ``bench.plotting``'s, shared
with the lateness plot (bench/lateness.py).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import PYTHON, RESULTS, ROOT, Report, Row, child_env, fmt
from bench.plotting import log_log_plot
from support.processes import guarded_run

PLOTS = ROOT / "docs" / "bench"
RATIO_GOAL = 1.2
FLAT_GOAL = 1.5


@dataclass
class Point:
    size: int
    units: int
    project: float
    reference: float
    extra: dict[str, Any]

    @property
    def ratio(self) -> float:
        return self.project / self.reference if self.reference else math.nan

    @property
    def per_unit(self) -> float:
        return self.project / self.units if self.units else math.nan


def point_write(out: Path, point: Point) -> None:
    out.write_text(json.dumps(asdict(point), default=str))


def points_measure(module: str, sizes: Sequence[int], args: Sequence[str], url: str = "") -> list[Point]:
    """Run ``python -m bench.<module> --size N --point OUT <args>`` for each size, in order."""
    points = []
    workdir = Path(tempfile.mkdtemp(prefix=f"tiffin-bench-{module}-"))
    for size in sizes:
        out = workdir / f"{size}.json"
        command = [PYTHON, "-m", f"bench.{module}", "--size", str(size), "--point", str(out), *args]
        print(f"--- {' '.join(command[1:])}", flush=True)
        code = guarded_run(command, cwd=ROOT, env=child_env(url) if url else None)
        if code != 0 or not out.exists():
            raise SystemExit(f"bench.{module} at size {size} failed (exit code {code})")
        points.append(Point(**json.loads(out.read_text())))
    return points


def curve_rows(what: str, unit: str, points: Sequence[Point]) -> list[Row]:
    """Per size: the time beside the reference (goal: at most RATIO_GOAL x); then the
    flatness of the time per unit, largest size over smallest (goal: at most FLAT_GOAL)."""
    rows = [
        Row(f"{what}, {p.size:,} {unit}", "s", p.project, p.reference, goal=f"<= {RATIO_GOAL:g} x reference",
            passed=p.ratio <= RATIO_GOAL)
        for p in points
    ]  # fmt: skip
    if len(points) > 1:
        first, last = points[0], points[-1]
        flat = last.per_unit / first.per_unit
        rows.append(
            Row(f"time per unit, {last.size:,} vs {first.size:,} {unit}", "x", flat, None, None,
                f"<= {FLAT_GOAL:g}", flat <= FLAT_GOAL)
        )  # fmt: skip
    return rows


def curve_table(unit: str, points: Sequence[Point]) -> str:
    """The per-size detail: units of work, both times, the ratio, time per unit for both."""
    header = [unit, "units", "project s", "reference s", "ratio", "project us/unit", "reference us/unit"]
    body = [
        [f"{p.size:,}", f"{p.units:,}", fmt(p.project), fmt(p.reference), fmt(p.ratio),
         fmt(p.per_unit * 1e6), fmt(p.reference / p.units * 1e6 if p.units else math.nan)]
        for p in points
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in [header, *body])


def curve_plot(
    name: str, title: str, xlabel: str, points: Sequence[Point], labels: tuple[str, str], *, partial: bool
) -> Path:
    """Time against size on log axes, project and reference; written to docs/bench/<name>.png
    (a partial run's to bench/results/partial/)."""
    path = (RESULTS / "partial" if partial else PLOTS) / f"{name}.png"
    sizes = [p.size for p in points]
    with log_log_plot(path, size=(6.4, 4.2), title=title, xlabel=xlabel, ylabel="seconds") as axes:
        axes.plot(sizes, [p.project for p in points], marker="o", label=labels[0])
        axes.plot(sizes, [p.reference for p in points], marker="s", linestyle="--", label=labels[1])
    return path


def curve_report(
    rep: Report,
    points: Sequence[Point],
    *,
    unit: str,
    title: str,
    labels: tuple[str, str],
    xlabel: str = "",
    heading: str = "per size",
) -> None:
    """Add the curve's per-size table (``curve_table``, under ``heading``) to ``rep`` and its
    plot (``curve_plot``, named as the report, ``xlabel`` by default the ``unit``), with a
    note of where the plot went."""
    rep.tables.append(f"{heading}:\n" + curve_table(unit, points))
    plot = curve_plot(rep.name, title, xlabel or unit, points, labels, partial=rep.partial)
    rep.note(f"plot: {plot.relative_to(ROOT)}")


def sizes_parse(text: str) -> list[int]:
    """``1000,10000`` -> [1000, 10000]; raises ValueError with a message on anything else."""
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{text!r} is not a comma-separated list of sizes") from None
    if not sizes or any(size < 1 for size in sizes) or sizes != sorted(set(sizes)):
        raise ValueError(f"{text!r}: sizes must be positive, distinct and ascending")
    return sizes
