"""The run report's compute chart: a run with no valid task yet says so instead of drawing an empty, unlabeled
frame (and matplotlib's "no artists with labels" warning)."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

from coordinator import report  # noqa: E402

ROWS = [{"step": s, "compute_cumulative": {"generated_tokens": 500 * s, "trained_tokens": 0},
         "task_types": {"code_o": {"valid_rate": 0.0, "solve_rate": None}}} for s in (1, 2, 3)]


def test_no_valid_task_is_said_and_warns_nothing(tmp_path, monkeypatch):
    texts = []
    real = matplotlib.axes.Axes.text
    monkeypatch.setattr(matplotlib.axes.Axes, "text", lambda ax, *a, **k: texts.append(a[2]) or real(ax, *a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.plot_compute(ROWS, tmp_path / "compute.png")
    assert (tmp_path / "compute.png").stat().st_size > 0
    assert texts == ["no valid task yet"]  # the solve-rate panel; the valid rate has its points


def test_solve_rates_get_a_legend_and_no_note(tmp_path, monkeypatch):
    rows = [{**r, "task_types": {"code_o": {"valid_rate": 0.5, "solve_rate": 0.25}}} for r in ROWS]
    texts = []
    real = matplotlib.axes.Axes.text
    monkeypatch.setattr(matplotlib.axes.Axes, "text", lambda ax, *a, **k: texts.append(a[2]) or real(ax, *a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.plot_compute(rows, tmp_path / "compute.png")
    assert texts == []
