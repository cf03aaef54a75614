"""The run report's compute chart: a run with no valid task yet says so instead of drawing an empty, unlabeled
frame (and matplotlib's "no artists with labels" warning)."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

from coordinator.record import report  # noqa: E402

ROWS = [{"step": s, "compute_cumulative": {"generated_tokens": 500 * s, "trained_tokens": 0},
         "task_types": {"code_o": {"valid_rate": 0.0, "solve_rate": None}}} for s in (1, 2, 3)]


def _notes_drawn(rows, path, monkeypatch) -> list[str]:
    """The texts the chart writes on its axes, with every warning made an error."""
    texts = []
    real = matplotlib.axes.Axes.text
    monkeypatch.setattr(matplotlib.axes.Axes, "text", lambda ax, *a, **k: texts.append(a[2]) or real(ax, *a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.plot_compute(rows, path)
    assert path.stat().st_size > 0
    return texts


def test_no_valid_task_is_said_and_warns_nothing(tmp_path, monkeypatch):
    # the solve-rate panel says it; the valid rate has its points
    assert _notes_drawn(ROWS, tmp_path / "compute.png", monkeypatch) == ["no valid task yet"]


def test_solve_rates_get_a_legend_and_no_note(tmp_path, monkeypatch):
    rows = [{**r, "task_types": {"code_o": {"valid_rate": 0.5, "solve_rate": 0.25}}} for r in ROWS]
    assert _notes_drawn(rows, tmp_path / "compute.png", monkeypatch) == []


def test_an_axis_of_steps_has_whole_number_ticks(tmp_path):
    """A three-step run's plots tick at steps 1, 2, 3 only (matplotlib's default locator puts ticks at 1.25, 1.5)."""
    from coordinator.record.figures import plt, save_figure

    fig, (steps, other) = plt.subplots(1, 2)
    steps.plot([1, 2, 3], [0.1, 0.5, 0.2])
    steps.set_xlabel("step")
    other.plot([1, 2, 3], [0.1, 0.5, 0.2])
    other.set_xlabel("thousand tokens")
    save_figure(fig, tmp_path / "f.png", dpi=50)
    assert all(float(t).is_integer() for t in steps.get_xticks())
    assert not all(float(t).is_integer() for t in other.get_xticks())
    assert (tmp_path / "f.png").stat().st_size > 0
