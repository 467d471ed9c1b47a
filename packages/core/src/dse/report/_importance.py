"""Which params matter: PED-ANOVA (Watanabe, Bansal and Hutter, "PED-ANOVA: Efficiently
Quantifying Hyperparameter Importance in Arbitrary Subspaces", IJCAI 2023), in plain Python.

The question PED-ANOVA answers: *what did the best trials have to get right?* Take the
completed trials, the top ``target_quantile`` of them by the objective (the *top* set, the
paper's gamma') and the top ``region_quantile`` of them (the *region*, gamma; all of them by
default). For each param, estimate the density of its values in each set with a 1-D Parzen
estimator on a grid: a param the top trials took anywhere the region did has the same
density in both, one they had to get right has its top density piled up where the best
values are. The importance of a param is the Pearson χ² divergence between the two,
``Σ_x p_region(x) · (p_top(x) / p_region(x) - 1)²``; the paper shows that, times
``(gamma'/gamma)²``, it is the variance of "is this trial in the top set" that the param
alone explains within the region. Each param's share of the sum ranks them.

It needs only the trials' params and objective values: no model is fitted, so it is fast on a
million trials and gives the same answer every time. Read it for what it is: a param ranked
low may still matter *jointly* with another (PED-ANOVA is first order), and on a few dozen
trials the ranking of the params below the first few is noise.

The estimator, per param (the same for both sets):

* **numbers** (int and float ranges) on a grid of :data:`GRID_POINTS` points evenly spaced
  over the declared range, in log space where the param is log; a discrete param with fewer
  values has one point per value, and a log integer no more points than its two smallest
  values are apart in log space (no point between two integers that none can take). Each
  trial's value goes to its nearest grid point; a Gaussian kernel sits on each, its width by
  Scott's rule (``1.059 · min(sd, IQR / 1.34) · n^(-1/5)`` grid steps, at least
  :data:`MIN_BANDWIDTH`), truncated to the grid and normalised there;
* a **prior** of weight :data:`PRIOR_WEIGHT` (one trial's), uniform over the grid, is added
  to a number's density in both sets: a density is never zero, and one trial alone never
  dominates;
* **categories** as smoothed frequencies: each choice's count plus one
  (:data:`CATEGORY_PRIOR`, Laplace's rule), over the count of all plus one per choice. The
  raw frequencies of a categorical of many choices over a few top trials differ from the
  region's by chance alone; the pseudo-counts keep that noise near a number's.

Trials whose objective is NaN or infinite, or whose params the space refuses, are left out.
A param with a single value (a one-choice categorical, ``low == high``) has importance 0.
A conditional param (``when``) is judged within its own subspace: the region and the top set
are those of their trials where it is active (importance 0 when no top trial has it); how
much choosing its branch matters is its parents' importance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dse.model._space import Categorical, ParamError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from dse.model._space import Parameter, Space, Value

__all__ = ["CATEGORY_PRIOR", "GRID_POINTS", "MIN_BANDWIDTH", "MIN_TOP", "PRIOR_WEIGHT",
           "REGION_QUANTILE", "TARGET_QUANTILE", "Importances", "ped_anova", "quantile_set"]

TARGET_QUANTILE = 0.1
"""The top set by default: the best 10% of the trials (the paper's gamma')."""
REGION_QUANTILE = 1.0
"""The region by default: every trial (the paper's gamma; importance over the whole space)."""
GRID_POINTS = 50
"""Grid points a number's density is estimated on, at most."""
PRIOR_WEIGHT = 1.0
"""The weight of the uniform prior added to a number's density: one trial's."""
CATEGORY_PRIOR = 1.0
"""The pseudo-count every choice of a categorical starts with (Laplace's rule): without it,
a categorical of many choices would look important on the noise of a few top trials."""
MIN_BANDWIDTH = 0.5
"""The narrowest kernel, in grid steps: a kernel never collapses onto one point."""
MIN_TOP = 2
"""Trials the top set needs at least: one trial is a point, not a density."""


@dataclass(frozen=True, slots=True)
class Importances:
    """The importance of each param of a space for reaching the top trials, by PED-ANOVA
    (:func:`ped_anova`): what a figure or a dashboard draws, JSON-able by :meth:`as_dict`."""

    importance: dict[str, float]
    """Each param's share of the importance, the largest first (equal shares in the space's
    order): they add up to 1, or are all 0 when no param tells the top trials apart; empty
    when :attr:`reason` says why nothing was computed."""
    divergence: dict[str, float]
    """Each param's local importance before the shares, in the same order: ``(gamma'/gamma)²`` times
    the Pearson χ² divergence of its top density from its region density (comparable across
    runs with the same quantiles)."""
    trials: int
    """The trials read: a finite objective, params the space takes."""
    top: int
    """Trials in the top set (ties with the last one included)."""
    region: int
    """Trials in the region."""
    excluded: int
    """Trials left out: a NaN or infinite objective, or params the space refuses."""
    target_quantile: float
    """The share of the trials the top set was asked to hold."""
    region_quantile: float
    """The share of the trials the region was asked to hold."""
    reason: str = ""
    """Why there are no importances (too few trials, every objective equal...); empty when
    they were computed."""
    constant: tuple[str, ...] = field(default=())
    """The params that take a single value in the space (importance 0)."""

    def ranked(self) -> list[str]:
        """The params, the most important first (empty with a :attr:`reason`)."""
        return list(self.importance)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (``importance`` and ``divergence`` keep their
        order)."""
        return {"method": "PED-ANOVA", "importance": dict(self.importance),
                "divergence": dict(self.divergence), "trials": self.trials, "top": self.top,
                "region": self.region, "excluded": self.excluded,
                "target_quantile": self.target_quantile,
                "region_quantile": self.region_quantile, "reason": self.reason,
                "constant": list(self.constant)}


def quantile_set(losses: Sequence[float], quantile: float) -> list[int]:
    """The indices of the best *quantile* of *losses* (lower is better): the first
    ``ceil(quantile · n)`` in order, and every one that ties with the last of them."""
    if not losses:
        return []
    keep = max(1, math.ceil(round(quantile * len(losses), 9)))  # 0.1 * 30 is 3.0000000000000004
    cutoff = sorted(losses)[min(keep, len(losses)) - 1]
    return [i for i, loss in enumerate(losses) if loss <= cutoff]


def _trials_needed(quantile: float) -> int:
    """The fewest trials whose top *quantile* holds :data:`MIN_TOP` of them."""
    n = MIN_TOP
    while math.ceil(round(quantile * n, 9)) < MIN_TOP:
        n += 1
    return n


def _read(space: Space, observations: Iterable[tuple[Mapping[str, Any], float]], sign: float
          ) -> tuple[list[dict[str, Value]], list[float], int]:
    """The coerced params and the losses (lower is better) of the usable observations, and
    how many were left out."""
    points: list[dict[str, Value]] = []
    losses: list[float] = []
    excluded = 0
    names = space.names
    for params, value in observations:
        try:
            loss = sign * float(value)
            point = space.coerce({n: params[n] for n in names if n in params})
        except (ParamError, TypeError, ValueError):
            excluded += 1
            continue
        if not math.isfinite(loss):
            excluded += 1
            continue
        points.append(point)
        losses.append(loss)
    return points, losses, excluded


def ped_anova(
    space: Space, observations: Iterable[tuple[Mapping[str, Any], float]], *,
    direction: str = "minimize", target_quantile: float = TARGET_QUANTILE,
    region_quantile: float = REGION_QUANTILE, grid: int = GRID_POINTS,
) -> Importances:
    """The importance of each param of *space* for reaching the best trials, by PED-ANOVA.

    :param space: the campaign's space (each param's kind, range, scale and choices).
    :param observations: each completed trial as ``(params, objective value)``; a value that
        is NaN or infinite, or params the space refuses, leave the trial out.
    :param direction: ``"minimize"`` or ``"maximize"``: which end of the objective is best.
    :param target_quantile: the share of the trials in the top set (gamma'; 0.1: the best 10%).
    :param region_quantile: the share of the trials in the region the importance is local
        to (gamma; 1.0: all of them). ``0 < target_quantile < region_quantile <= 1``.
    :param grid: grid points a number's density is estimated on, at most (2 or more).
    :returns: the shares, the largest first; none, with the :attr:`~Importances.reason`,
        when the top set would hold fewer than :data:`MIN_TOP` trials or is the region
        itself (every objective equal).
    :raises ValueError: for a *direction*, quantiles or *grid* out of their ranges.
    """
    if direction not in ("minimize", "maximize"):
        raise ValueError(f"direction must be 'minimize' or 'maximize', got {direction!r}")
    if not 0.0 < target_quantile < region_quantile <= 1.0:
        raise ValueError("the quantiles must be 0 < target_quantile < region_quantile <= 1,"
                         f" got {target_quantile!r} and {region_quantile!r}")
    if grid < 2:
        raise ValueError(f"grid must be 2 points or more, got {grid!r}")
    points, losses, excluded = _read(space, observations, -1.0 if direction == "maximize"
                                     else 1.0)
    region = quantile_set(losses, region_quantile)
    top = quantile_set(losses, target_quantile)  # within the region: its cutoff is no higher
    constant = tuple(p.name for p in space if _single(p))
    done = Importances({}, {}, len(points), len(top), len(region), excluded, target_quantile,
                       region_quantile, constant=constant)
    if len(top) < MIN_TOP:
        return replace(done, reason=(
            "no completed trial with a finite objective" if not points else
            f"too few trials: the top {target_quantile:.0%} of {len(points)} is {len(top)},"
            f" PED-ANOVA needs {MIN_TOP} ({_trials_needed(target_quantile)} trials or more)"))
    if len(top) == len(region):
        return replace(done, reason=f"the top {target_quantile:.0%} ties with every trial"
                                    " of the region (their objectives are equal): nothing"
                                    " sets them apart")
    ratio = (len(top) / len(region)) ** 2
    divergence = {}
    for param in space:
        name = param.name
        if param.when:  # over the trials where it is active: its own subspace
            values = [points[i][name] for i in region if name in points[i]]
            tops = [points[i][name] for i in top if name in points[i]]
            divergence[name] = 0.0 if _single(param) or not tops else (
                len(tops) / len(values)) ** 2 * _pearson(param, tops, values, grid)
            continue
        values = [points[i][name] for i in region]
        tops = [points[i][name] for i in top]
        divergence[name] = 0.0 if _single(param) else ratio * _pearson(
            param, tops, values, grid)
    return _shared(done, divergence)


def _shared(done: Importances, divergence: dict[str, float]) -> Importances:
    """*done* with *divergence* and the shares of it, both the largest first."""
    order = sorted(divergence, key=lambda name: -divergence[name])  # stable: ties by space
    total = sum(divergence.values())
    shares = {name: divergence[name] / total if total > 0 else 0.0 for name in order}
    return replace(done, importance=shares,
                   divergence={name: divergence[name] for name in order})


def _single(param: Parameter) -> bool:
    """Whether *param* takes a single value."""
    if isinstance(param, Categorical):
        return param.size == 1
    return param.size == 1 or param.high <= param.low


def _pearson(param: Parameter, tops: Sequence[Value], region: Sequence[Value],
             grid: int) -> float:
    """The Pearson χ² divergence of the top density of *param* from its region density."""
    if isinstance(param, Categorical):
        p_top, p_region = _frequencies(param, tops), _frequencies(param, region)
    else:
        size = _grid_size(param, grid)
        p_top = _parzen([_grid_index(param, v, size) for v in tops], size)
        p_region = _parzen([_grid_index(param, v, size) for v in region], size)
    return sum(r * (t / r - 1.0) ** 2 for t, r in zip(p_top, p_region, strict=True))


def _frequencies(param: Categorical, values: Sequence[Value]) -> list[float]:
    """Each choice's smoothed frequency among *values*: its count plus
    :data:`CATEGORY_PRIOR`, over the count of all plus the prior of every choice."""
    where = {(type(c), c): i for i, c in enumerate(param.choices)}
    counts = [CATEGORY_PRIOR] * param.size
    for value in values:
        counts[where[(type(value), value)]] += 1.0
    total = len(values) + CATEGORY_PRIOR * param.size
    return [c / total for c in counts]


def _scaled(log: bool, value: float) -> float:
    """*value* on its param's own scale (its log where the param is *log*)."""
    return math.log(value) if log else float(value)


def _grid_size(param: Parameter, grid: int) -> int:
    """The grid points of a number param: at most *grid*, one per value when it has fewer,
    and for a discrete log param no closer than its two smallest values."""
    assert not isinstance(param, Categorical)
    size = param.size
    if size is None:
        return grid
    points = min(grid, size)
    if param.log and param.step is not None and size > 1:
        span = math.log(param.high) - math.log(param.low)
        first = math.log(param.low + param.step) - math.log(param.low)
        points = min(points, 1 + math.ceil(span / first))
    return max(points, 2)


def _grid_index(param: Parameter, value: Value, size: int) -> int:
    """The grid point nearest to *value* (a number of *param*'s range)."""
    assert not isinstance(param, Categorical)
    low, high = _scaled(param.log, param.low), _scaled(param.log, param.high)
    at = (_scaled(param.log, float(value)) - low) / (high - low) * (size - 1)
    return min(max(round(at), 0), size - 1)


def _bandwidth(indices: Sequence[int]) -> float:
    """Scott's rule on *indices* (grid steps), never under :data:`MIN_BANDWIDTH`."""
    n = len(indices)
    if n < 2:
        return MIN_BANDWIDTH
    mean = sum(indices) / n
    sd = math.sqrt(sum((i - mean) ** 2 for i in indices) / (n - 1))
    ordered = sorted(indices)
    iqr = ordered[(3 * n) // 4] - ordered[n // 4]
    spread = min(sd, iqr / 1.34) if iqr > 0 else sd
    scott: float = 1.059 * spread * math.pow(n, -0.2)
    return max(scott, MIN_BANDWIDTH)


def _parzen(indices: Sequence[int], size: int) -> list[float]:
    """The Parzen density of *indices* on a grid of *size* points: a Gaussian kernel on each
    (truncated to the grid and normalised on it) and the uniform prior, weighted by count."""
    sigma = _bandwidth(indices)
    counts: dict[int, int] = {}
    for i in indices:
        counts[i] = counts.get(i, 0) + 1
    density = [PRIOR_WEIGHT / size] * size
    for centre, count in counts.items():
        kernel = [math.exp(-0.5 * ((x - centre) / sigma) ** 2) for x in range(size)]
        scale = count / sum(kernel)
        for x in range(size):
            density[x] += scale * kernel[x]
    total = len(indices) + PRIOR_WEIGHT
    return [d / total for d in density]
