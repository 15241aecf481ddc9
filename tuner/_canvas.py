"""The report's canvas: PNG figures drawn with matplotlib's object API on the Agg canvas.

Each figure is a ``matplotlib.figure.Figure`` with its own ``FigureCanvasAgg``:
no pyplot, so no global backend switch, no display, and no figure registry
shared between threads. A plot with nothing to draw saves a message instead of
empty axes (``message_png``), so a report always has the same files. The
colours, grid and axis labels every plot shares are here too.
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["DPI", "GRID", "WIDTH", "finite", "message_png", "metric_label", "new_figure",
           "save_png", "trial_colour"]

DPI = 100
WIDTH = 9.0  # inches: 900 pixels at DPI
GRID = {"color": "#dddddd", "linewidth": 0.6}


def trial_colour(number: int) -> tuple[float, float, float, float]:
    """The colour of trial ``number`` in every plot: tab10's colours, then their light twins."""
    return colormaps["tab20"]((number % 10) * 2 + (number // 10) % 2)


def new_figure(height: float, width: float = WIDTH) -> Figure:
    """A figure ``width`` by ``height`` inches on its own Agg canvas."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: Path) -> Path:
    """Write ``fig`` to ``path`` as a PNG on white."""
    fig.savefig(path, format="png", dpi=DPI, facecolor="white")
    return path


def message_png(path: Path, title: str, text: str, height: float = 3.0) -> Path:
    """A PNG that says why there is no plot: a titled, framed note, never a blank image."""
    fig = new_figure(height)
    ax = fig.add_subplot()
    ax.set_title(title, loc="left", fontsize=12)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_facecolor("#f4f4f4")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=14, color="#444444",
            transform=ax.transAxes, wrap=True)
    return save_png(fig, path)


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def metric_label(metric_name: str, minimize: bool) -> str:
    return f"validation {metric_name} ({'lower' if minimize else 'higher'} is better)"
