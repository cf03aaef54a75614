"""Matplotlib for the coordinator's reports (`populora report`, the experiment's comparison): the non-interactive
backend, chosen before pyplot loads so a report can be drawn without a display, and one way to write a figure."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

__all__ = ["plt", "save_figure"]


def save_figure(fig, path: Path, dpi: int) -> None:
    """Lay the figure out, write it as a PNG at `dpi` and release it (a report draws many). An axis of steps gets
    whole-number ticks only: a run of three steps has no step 1.25."""
    for ax in fig.get_axes():
        if ax.get_xlabel() == "step":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
