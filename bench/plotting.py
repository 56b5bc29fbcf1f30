"""What every benchmark plot shares: one axes, both scales logarithmic, a title, labels,
a grid and a legend, saved as a PNG without matplotlib's version in it (so the file
changes only when the picture does). A plot draws its own lines inside ``log_log_plot``.

matplotlib draws them (pinned in requirements-dev.txt); it is imported only here, when a
plot is drawn, with the Agg backend, so nothing needs a display. ``ticks_at`` labels an
axis at the values measured (the rates of a benchmark's steps).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis


@contextmanager
def log_log_plot(
    path: Path, *, size: tuple[float, float], title: str, xlabel: str, ylabel: str, legend_size: float | None = None
) -> Iterator[Axes]:
    """The axes to draw on; on leaving, the legend (``legend_size``: its font size, default
    matplotlib's) and the figure written to ``path``, its directory made if need be.
    Formatters set inside stay: the scales are set before."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=size, dpi=100)
    try:
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.set_title(title, fontsize=10)
        axes.grid(True, which="both", alpha=0.3)
        yield axes
        axes.legend(fontsize=legend_size)
        figure.tight_layout()
        figure.savefig(path, metadata={"Software": None})
    finally:
        plt.close(figure)


def ticks_at(axis: Axis, values: Iterable[float], *, rotation: float = 0) -> None:
    """Label ``axis`` at exactly ``values``, as plain numbers (25, 400, 1000), and nowhere
    else. A log axis labels its powers of ten and some minor ticks only, so a value
    between them (25, 400) would have no label; the minor ticks stay, unlabelled, for the
    grid. ``rotation`` (degrees) slants the labels, each ending at its tick, so that close
    values (1200, 1400 on a log axis) do not overlap."""
    from matplotlib.ticker import NullFormatter

    ticks = sorted(set(values))
    labels = [f"{value:g}" for value in ticks]
    if rotation:
        axis.set_ticks(ticks, labels=labels, rotation=rotation, ha="right", rotation_mode="anchor")
    else:
        axis.set_ticks(ticks, labels=labels)
    axis.set_minor_formatter(NullFormatter())
