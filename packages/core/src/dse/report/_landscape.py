"""What the objective looks like over the params, as data: the slices (each param's values
against the objective, one point per trial) and the contour of a pair of params (the mean
objective in each cell of a grid over the two), with the importance of each param
(:mod:`dse.report._importance`) that orders the slices and picks the pair.

Everything here is plain Python and JSON-able (each value's ``as_dict``): ``dse report
--html`` draws it (:mod:`dse.report._landscapeplot`), and anything else (a live page) can read
the same numbers. A param's values stay in its own terms: numbers in their range, on a log
scale where the param is log (a contour's cells evenly spaced in log space), categories as
their levels in declared order.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError
from dse.model._space import Categorical, ParamError, Space
from dse.report._importance import ped_anova
from dse.report._plots import scored

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from dse.model._space import Parameter, Value
    from dse.report._importance import Importances
    from dse.report._plots import RunData

__all__ = ["CONTOUR_BINS", "Contour", "GridAxis", "Landscape", "Observed", "Slice", "contour",
           "landscape", "scale_of", "slices", "space_of", "top_pair"]

CONTOUR_BINS = 10
"""Cells of a contour along each number param (a discrete one with fewer values: one each)."""


@dataclass(frozen=True, slots=True)
class Observed:
    """One completed trial as the landscape reads it."""

    number: int
    """The trial's number in its run."""
    params: Mapping[str, Any]
    """Its params, as recorded."""
    value: float
    """Its objective value."""
    cached: bool = False
    """Whether it is a cache hit (a result reused from the record)."""


def space_of(entries: Sequence[Mapping[str, Any]]) -> Space | None:
    """The campaign's :class:`Space` rebuilt from the record's description of it (a run's
    ``spec["space"]``: one dict per param, ``name`` and ``type`` and the rest), or ``None``
    when it does not read as one (no param, or a description dse cannot take back)."""
    table = {}
    for entry in entries:
        table[str(entry.get("name"))] = {k: v for k, v in entry.items()
                                         if k != "name" and v is not None}
    try:
        return Space.from_dict(table, source="the run's space")
    except ConfigError:
        return None


def scale_of(param: Parameter) -> str:
    """How *param*'s values are laid out on an axis: ``"categorical"``, ``"log"`` or
    ``"linear"``."""
    if isinstance(param, Categorical):
        return "categorical"
    return "log" if param.log else "linear"


def _usable(space: Space, observed: Iterable[Observed]) -> list[tuple[Observed, dict[str, Value]]]:
    """The trials with a finite value and params the space takes, each with them coerced (a
    conditional space's: its active params only)."""
    found = []
    names = space.names
    for o in observed:
        if not math.isfinite(o.value):
            continue
        try:
            found.append((o, space.coerce({n: o.params[n] for n in names if n in o.params})))
        except ParamError:
            continue
    return found


@dataclass(frozen=True, slots=True)
class Slice:
    """One param's values against the objective: a point for each trial."""

    param: str
    """The param's name."""
    scale: str
    """``"linear"``, ``"log"`` or ``"categorical"``: how its axis reads."""
    low: float | None
    """A number's declared range (``None`` for a categorical)."""
    high: float | None
    levels: tuple[Value, ...]
    """A categorical's choices, in declared order (empty for a number)."""
    trials: tuple[int, ...]
    """Each point's trial number, in trial order."""
    values: tuple[Value, ...]
    """Each point's value of the param."""
    objectives: tuple[float, ...]
    """Each point's objective value."""

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"param": self.param, "scale": self.scale, "low": self.low, "high": self.high,
                "levels": list(self.levels), "trials": list(self.trials),
                "values": list(self.values), "objectives": list(self.objectives)}


def slices(space: Space, observed: Iterable[Observed],
           params: Sequence[str] | None = None) -> list[Slice]:
    """The slice of each of *params* (default: every param of *space*, in its order) over
    the *observed* trials (those with a NaN or infinite value, or params the space refuses,
    left out; of a conditional param, those where it is active), in trial order."""
    usable = sorted(_usable(space, observed), key=lambda item: item[0].number)
    found = []
    for name in params if params is not None else space.names:
        param = space[name]
        low, high, levels = ((None, None, param.choices) if isinstance(param, Categorical)
                             else (float(param.low), float(param.high), ()))
        there = [(o, p) for o, p in usable if name in p]
        found.append(Slice(
            name, scale_of(param), low, high, levels, tuple(o.number for o, _ in there),
            tuple(p[name] for _, p in there), tuple(o.value for o, _ in there)))
    return found


@dataclass(frozen=True, slots=True)
class GridAxis:
    """One axis of a contour: its bins over one param, in the param's values."""

    param: str
    """The param's name."""
    scale: str
    """``"linear"``, ``"log"`` (the edges evenly spaced in log space) or ``"categorical"``
    (one bin per level, at positions 0, 1, ...)."""
    edges: tuple[float, ...]
    """The bins' edges, one more than the bins: a number's values (a discrete number with
    few values has one bin around each), a categorical's positions (``-0.5, 0.5, ...``)."""
    levels: tuple[Value, ...]
    """A categorical's level in each bin (empty for a number)."""
    centres: tuple[Value, ...]
    """Each bin's centre (a discrete param's value, a categorical's level)."""

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"param": self.param, "scale": self.scale, "edges": list(self.edges),
                "levels": list(self.levels), "centres": list(self.centres)}

    def bin(self, value: Value) -> int:
        """The bin *value* (a value of the param, coerced) falls in."""
        if self.scale == "categorical":
            return next(i for i, c in enumerate(self.levels)
                        if c == value and type(c) is type(value))
        edges = self.edges
        at = float(value)
        for i in range(len(edges) - 2, -1, -1):
            if at >= edges[i]:
                return i
        return 0


def _middle(a: float, b: float, log: bool) -> float:
    return math.sqrt(a * b) if log else (a + b) / 2


def grid_axis(param: Parameter, bins: int = CONTOUR_BINS) -> GridAxis:
    """*param*'s axis of *bins* bins (a categorical: one per level; a discrete number of
    fewer values: one around each)."""
    scale = scale_of(param)
    if isinstance(param, Categorical):
        edges = tuple(i - 0.5 for i in range(param.size + 1))
        return GridAxis(param.name, scale, edges, param.choices, param.choices)
    log = param.log
    size = param.size
    if size is not None and size <= bins:
        values = [float(v) for v in param.values()]
        inner = [_middle(a, b, log) for a, b in itertools.pairwise(values)]
        if len(values) == 1:
            first, last = ((values[0] / 10 ** 0.5, values[0] * 10 ** 0.5) if log
                           else (values[0] - 0.5, values[0] + 0.5))
        elif log:
            first, last = values[0] ** 2 / inner[0], values[-1] ** 2 / inner[-1]
        else:
            first, last = 2 * values[0] - inner[0], 2 * values[-1] - inner[-1]
        return GridAxis(param.name, scale, (first, *inner, last), (), tuple(param.values()))
    low, high = float(param.low), float(param.high)
    if log:
        lo, hi = math.log(low), math.log(high)
        edges = tuple(math.exp(lo + (hi - lo) * i / bins) for i in range(bins + 1))
    else:
        edges = tuple(low + (high - low) * i / bins for i in range(bins + 1))
    centres = tuple(_middle(a, b, log) for a, b in itertools.pairwise(edges))
    return GridAxis(param.name, scale, (low, *edges[1:-1], high), (), centres)


@dataclass(frozen=True, slots=True)
class Contour:
    """The mean objective over a grid of two params, and the trials it averages."""

    x: GridAxis
    """The first param's axis."""
    y: GridAxis
    """The second param's axis."""
    means: tuple[tuple[float | None, ...], ...]
    """The mean objective of the trials in each cell, a row per bin of :attr:`y` and in it
    a cell per bin of :attr:`x`; ``None`` for a cell with no trial."""
    counts: tuple[tuple[int, ...], ...]
    """How many trials each cell holds, laid out as :attr:`means`."""
    trials: tuple[int, ...]
    """Each trial's number, in trial order."""
    xs: tuple[Value, ...]
    """Each trial's value of the first param."""
    ys: tuple[Value, ...]
    """Each trial's value of the second param."""
    objectives: tuple[float, ...]
    """Each trial's objective value."""

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return {"x": self.x.as_dict(), "y": self.y.as_dict(),
                "means": [list(row) for row in self.means],
                "counts": [list(row) for row in self.counts], "trials": list(self.trials),
                "xs": list(self.xs), "ys": list(self.ys), "objectives": list(self.objectives)}


def top_pair(space: Space, importances: Importances | None = None) -> tuple[str, str] | None:
    """The pair a contour draws by default: the two most important params (by
    *importances*, when they were computed and set two apart from the rest), else the
    first two of *space* that take more than one value; ``None`` without two."""
    if importances is not None and not importances.reason:
        ranked = [n for n, share in importances.importance.items() if share > 0]
        pair = _first_together(space, ranked)
        if pair is not None:
            return pair
    varied = [p.name for p in space if p.size != 1]
    return _first_together(space, varied if len(varied) >= 2 else list(space.names))


def _first_together(space: Space, names: Sequence[str]) -> tuple[str, str] | None:
    """The first pair of *names* (in their order) that some point of *space* holds both
    of: of a conditional space, not two params of exclusive branches."""
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            if _together(space, first, second):
                return first, second
    return None


def _requires(space: Space, name: str) -> dict[str, frozenset[tuple[type, Any]]]:
    """What a point must hold for param *name* to be active: each ancestor's allowed values
    (as ``(type, value)`` keys)."""
    found: dict[str, frozenset[tuple[type, Any]]] = {}
    for parent, values in space[name].when:
        own = {parent: frozenset((type(v), v) for v in values), **_requires(space, parent)}
        for ancestor, allowed in own.items():
            found[ancestor] = found[ancestor] & allowed if ancestor in found else allowed
    return found


def _together(space: Space, first: str, second: str) -> bool:
    """Whether a point of *space* can hold both params."""
    if not space.conditional:
        return True
    need, also = _requires(space, first), _requires(space, second)
    return all(need[k] & also[k] for k in need.keys() & also.keys())


def contour(space: Space, observed: Iterable[Observed], pair: tuple[str, str] | None = None,
            *, direction: str = "minimize", bins: int = CONTOUR_BINS) -> Contour | None:
    """The contour of *pair* of params (default: :func:`top_pair`, by the PED-ANOVA of the
    *observed* trials for *direction*) over the *observed* trials (a NaN or infinite value,
    or params the space refuses, left out): the mean objective in each of the cells of
    *bins* by *bins* (a categorical: a cell per level), over the trials where both are
    active. ``None`` for a space of one param."""
    usable = sorted(_usable(space, observed), key=lambda item: item[0].number)
    if pair is None:
        pair = top_pair(space, ped_anova(space, [(o.params, o.value) for o, _ in usable],
                                         direction=direction))
        if pair is None:
            return None
    usable = [(o, p) for o, p in usable if pair[0] in p and pair[1] in p]
    x, y = grid_axis(space[pair[0]], bins), grid_axis(space[pair[1]], bins)
    columns, rows = len(x.edges) - 1, len(y.edges) - 1
    sums = [[0.0] * columns for _ in range(rows)]
    counts = [[0] * columns for _ in range(rows)]
    for o, params in usable:
        row, column = y.bin(params[y.param]), x.bin(params[x.param])
        sums[row][column] += o.value
        counts[row][column] += 1
    means = tuple(tuple(s / c if c else None for s, c in zip(srow, crow, strict=True))
                  for srow, crow in zip(sums, counts, strict=True))
    return Contour(x, y, means, tuple(tuple(row) for row in counts),
                   tuple(o.number for o, _ in usable), tuple(p[x.param] for _, p in usable),
                   tuple(p[y.param] for _, p in usable), tuple(o.value for o, _ in usable))


@dataclass(frozen=True, slots=True)
class Landscape:
    """What the importance, slice and contour figures of one run read, once: its space, its
    completed trials and the params' importance."""

    space: Space | None
    """The run's space (``None`` when its description does not read: :func:`space_of`)."""
    observed: tuple[Observed, ...]
    """Its completed, valid, scored trials (cache hits among them), in trial order."""
    importances: Importances | None
    """PED-ANOVA's importances of its params (``None`` without a space)."""
    direction: str
    """``"minimize"`` or ``"maximize"``."""

    def ranked(self) -> list[str]:
        """The params, the most important first (the space's order when the importances
        were not computed)."""
        if self.importances is not None and not self.importances.reason:
            return self.importances.ranked()
        return list(self.space.names) if self.space is not None else []


def landscape(run: RunData) -> Landscape:
    """The landscape of *run* (:func:`~dse.report._plots.load_run`): its completed, valid
    trials (:func:`~dse.report._plots.scored`) over its space."""
    space = space_of(run.space) if run.space else None
    observed = tuple(Observed(t["number"], t["params"], float(t["score"]), bool(t["cached"]))
                     for t in scored(run))
    direction = "maximize" if run.direction == "maximize" else "minimize"
    importances = None if space is None else ped_anova(
        space, [(o.params, o.value) for o in observed], direction=direction)
    return Landscape(space, observed, importances, direction)
