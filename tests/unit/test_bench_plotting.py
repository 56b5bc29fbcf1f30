"""bench.plotting: the scaffolding the benchmark plots share (bench/curves.py,
bench/lateness.py), drawn with matplotlib's Agg backend into a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.plotting import log_log_plot, ticks_at


def test_a_plot_is_written_on_log_axes_with_its_title_labels_and_legend(tmp_path: Path) -> None:
    path = tmp_path / "made" / "here.png"
    with log_log_plot(path, size=(6.4, 4.2), title="t", xlabel="carts", ylabel="seconds", legend_size=8) as axes:
        axes.plot([10, 100], [1.0, 9.0], label="project")
    assert path.read_bytes().startswith(b"\x89PNG")
    assert (axes.get_xscale(), axes.get_yscale()) == ("log", "log")
    assert (axes.get_title(), axes.get_xlabel(), axes.get_ylabel()) == ("t", "carts", "seconds")
    legend = axes.get_legend()
    assert legend is not None
    assert [text.get_text() for text in legend.get_texts()] == ["project"]
    assert legend.get_texts()[0].get_fontsize() == 8


def test_a_formatter_set_while_drawing_is_kept(tmp_path: Path) -> None:
    from matplotlib.ticker import FuncFormatter

    formatter = FuncFormatter(lambda value, _: f"{value:g}")
    with log_log_plot(tmp_path / "p.png", size=(4, 3), title="t", xlabel="x", ylabel="y") as axes:
        axes.plot([1, 10], [1, 10], label="a")
        axes.xaxis.set_major_formatter(formatter)
    assert axes.xaxis.get_major_formatter() is formatter


def test_every_value_given_is_a_labelled_tick_and_nothing_else_is_labelled(tmp_path: Path) -> None:
    # A log axis left to itself labels 10, 100, 1000 and some 2s and 5s: not 25, 400 or 1200.
    rates = [25, 50, 100, 200, 400, 1200, 1400]
    with log_log_plot(tmp_path / "p.png", size=(7.4, 4.8), title="t", xlabel="x", ylabel="y") as axes:
        axes.plot(rates, [1.0] * len(rates), label="a")
        ticks_at(axes.xaxis, [400.0, *rates, 25.0], rotation=45)
    assert list(axes.xaxis.get_ticklocs()) == rates
    labels = axes.xaxis.get_ticklabels()
    assert [label.get_text() for label in labels] == ["25", "50", "100", "200", "400", "1200", "1400"]
    assert {(label.get_rotation(), label.get_horizontalalignment()) for label in labels} == {(45.0, "right")}
    assert {label.get_text() for label in axes.xaxis.get_ticklabels(minor=True)} <= {""}


def test_a_plot_that_fails_while_drawing_writes_nothing_and_leaves_no_figure_open(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    with (
        pytest.raises(ValueError, match="bad data"),
        log_log_plot(tmp_path / "p.png", size=(4, 3), title="t", xlabel="x", ylabel="y"),
    ):
        raise ValueError("bad data")
    assert not (tmp_path / "p.png").exists()
    assert plt.get_fignums() == []
