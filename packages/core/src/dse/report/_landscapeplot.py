"""The figures of ``dse report --html`` that say which params matter and how, drawn from the
data :mod:`dse.report._landscape` reads (the same numbers a live page can read):

* **importance**: each param's share of the importance by PED-ANOVA
  (:mod:`dse.report._importance`), a bar each, the largest on top;
* **slices**: the objective against each param, a small panel per param (the most important
  first, :data:`SLICES_DRAWN` at most), every trial a point, the best in vermillion;
* **contour**: the mean objective over a grid of the two most important params (the first
  two with no importance yet), a cell each, empty cells left white, the trials on top.

Each param keeps its own values: numbers in their range (log where the param is), categories
named in declared order. Scores run through cividis, dark at the best end, without its
palest quarter (no yellow on white); the drawers import matplotlib when called.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from dse.report._landscape import contour, slices, top_pair
from dse.report._palette import BLACK, SCORE_MAP, SKY_BLUE, VERMILLION, better_label, nothing
from dse.report._parallel import CATEGORIES_NAMED, NAME_CHARS
from dse.report._plots import log_ticks, wide_spread

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dse.report._landscape import GridAxis, Landscape, Slice
    from dse.report._plots import RunData

__all__ = ["CONTOUR", "IMPORTANCE", "LANDSCAPE_PLOTS", "POINTS_DRAWN", "SLICES",
           "SLICES_DRAWN", "draw_contour", "draw_importance", "draw_slices"]

IMPORTANCE = "importance"
"""The id of the importance figure (``<img id="plot-importance">``)."""
SLICES = "slices"
"""The id of the slices figure (``<img id="plot-slices">``)."""
CONTOUR = "contour"
"""The id of the contour figure (``<img id="plot-contour">``)."""
LANDSCAPE_PLOTS = (IMPORTANCE, SLICES, CONTOUR)
"""The three, in page order."""
SLICES_DRAWN = 8
"""Params with a slice at most: the most important first."""
POINTS_DRAWN = 3000
"""Trials drawn as points in a panel at most (the best 100 always among them)."""
_COLUMNS = 4  # slice panels side by side
_PANEL_PX = 210.0  # pixels of a slice panel's x axis, about
_CHAR_PX = 6.2  # pixels a character of a small tick label takes, about
_JITTER = 0.15  # of a level's width: points of one level spread, not piled up


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 1)] + "\N{HORIZONTAL ELLIPSIS}"


def _why(view: Landscape) -> str | None:
    """Why *view* has nothing to draw (``None`` when it has)."""
    if view.space is None:
        return "the run's space does not read back"
    if not view.observed:
        return "no completed, valid trial yet"
    return None


def _picked(objectives: Sequence[float], maximize: bool) -> tuple[list[int], int]:
    """The trials drawn (every one, or the best 100 and a sample of the rest:
    :data:`POINTS_DRAWN` in all) and the best one."""
    order = sorted(range(len(objectives)), key=lambda i: objectives[i], reverse=maximize)
    if len(order) <= POINTS_DRAWN:
        return order, order[0]
    rest = random.Random(0).sample(order[100:], POINTS_DRAWN - 100)
    return sorted([*order[:100], *rest]), order[0]


def _positions(values: Sequence[Any], levels: Sequence[Any], seed: int = 0) -> list[float]:
    """Where each of *values* sits on a categorical axis: its level's position, spread a
    little (the same spread every time: *seed*) so that points of one level do not hide
    each other."""
    index = {(type(c), c): i for i, c in enumerate(levels)}
    rng = random.Random(seed)
    return [index[(type(v), v)] + rng.uniform(-_JITTER, _JITTER) for v in values]


def _levels_axis(axis: Any, levels: Sequence[Any], room: float, across: bool) -> None:
    """Name *levels* at their positions on *axis* (*room*: its pixels), every k-th when not
    all fit (a tick at each); names side by side (*across*: an x axis) are cut to fit."""
    from matplotlib.ticker import FixedLocator

    count = len(levels)
    fit = max(2, min(CATEGORIES_NAMED, int(room // 60)))
    step = math.ceil(count / fit)
    named = list(range(0, count, step))
    chars = max(3, int(room / len(named) / _CHAR_PX) - 1) if across else NAME_CHARS
    axis.set_ticks([float(i) for i in named], [_cut(str(levels[i]), chars) for i in named])
    if step > 1:
        axis.set_minor_locator(FixedLocator([float(i) for i in range(count)]))


def _number_axis(axis: Any, log: bool, integer: bool, ticks: int) -> None:
    """Ticks of a number param's *axis*: at decades where *log*, else at round values (whole
    ones for an integer), about *ticks* of them, in plain numbers (no offset, no TeX)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    if log:
        log_ticks(axis)
        axis.set_major_locator(LogLocator(numticks=ticks + 1))
        return
    axis.set_major_locator(MaxNLocator(nbins=ticks, integer=integer))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.4g}"))


def _score_map(maximize: bool) -> Any:
    """Cividis without its palest quarter, dark at the best end."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap

    stops = np.linspace(0.0, 0.8, 256)
    return ListedColormap(colormaps[SCORE_MAP](stops[::-1] if maximize else stops),
                          name=f"{SCORE_MAP}-dark")


def draw_importance(fig: Any, run: RunData, view: Landscape) -> str:
    """Each param's share of the importance, a bar each, the largest on top."""
    from matplotlib.ticker import PercentFormatter

    result = view.importances
    why = _why(view) or (result.reason if result is not None else None)
    if result is None or why:
        nothing(fig, why or "no importance")
        return f"No parameter importance: {why}."
    names, shares = list(result.importance), list(result.importance.values())
    fig.set_size_inches(10, 1.3 + 0.38 * max(len(names), 2))
    ax = fig.subplots()
    ax.barh(range(len(names)), shares, color=SKY_BLUE, edgecolor="none")
    for i, share in enumerate(shares):
        ax.text(share, i, f" {share:.1%}", va="center", fontsize="small")
    ax.set_yticks(range(len(names)), [_cut(n, 24) for n in names])
    ax.invert_yaxis()
    ax.set_xlim(0, 1.18 * max(max(shares), 0.01))
    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_xlabel("share of the importance (PED-ANOVA; the shares add up to 100%)")
    constant = (f" {', '.join(result.constant)} take{'s' if len(result.constant) == 1 else ''}"
                " a single value: 0." if result.constant else "")
    excluded = (f" {result.excluded} trials with a non-finite {run.metric} or params outside"
                " the space are left out." if result.excluded else "")
    flat = (" No param sets the best trials apart: every share is 0."
            if not any(shares) else "")
    return (f"How much each param sets the best {result.target_quantile:.0%} of the trials"
            f" ({result.top} of the {result.trials} completed, valid trials, by {run.metric})"
            " apart from all of them, by PED-ANOVA (Watanabe et al., IJCAI 2023): the Pearson"
            " divergence between the density of the param's values among the best trials and"
            " among all, as each param's share of their sum. A param the best trials took"
            " anywhere scores near 0; one ranked low may still matter together with another,"
            f" and on a few dozen trials the order below the first few is noise.{flat}"
            f"{constant}{excluded}")


def _slice(ax: Any, data: Slice, picked: set[int], best: int, label: str,
           log_y: bool) -> None:
    """One slice panel: the points of the *picked* trials (numbers) among its own (a
    conditional param's: those where it is active), trial *best* in vermillion."""
    categorical = data.scale == "categorical"
    xs = (_positions(data.values, data.levels) if categorical
          else [float(v) for v in data.values])
    ys = data.objectives
    mine = [i for i, number in enumerate(data.trials) if number in picked]
    ax.scatter([xs[i] for i in mine], [ys[i] for i in mine], s=10, color=SKY_BLUE,
               edgecolors="none", alpha=0.7, zorder=2)
    top = [i for i, number in enumerate(data.trials) if number == best]
    ax.scatter([xs[i] for i in top], [ys[i] for i in top], s=40, color=VERMILLION, zorder=3)
    ax.set_xlabel(label, fontsize="small")
    ax.tick_params(labelsize="small")
    if categorical:
        ax.set_xlim(-0.5, len(data.levels) - 0.5)
        _levels_axis(ax.xaxis, data.levels, _PANEL_PX, across=True)
    else:
        if data.scale == "log":
            ax.set_xscale("log")
        low, high = data.low or 0.0, data.high or 0.0
        if high > low:
            pad = (high / low) ** 0.04 if data.scale == "log" else 0.04 * (high - low)
            ax.set_xlim(*((low / pad, high * pad) if data.scale == "log"
                          else (low - pad, high + pad)))
        _number_axis(ax.xaxis, data.scale == "log",
                     all(isinstance(v, int) for v in data.values), 3)
    if log_y:
        ax.set_yscale("log")


def draw_slices(fig: Any, run: RunData, view: Landscape) -> str:
    """The objective against each param, a panel each (the most important first)."""
    from matplotlib.lines import Line2D

    why = _why(view)
    if why is not None or view.space is None:
        nothing(fig, why or "no space")
        return f"No slices: {why}."
    names = view.ranked()[:SLICES_DRAWN]
    data = slices(view.space, view.observed, names)
    # Every usable trial: the first param is never conditional (a parent comes first).
    every = slices(view.space, view.observed, view.space.names[:1])[0]
    objectives = every.objectives
    if not objectives:
        nothing(fig, "no completed trial with params the space takes")
        return "No slices: no completed trial with params the space takes."
    maximize = view.direction == "maximize"
    chosen, first = _picked(objectives, maximize)
    picked, best = {every.trials[i] for i in chosen}, every.trials[first]
    columns = min(_COLUMNS, len(data))
    rows = math.ceil(len(data) / columns)
    fig.set_size_inches(10, 1.0 + 2.4 * rows)
    axes = fig.subplots(rows, columns, sharey=True, squeeze=False).flatten()
    result = view.importances
    shares = result.importance if result is not None and not result.reason else {}
    log_y = wide_spread(objectives)
    for ax, one in zip(axes, data, strict=False):
        share = f" ({shares[one.param]:.0%})" if one.param in shares else ""
        _slice(ax, one, picked, best, _cut(one.param, 22) + share, log_y)
    for ax in axes[len(data):]:
        ax.set_axis_off()
    if log_y:
        log_ticks(axes[0].yaxis)
    fig.supylabel(better_label(run.metric, run.direction), fontsize="medium")
    handles = [Line2D([], [], linestyle="", marker="o", markersize=4, color=SKY_BLUE,
                      label=f"a trial ({len(objectives)})"),
               Line2D([], [], linestyle="", marker="o", markersize=6, color=VERMILLION,
                      label=f"the best (trial {best})")]
    fig.legend(handles=handles, loc="outside upper center", ncols=2, fontsize="small",
               frameon=False)
    drawn = (f"{len(picked)} of the {len(objectives)}" if len(picked) < len(objectives)
             else f"the {len(objectives)}")
    order = ("the most important first (its share of the importance in brackets)" if shares
             else "in the space's order (no importance yet)")
    more = (f"; the {len(view.space)} params' first {len(data)}" if len(view.space) > len(data)
            else "")
    return (f"The {run.metric} of {drawn} completed, valid trials against each param, a"
            f" panel per param, {order}{more}: numbers in their range (on a log scale where"
            " the param is), categories in declared order (the points of one spread a"
            " little sideways); the best trial in vermillion.")


def _mesh(ax: Any, data: Any, maximize: bool) -> Any:
    """The contour's cells, coloured by their mean, empty ones left white."""
    import numpy as np
    from matplotlib.colors import LogNorm, Normalize

    means = np.ma.masked_invalid(np.array(
        [[math.nan if v is None else v for v in row] for row in data.means], dtype=float))
    filled = [v for row in data.means for v in row if v is not None]
    low, high = min(filled), max(filled)
    norm = (LogNorm(low, high) if wide_spread(filled)
            else Normalize(low, high if high > low else low + 1.0))
    return ax.pcolormesh(list(data.x.edges), list(data.y.edges), means,
                         cmap=_score_map(maximize), norm=norm, shading="flat")


def _grid_axis(ax: Any, which: str, axis: GridAxis, values: Sequence[Any]) -> None:
    """Scale, limits and ticks of one of the contour's axes (*values*: the trials')."""
    target = ax.xaxis if which == "x" else ax.yaxis
    if axis.scale == "log":
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    (ax.set_xlim if which == "x" else ax.set_ylim)(axis.edges[0], axis.edges[-1])
    if axis.scale == "categorical":
        _levels_axis(target, axis.levels, 700.0 if which == "x" else 300.0, which == "x")
    else:
        _number_axis(target, axis.scale == "log", all(isinstance(v, int) for v in values), 6)
    (ax.set_xlabel if which == "x" else ax.set_ylabel)(_cut(axis.param, 40))


def draw_contour(fig: Any, run: RunData, view: Landscape) -> str:
    """The mean objective over a grid of the two most important params."""
    from matplotlib.ticker import FuncFormatter

    why = _why(view)
    pair = top_pair(view.space, view.importances) if view.space is not None else None
    if why is None and pair is None:
        why = "the space has a single param: no pair to draw"
    data = (contour(view.space, view.observed, pair, direction=view.direction)
            if why is None and view.space is not None else None)
    if data is None or not data.trials:
        nothing(fig, why or "no completed trial with params the space takes")
        return f"No contour: {why or 'no completed trial with params the space takes'}."
    maximize = view.direction == "maximize"
    ax = fig.subplots()
    mesh = _mesh(ax, data, maximize)
    points = [(_positions(values, axis.levels, seed) if axis.scale == "categorical"
               else [float(v) for v in values])
              for seed, (values, axis) in enumerate(((data.xs, data.x), (data.ys, data.y)))]
    picked, best = _picked(data.objectives, maximize)
    ax.scatter([points[0][i] for i in picked], [points[1][i] for i in picked], s=9,
               color="white", edgecolors=BLACK, linewidths=0.4, alpha=0.8, zorder=2,
               label=f"a trial ({len(data.trials)})")
    ax.scatter([points[0][best]], [points[1][best]], s=150, marker="*", color=VERMILLION,
               edgecolors=BLACK, linewidths=0.5, zorder=3,
               label=f"the best (trial {data.trials[best]})")
    _grid_axis(ax, "x", data.x, data.xs)
    _grid_axis(ax, "y", data.y, data.ys)
    bar = fig.colorbar(mesh, ax=ax, label=better_label(f"mean {run.metric}", run.direction))
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    bar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    fig.legend(loc="outside upper center", ncols=2, fontsize="small", frameon=False)
    result = view.importances
    chosen = ("the two most important params" if result is not None and not result.reason
              and pair == tuple(result.ranked()[:2]) else "the space's first two params")
    empty = sum(1 for row in data.counts for c in row if not c)
    return (f"The mean {run.metric} of the completed, valid trials in each cell of a grid"
            f" over {data.x.param} and {data.y.param} ({chosen}), darker the better: numbers"
            " in cells evenly spaced in their range (in log space where the param is log),"
            " a cell per value for a discrete param of few values, a cell per level for a"
            f" categorical; {empty} cells hold no trial (white). White points: the trials"
            " (a categorical's spread a little within its cell); the star: the best. The"
            " other params vary within each cell, so a cell's mean is an average over them.")
