"""The report's plots: PNG files drawn with matplotlib's object API on the Agg canvas.

Each figure has its own canvas (``tuner._canvas``: no pyplot, no display, no
figure registry shared between threads). Every function writes exactly one
PNG, and draws a message instead of empty axes when there is nothing to plot,
so a report always has the same files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from hoptune.tuner._canvas import (
    GRID,
    finite,
    message_png,
    metric_label,
    new_figure,
    save_png,
    trial_colour,
)

__all__ = [
    "Bar",
    "Card",
    "Dim",
    "TrialResult",
    "WorkerLoad",
    "draw_champions",
    "plot_champions",
    "plot_gantt",
    "plot_history",
    "plot_learning_curves",
    "plot_params",
]

# How a trial's state draws in the learning curves: line style and end marker.
_STYLE = {
    "done": ("-", "o"),
    "pruned": ("--", "x"),
    "running": ("-.", ">"),
    "failed": (":", "s"),
}


@dataclass(frozen=True)
class TrialResult:
    """One trial as the plots see it: ``metric`` is its selected epoch's metric or None."""

    number: int
    state: str
    params: dict[str, Any]
    metric: float | None
    curve: tuple[tuple[int, float], ...] = ()  # (epoch number from 1, finite metric)
    selected: int | None = None  # the selected epoch, numbered from 1


@dataclass(frozen=True)
class Dim:
    """A hyperparameter axis: numeric (linear or log) or categorical (its choices in order)."""

    name: str
    log: bool = False
    choices: tuple[Any, ...] | None = None
    bounds: tuple[float, float] | None = None  # a numeric dimension's range in the space


@dataclass(frozen=True)
class Bar:
    """One hop on the Gantt chart, in seconds since the study's first hop started."""

    worker: str
    start: float
    end: float
    trial: int
    shard: int
    open: bool = False  # still running: drawn up to the report's time, hatched


@dataclass(frozen=True)
class WorkerLoad:
    """A worker's hops and its busy share of the study's hop span, and its share on the hops
    of other studies (other regions') within that span."""

    worker: str
    hops: int
    busy_seconds: float
    share: float
    other_share: float = 0.0


@dataclass(frozen=True)
class Card:
    """One promoted model version of the region's registry."""

    version: str
    created_at: datetime | None
    metric: float | None
    previous: str | None = None
    previous_metric: float | None = None
    study_id: Any = None
    trial_number: Any = None


def plot_history(path: Path, trials: Sequence[TrialResult], *, metric_name: str,
                 minimize: bool, best_number: int | None) -> Path:
    """Each finished or pruned trial's metric by trial number, and the best so far."""
    title = "Optimization history"
    scored = sorted((t for t in trials if t.state in ("done", "pruned") and finite(t.metric)),
                    key=lambda t: t.number)
    if not scored:
        return message_png(path, title, "no finished or pruned trial with a metric yet")
    fig = new_figure(4.2)
    ax = fig.add_subplot()
    done = [t for t in scored if t.state == "done"]
    pruned = [t for t in scored if t.state == "pruned"]
    ax.scatter([t.number for t in done], [t.metric for t in done], s=46, zorder=3,
               color="#1f77b4", label="done")
    ax.scatter([t.number for t in pruned], [t.metric for t in pruned], s=52, zorder=3,
               marker="x", color="#d62728", label="pruned")
    best: list[float] = []
    for t in scored:
        value = float(t.metric)  # type: ignore[arg-type]
        best.append(value if not best else (min if minimize else max)(best[-1], value))
    ax.step([t.number for t in scored], best, where="post", color="#2ca02c", linewidth=1.8,
            label="best so far", zorder=2)
    star = [t for t in scored if t.number == best_number]
    if star:
        ax.scatter([star[0].number], [star[0].metric], s=220, marker="*", color="#ffbf00",
                   edgecolor="black", linewidth=0.6, zorder=4,
                   label=f"best trial ({star[0].number})")
    ax.set_xlabel("trial number")
    ax.set_ylabel(metric_label(metric_name, minimize))
    ax.set_title(title, loc="left", fontsize=12)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, **GRID)
    ax.legend(loc="best", fontsize=9, framealpha=0.9)
    return save_png(fig, path)


def plot_params(path: Path, trials: Sequence[TrialResult], dims: Sequence[Dim], *,
                metric_name: str, minimize: bool) -> Path:
    """Each hyperparameter against the metric: one panel per dimension."""
    title = "Hyperparameters against the metric"
    scored = [t for t in trials if t.state in ("done", "pruned") and finite(t.metric)]
    if not dims:
        return message_png(path, title, "no hyperparameter varies across the trials")
    if not scored:
        return message_png(path, title, "no finished or pruned trial with a metric yet")
    columns = 2 if len(dims) == 4 else min(3, len(dims))
    rows = math.ceil(len(dims) / columns)
    fig = new_figure(1.0 + 3.0 * rows)
    fig.suptitle(title, x=0.01, ha="left", fontsize=12)
    axes = fig.subplots(rows, columns, squeeze=False, sharey=True)
    numbers = sorted(t.number for t in scored)
    # Up to 20 trials keep their colour from the other plots; more read better as a gradient.
    if len(numbers) <= 20:
        colour = {n: trial_colour(n) for n in numbers}
    else:
        gradient = colormaps["viridis"]
        colour = {n: gradient(n / max(numbers[-1], 1)) for n in numbers}
    for index, dim in enumerate(dims):
        ax = axes[index // columns][index % columns]
        _param_panel(ax, dim, scored, colour)
        if index % columns == 0:
            ax.set_ylabel(metric_label(metric_name, minimize))
    for index in range(len(dims), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    handles = [Line2D([], [], linestyle="", marker=marker, color="#555555", label=state)
               for state, marker in (("done", "o"), ("pruned", "x"))
               if any(t.state == state for t in scored)]
    if len(numbers) <= 20:
        handles += [Line2D([], [], linestyle="", marker="o", color=colour[n],
                           label=f"trial {n}") for n in numbers]
    else:
        scale = ScalarMappable(Normalize(0, max(numbers[-1], 1)), colormaps["viridis"])
        fig.colorbar(scale, ax=axes, label="trial number", shrink=0.6, aspect=30)
    fig.legend(handles=handles, loc="outside right upper", fontsize=8,
               ncols=1 if len(handles) <= 12 else 2)
    return save_png(fig, path)


def _param_panel(ax: Axes, dim: Dim, trials: Sequence[TrialResult],
                 colour: dict[int, Any]) -> None:
    present = [t for t in trials if dim.name in t.params]
    if dim.choices is not None:
        index = {_key(c): i for i, c in enumerate(dim.choices)}
        xs = [index.get(_key(t.params[dim.name]), -1) for t in present]
        many = len(dim.choices) > 4
        ax.set_xticks(range(len(dim.choices)), [_short(c) for c in dim.choices],
                      rotation=30 if many else 0, ha="right" if many else "center")
        ax.set_xlim(-0.6, len(dim.choices) - 0.4)
    else:
        xs = [float(t.params[dim.name]) for t in present]
        if dim.log:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        low, high = dim.bounds or (min(xs, default=1.0), max(xs, default=1.0))
        if dim.log and 0 < low < high:
            pad = (high / low) ** 0.04
            ax.set_xlim(low / pad, high * pad)
            if high / low < 100:  # under two decades: label 20, 50, 100 rather than 10^2
                ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        elif not dim.log and low < high and dim.bounds is not None:
            pad = (high - low) * 0.04
            ax.set_xlim(low - pad, high + pad)
    for x, t in zip(xs, present, strict=True):
        marker = "o" if t.state == "done" else "x"
        ax.scatter([x], [t.metric], s=40, marker=marker, color=colour[t.number], zorder=3)
    ax.set_xlabel(dim.name + (" (log)" if dim.log else ""))
    ax.grid(True, **GRID)


def plot_learning_curves(path: Path, trials: Sequence[TrialResult], *, metric_name: str,
                         minimize: bool, epochs: int) -> Path:
    """Validation metric by epoch for each trial; pruned trials dashed with an x at their end."""
    title = "Learning curves"
    drawn = [t for t in trials if t.curve]
    if not drawn:
        return message_png(path, title, "no epoch has a validation metric yet")
    fig = new_figure(4.6)
    ax = fig.add_subplot()
    for t in drawn:
        style, marker = _STYLE.get(t.state, ("-", "o"))
        xs = [e for e, _ in t.curve]
        ys = [m for _, m in t.curve]
        colour = trial_colour(t.number)
        ax.plot(xs, ys, linestyle=style, color=colour, linewidth=1.6, marker=".",
                markersize=5, label=f"trial {t.number}")
        ax.plot(xs[-1:], ys[-1:], linestyle="", marker=marker, color=colour, markersize=9,
                markeredgewidth=2, markerfacecolor="none" if marker != "x" else colour)
        if t.selected is not None and t.metric is not None:  # the epoch whose metric counts
            ax.plot([t.selected], [t.metric], linestyle="", marker="o", markersize=14,
                    markerfacecolor="none", markeredgecolor=colour, markeredgewidth=1.2)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric_label(metric_name, minimize))
    ax.set_title(title, loc="left", fontsize=12)
    ax.set_xlim(0.8, max(epochs, max(e for t in drawn for e, _ in t.curve)) + 0.2)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, **GRID)
    states = sorted({t.state for t in drawn}, key=list(_STYLE).index)
    style_handles = [Line2D([], [], color="#444444", linestyle=_STYLE[s][0],
                            marker=_STYLE[s][1], markerfacecolor="none", label=s)
                     for s in states if s in _STYLE]
    if any(t.selected is not None for t in drawn):
        style_handles.append(Line2D([], [], linestyle="", marker="o", markersize=10,
                                    markerfacecolor="none", color="#444444",
                                    label="selected epoch"))
    styles = ax.legend(handles=style_handles, loc="upper right", fontsize=8, title="state",
                       title_fontsize=8, framealpha=0.9)
    if len(drawn) <= 20:
        ax.add_artist(styles)
        fig.legend(handles=[Line2D([], [], color=trial_colour(t.number), linewidth=2,
                                   label=f"trial {t.number}") for t in drawn],
                   loc="outside right upper", fontsize=8, ncols=1 if len(drawn) <= 10 else 2)
    return save_png(fig, path)


def plot_gantt(path: Path, bars: Sequence[Bar], loads: Sequence[WorkerLoad]) -> Path:
    """Hops per worker over time: one row per worker, one bar per hop, coloured by trial."""
    title = "Hops per worker"
    if not bars:
        return message_png(path, title, "no hop has finished yet")
    span = max(b.end for b in bars)
    scale, unit = _time_unit(span)
    workers = [load.worker for load in loads]
    row = {w: i for i, w in enumerate(workers)}
    fig = new_figure(min(max(2.8, 1.4 + 0.55 * len(workers)), 16.0))
    ax = fig.add_subplot()
    patches = [ax.barh(row[b.worker], (b.end - b.start) / scale, left=b.start / scale,
                       height=0.7, color=trial_colour(b.trial), linewidth=0,
                       hatch="//" if b.open else None)[0] for b in bars]
    ax.set_xlim(0, span / scale * 1.01 if span > 0 else 1)
    ax.set_ylim(len(workers) - 0.5, -0.5)
    ax.set_yticks(range(len(workers)),
                  [f"{name}  {load.share:.0%}"
                   + (f" (+{load.other_share:.0%} other)" if load.other_share >= 0.005 else "")
                   for name, load in zip(_worker_labels(workers), loads, strict=True)],
                  fontsize=9 if len(workers) <= 30 else 6)
    ax.set_xlabel(f"{unit} since the first hop started; +N% other: share on other studies' hops")
    ax.set_title(title + " (label: shard; row: worker and busy share)", loc="left", fontsize=12)
    ax.grid(True, axis="x", **GRID)
    ax.set_axisbelow(True)
    fig.canvas.draw()  # the axes' size in pixels decides which bars get an edge and a label
    pixels_per_unit = ax.get_window_extent().width / (ax.get_xlim()[1] - ax.get_xlim()[0])
    for b, patch in zip(bars, patches, strict=True):
        pixels = (b.end - b.start) / scale * pixels_per_unit
        if pixels > 6:  # thinner bars would vanish under a white edge
            patch.set_edgecolor("white")
            patch.set_linewidth(0.8)
        label = f"s{b.shard}"
        if pixels > 7 * len(label) + 4:
            ax.text((b.start + b.end) / 2 / scale, row[b.worker], label, ha="center",
                    va="center", fontsize=8, color="black")
    trials = sorted({b.trial for b in bars})
    if len(trials) <= 20:
        fig.legend(handles=[Line2D([], [], color=trial_colour(n), linewidth=6,
                                   label=f"trial {n}") for n in trials],
                   loc="outside right upper", fontsize=8, ncols=1 if len(trials) <= 10 else 2)
    return save_png(fig, path)


#: Up to this many promotions, the champion history shows points, each labelled with its
#: date: a step line through two or three points, stretched to today, reads as a trend.
FEW_PROMOTIONS = 4


def plot_champions(path: Path, cards: Sequence[Card], *, region: str, metric_name: str,
                   minimize: bool, now: datetime) -> Path:
    """The region's champion metric over the promotion dates: points for a few promotions,
    a step plot for more."""
    title = f"Champion history of region {region}"
    dated = sorted((c for c in cards if c.created_at is not None and finite(c.metric)),
                   key=lambda c: c.created_at)  # type: ignore[arg-type, return-value]
    if not dated:
        return message_png(path, title, "no champion yet" if not cards
                           else "no promotion has both a date and a metric")
    fig = new_figure(4.0)
    draw_champions(fig.add_subplot(), dated, metric_name=metric_name, minimize=minimize,
                   now=now)
    fig.axes[0].set_title(title, loc="left", fontsize=12)
    return save_png(fig, path)


def draw_champions(ax: Axes, dated: Sequence[Card], *, metric_name: str, minimize: bool,
                   now: datetime) -> None:
    """Draw promotions (dated, with a metric, oldest first) on ``ax``: dates on the x axis.

    A few promotions are points, each tick its date and time; more are a step
    line held to ``now``, with dates from matplotlib's date locator.
    """
    dates = [c.created_at for c in dated]
    values = [float(c.metric) for c in dated]  # type: ignore[arg-type]
    few = len(dated) <= FEW_PROMOTIONS
    if not few:
        end = max(now, dates[-1])  # type: ignore[type-var]
        ax.step([*dates, end], [*values, values[-1]], where="post", color="#1f77b4",
                linewidth=1.8, label="champion")
    ax.scatter(dates, values, s=40 if not few else 60, color="#1f77b4", zorder=3,
               label="champion" if few else None)
    before = [(c.created_at, c.previous_metric) for c in dated if finite(c.previous_metric)]
    if before:
        ax.scatter([d for d, _ in before], [m for _, m in before], s=40, zorder=3,
                   facecolor="none", edgecolor="#7f7f7f", linewidth=1.2,
                   label="previous champion, same validation data")
    shown = dated if len(dated) <= 12 else dated[-1:]
    for c in shown:
        ax.annotate(c.version, (c.created_at, c.metric), textcoords="offset points",
                    xytext=(4, 6), fontsize=8)
    if few:
        labels = [d.strftime("%Y-%m-%d\n%H:%M:%S") for d in dates]  # type: ignore[union-attr]
        ax.set_xticks(dates, labels, fontsize=8)
        first, last = dates[0], dates[-1]
        pad = max((last - first) * 0.15, timedelta(minutes=5))  # type: ignore[operator]
        ax.set_xlim(first - pad, last + pad)  # type: ignore[operator]
    else:
        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.margins(x=0.06)
    ax.set_xlabel("promotion date (UTC)")
    ax.set_ylabel(metric_label(metric_name, minimize))
    ax.grid(True, **GRID)
    ax.margins(y=0.2)
    ax.legend(loc="best", fontsize=8, framealpha=0.9)


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds < 180:
        return 1.0, "seconds"
    if seconds < 3 * 3600:
        return 60.0, "minutes"
    return 3600.0, "hours"


def _worker_labels(workers: Sequence[str], width: int = 28) -> list[str]:
    """Short worker names for row labels: the host without its domain, cut in the middle.

    Where shortening would make two rows look alike, the full names stay.
    """
    labels = []
    for name in workers:
        node, at, host = name.partition("@")
        text = f"{node}@{host.split('.')[0]}" if at else name
        if len(text) > width:
            head = (width - 1) // 2
            text = text[:head] + "…" + text[len(text) - (width - 1 - head):]
        labels.append(text)
    return labels if len(set(labels)) == len(labels) else list(workers)


def _key(value: Any) -> tuple[str, str]:
    """A categorical value's identity: its type and text (True is not 1)."""
    return type(value).__name__, repr(value)


def _short(value: Any, width: int = 14) -> str:
    text = value if isinstance(value, str) else f"{value:.4g}" if isinstance(value, float) \
        else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"
