"""The parallel-coordinates figure of ``dse report --html``: each completed, valid trial a
line through its params, coloured by score.

Each param has its own vertical axis in its own values: a number's in its range (log where
the param is), with a few ticks; a category's at its position in the declared order, every
name written (or every k-th, :data:`CATEGORIES_NAMED` at most, when there are many: the
positions are fixed by the order, so the first few alone would crowd the bottom). Scores
run through a colour map made for colour-blind readers by rank (dark at the best end: a few
outliers never squeeze the rest into one colour), and the best :data:`BEST_EMPHASISED` are
drawn last, thicker, in vermillion; cache hits (results reused from the record) are dashed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse.report._palette import SCORE_MAP, VERMILLION, better_label, nothing
from dse.report._plots import scored

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.report._plots import RunData

__all__ = ["BEST_EMPHASISED", "CATEGORIES_NAMED", "LINES_DRAWN", "NAME_CHARS", "ParamAxis",
           "draw_parameters", "param_axis", "rank_positions"]

LINES_DRAWN = 5000
"""At most this many trials are drawn (the best 100 always among them)."""
BEST_EMPHASISED = 5
"""The best this many are drawn last, emphasised (one in ten of fewer than 50)."""
CATEGORIES_NAMED = 12
"""A categorical axis names at most this many of its categories."""
NAME_CHARS = 16
"""Names longer than this are cut, with an ellipsis."""
_PAD = 0.05  # of an axis's height, above and below its range


_WIDTH = 760.0  # pixels between the first axis and the last, about
_CHAR = {"small": 6.2, "x-small": 5.3, "medium": 7.0}  # pixels a character takes, about


def _short(name: str, chars: int = NAME_CHARS) -> str:
    return name if len(name) <= chars else name[: chars - 1] + "\N{HORIZONTAL ELLIPSIS}"


def _number(value: float, integer: bool, digits: int) -> str:
    return str(round(value)) if integer else f"{value:.{digits}g}"


@dataclass(frozen=True, slots=True)
class _Layout:
    """How the names and tick labels of *count* axes fit side by side."""

    count: int

    @property
    def spacing(self) -> float:
        return _WIDTH / max(self.count - 1, 1)

    @property
    def size(self) -> str:
        return "small" if self.count <= 8 else "x-small"

    @property
    def chars(self) -> int:
        """The characters a tick label may take before reaching the next axis's."""
        return max(4, min(NAME_CHARS, int((self.spacing - 10) / _CHAR[self.size])))

    def stagger(self, names: Sequence[str]) -> bool:
        """Whether the names go on two rows (every other one a row lower)."""
        return max(len(n) for n in names) * _CHAR["medium"] > self.spacing - 8

    def name_chars(self) -> int:
        return max(4, min(NAME_CHARS, int((2 * self.spacing - 8) / _CHAR["medium"])))


@dataclass(frozen=True, slots=True)
class ParamAxis:
    """One param's axis: where each value sits, in [0, 1], and what its ticks say."""

    name: str
    choices: tuple[Any, ...] | None
    """A categorical param's choices, in order; ``None`` for a number."""
    low: float
    high: float
    log: bool
    integer: bool
    index: Mapping[str, int] = field(default_factory=dict)
    """Each choice's position, by its ``repr`` (``True`` is not ``1``)."""

    def position(self, value: Any) -> float:
        """Where *value* sits, from 0 (the low end, the first category) to 1; NaN when it
        has no place."""
        if self.choices is not None:
            index = self.index.get(repr(value))
            return math.nan if index is None else index / max(len(self.choices) - 1, 1)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return math.nan
        if self.log:
            if value <= 0:
                return math.nan
            return (math.log10(value) - math.log10(self.low)) / (
                math.log10(self.high) - math.log10(self.low))
        return (value - self.low) / (self.high - self.low)

    def limits(self) -> tuple[float, float]:
        """The axis's limits in the param's values: positions ``-pad`` and ``1 + pad``."""
        if self.choices is not None:
            top = max(len(self.choices) - 1, 1)
            return -_PAD * top, top * (1 + _PAD)
        if self.log:
            lo, hi = math.log10(self.low), math.log10(self.high)
            return 10 ** (lo - _PAD * (hi - lo)), 10 ** (hi + _PAD * (hi - lo))
        span = self.high - self.low
        return self.low - _PAD * span, self.high + _PAD * span

    def ticks(self, chars: int = NAME_CHARS) -> tuple[list[float], list[str], list[float]]:
        """Major tick values and their labels (names cut to *chars*), and unlabelled minor
        ticks (a category's position when not every one is named)."""
        if self.choices is not None:
            count = len(self.choices)
            step = math.ceil(count / CATEGORIES_NAMED)
            named = list(range(0, count, step))
            minor = [float(i) for i in range(count)] if step > 1 else []
            return ([float(i) for i in named],
                    [_short(str(self.choices[i]), chars) for i in named], minor)
        from matplotlib.ticker import LogLocator, MaxNLocator

        if self.log:
            inside = self._inside(LogLocator(numticks=7).tick_values(self.low, self.high))
            if len(inside) < 2:
                inside = self._inside(LogLocator(subs=(1.0, 2.0, 5.0), numticks=7).tick_values(
                    self.low, self.high))
        else:
            inside = self._inside(MaxNLocator(nbins=5, integer=self.integer).tick_values(
                self.low, self.high))
        digits = 4 if chars >= 8 else 3
        return inside, [_number(v, self.integer or (v.is_integer() and abs(v) < 1e6), digits)
                        for v in inside], []

    def _inside(self, values: Any) -> list[float]:
        slack = 1e-9 * (self.high - self.low)
        return [float(v) for v in values if self.low - slack <= v <= self.high + slack]


def param_axis(param: Mapping[str, Any], values: Sequence[Any]) -> ParamAxis:
    """The axis of *param* (an entry of the run's space) for the trials' *values* of it."""
    name = str(param.get("name", "?"))
    choices = param.get("choices")
    if choices:
        return ParamAxis(name, tuple(choices), 0.0, 1.0, log=False, integer=False,
                         index={repr(c): i for i, c in enumerate(choices)})
    low, high = param.get("low"), param.get("high")
    seen = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)
            and math.isfinite(v)]
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        low, high = (min(seen), max(seen)) if seen else (0.0, 1.0)
    low, high = float(low), float(high)
    log = bool(param.get("log")) and low > 0
    if high <= low:
        # One value: an axis around it (a decade for a log one).
        low, high = (low / 10 ** 0.5, low * 10 ** 0.5) if log else (low - 0.5, low + 0.5)
    return ParamAxis(name, None, low, high, log=log, integer=param.get("type") == "int")


def _chosen(run: RunData) -> tuple[list[dict[str, Any]], int]:
    """The trials to draw, the best last, and how many were scored."""
    ranked = sorted(scored(run), key=lambda t: t["score"], reverse=run.direction == "maximize")
    best = ranked[:100]
    rest = ranked[100:]
    if len(rest) > LINES_DRAWN - len(best):
        rest = random.Random(0).sample(rest, LINES_DRAWN - len(best))
    return rest + best[::-1], len(ranked)


def _score_colours(scores: Sequence[float], maximize: bool) -> tuple[Any, list[float]]:
    """The colour map (dark at the best end, without the palest quarter of cividis: no
    yellow on white) and where each of *scores* sits on it: by its rank, from 0 (the worst)
    to 1 (the best), so a few outliers never squeeze the rest into one colour."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap

    base = colormaps[SCORE_MAP]
    cmap = ListedColormap(base(np.linspace(0.0, 0.8, 256)[::-1]), name=f"{SCORE_MAP}-dark")
    return cmap, rank_positions(scores, maximize)


def rank_positions(scores: Sequence[float], maximize: bool) -> list[float]:
    """Each of *scores*' rank as a position in [0, 1]: 1 the best, 0 the worst, equal
    scores at the mean of their ranks."""
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=not maximize)
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    top = max(len(scores) - 1, 1)
    return [r / top for r in ranks]


def _rank_bar(bar: Any, scores: Sequence[float], maximize: bool) -> None:
    """Tick the colour bar (ranks, 0 the worst to 1 the best) with the scores at the
    worst, the quartiles and the best."""
    ordered = sorted(scores, reverse=not maximize)  # the worst first
    top = len(ordered) - 1
    at = sorted({0.0, 0.25, 0.5, 0.75, 1.0} if top >= 4 else {0.0, 1.0})
    bar.set_ticks(at, labels=[f"{ordered[round(q * top)]:.4g}" for q in at])


def _axis(host: Any, axis: ParamAxis, at: int, layout: _Layout) -> None:
    """Draw *axis* as the right spine of a twin of *host*, at x = *at*."""
    twin = host.twinx()
    twin.set_label(axis.name)
    for side in ("left", "top", "bottom"):
        twin.spines[side].set_visible(False)
    twin.spines["right"].set_position(("data", at))
    twin.spines["right"].set_color("#555555")
    if axis.log:
        twin.set_yscale("log")
    twin.set_ylim(*axis.limits())
    values, labels, minor = axis.ticks(layout.chars)
    twin.set_yticks(values, labels)
    twin.set_yticks(minor, minor=True)
    twin.tick_params(axis="y", labelsize=layout.size, pad=2)
    for label in twin.get_yticklabels():
        # Readable over the lines.
        label.set_bbox({"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5})


def _names(host: Any, names: Sequence[str], layout: _Layout) -> None:
    """The params' names under their axes: on two rows, every other one lower, when they
    would run into each other on one (and cut when they still would)."""
    stagger = layout.stagger(names)
    chars = layout.name_chars() if stagger else NAME_CHARS
    host.set_xticks(range(len(names)), [_short(n, chars) for n in names])
    host.tick_params(axis="x", length=0, labelsize="medium", pad=6)
    if stagger:
        for tick in host.xaxis.get_major_ticks()[1::2]:
            tick.set_pad(20)


def _lines(host: Any, lines: Sequence[Sequence[tuple[float, float]]], colours: Any, best: int,
           label: str, styles: Sequence[Any]) -> None:
    """Draw *lines* (the *best* last) in their *colours* and line *styles*, the best in
    vermillion; points when there is one param."""
    from matplotlib.collections import LineCollection

    rest = len(lines) - best
    if len(lines[0]) == 1:
        ys = [line[0][1] for line in lines]
        host.scatter([0.0] * rest, ys[:rest], s=16, c=colours[:rest], alpha=0.7)
        host.scatter([0.0] * best, ys[rest:], s=40, color=VERMILLION, zorder=3, label=label)
        return
    host.add_collection(LineCollection(lines[:rest], colors=colours[:rest], linewidths=0.8,
                                       alpha=0.7, linestyles=styles[:rest]))
    host.add_collection(LineCollection(lines[rest:], colors=VERMILLION, linewidths=2.2,
                                       zorder=3, label=label, linestyles=styles[rest:]))


def draw_parameters(fig: Any, run: RunData) -> str:
    """Draw the parallel coordinates of *run* on matplotlib figure *fig*; return the
    caption."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    chosen, count = _chosen(run)
    if not chosen or not run.space:
        nothing(fig, "no completed trial")
        return "No completed, valid trial to draw."
    axes = [param_axis(p, [t["params"].get(p.get("name")) for t in chosen]) for p in run.space]
    lines = [[(i, a.position(t["params"].get(a.name))) for i, a in enumerate(axes)]
             for t in chosen]
    scores = [t["score"] for t in chosen]
    maximize = run.direction == "maximize"
    cmap, ranks = _score_colours(scores, maximize)
    host = fig.subplots()
    best = min(BEST_EMPHASISED, max(1, len(chosen) // 10))
    named = f"the best {best}" if best > 1 else "the best"
    reused = sum(1 for t in chosen if t["cached"])
    styles = [(0, (4, 2)) if t["cached"] else "solid" for t in chosen]
    _lines(host, lines, cmap(ranks), best, f"{named} by {run.metric}", styles)
    if reused and len(axes) > 1:
        from matplotlib.lines import Line2D

        host.add_line(Line2D([], [], color="#555555", linewidth=0.8, linestyle=(0, (4, 2)),
                             label=f"dashed: reused, a cache hit ({reused})"))
    width = max(len(axes) - 1, 1)
    host.set_xlim(-0.04 * width, len(axes) - 1 + 0.04 * width)
    host.set_ylim(-_PAD, 1 + _PAD)
    host.set_yticks([])
    for spine in host.spines.values():
        spine.set_visible(False)
    _names(host, [a.name for a in axes], _Layout(len(axes)))
    for i, axis in enumerate(axes):
        _axis(host, axis, i, _Layout(len(axes)))
    bar = fig.colorbar(ScalarMappable(norm=Normalize(0.0, 1.0), cmap=cmap), ax=host,
                       label=better_label(run.metric, run.direction), pad=0.06)
    _rank_bar(bar, scores, maximize)
    fig.legend(loc="outside upper center", fontsize="small", frameon=False,
               ncols=2 if reused else 1)
    drawn = f"{len(chosen)} of {count}" if len(chosen) < count else f"{count}"
    cut = [a.name for a in axes
           if a.choices is not None and len(a.choices) > CATEGORIES_NAMED]
    every = (f" ({', '.join(cut)}: too many categories to name each, every few named, a"
             " tick at each)") if cut else ""
    return (f"{drawn} completed, valid trials (the best 100 always), each a line through its"
            f" params on their own axes (numbers in their range, on a log scale where the"
            f" param is; categories in their declared order{every}), coloured by their"
            f" rank by {run.metric}, darker the better (a colour for each share of the"
            f" trials, whatever outliers score: the bar names the worst, quartile and best"
            f" scores); {named} in vermillion, drawn last"
            + (f"; dashed: the {reused} reused from the record (cache hits)." if reused
               else "."))
