"""The problems of multi_objective.py: ZDT1, ZDT2 and DTLZ2 on [0, 1]^n, their reference points
and the hypervolume of their true fronts, the evaluations of a run (seeded virtual durations,
as search_quality's) and how a run is scored.

Every objective is minimised; a run is scored by the hypervolume of every point it evaluated,
computed by dse's own :func:`hypervolume` for every method, so all sides are measured by one
function (tests/test_multi_objective.py checks it against an exact computation; the benchmark
checks it against Optuna's before it runs).
"""

from __future__ import annotations

import importlib
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from _sq_problems import DURATION_MEDIAN_S, DURATION_SIGMA

import dse

Params = Mapping[str, Any]
Losses = tuple[float, ...]
Evaluated = list[tuple[Params, Losses]]
"""The points of a run and their objective values, in the order they were told."""


def _dse_hypervolume() -> Callable[[Sequence[Sequence[float]], Sequence[float]], float]:
    # dse does not export its hypervolume (dse.model._pareto.hypervolume) yet, and benchmarks import
    # only public names: it is reached here alone, by name, until `dse.hypervolume` exists.
    public = getattr(dse, "hypervolume", None)
    return public or importlib.import_module("dse.model._pareto").hypervolume  # type: ignore[no-any-return]


hypervolume = _dse_hypervolume()
"""``hypervolume(points, reference)``: the volume the loss vectors *points* dominate, bounded
by *reference* (points not better than it in every objective add nothing)."""


@dataclass(frozen=True, slots=True)
class Problem:
    key: str
    """Name in the tables and the JSON keys."""
    names: tuple[str, ...]
    """The parameters, each a float in [0, 1]."""
    f: Callable[[Params], Losses]
    """The objectives (all minimised), in their order."""
    metrics: tuple[str, ...]
    """The metric name of each objective (dse's ``[[objectives]]``)."""
    reference: Losses
    """The reference point of the hypervolume."""
    optimum: float
    """The hypervolume of the true front with :attr:`reference`."""
    budget: int
    """Trials per run in full mode."""
    description: str

    @property
    def space(self) -> dict[str, Any]:
        """The dse ``[space]`` table (Optuna's distributions are derived from it)."""
        return {n: {"type": "float", "low": 0.0, "high": 1.0} for n in self.names}


def _x(p: Params, n: int) -> list[float]:
    return [float(p[f"x{i}"]) for i in range(1, n + 1)]


ZDT_N = 6
DTLZ_N = 6
DTLZ_M = 3


def _zdt_g(x: Sequence[float]) -> float:
    return 1.0 + 9.0 * sum(x[1:]) / (len(x) - 1)


def zdt1(p: Params) -> Losses:
    """Zitzler, Deb and Thiele (2000), problem 1: a convex front f2 = 1 - sqrt(f1) where
    x2..xn = 0."""
    x = _x(p, ZDT_N)
    g = _zdt_g(x)
    return (x[0], g * (1.0 - math.sqrt(x[0] / g)))


def zdt2(p: Params) -> Losses:
    """ZDT problem 2: the non-convex front f2 = 1 - f1^2 where x2..xn = 0."""
    x = _x(p, ZDT_N)
    g = _zdt_g(x)
    return (x[0], g * (1.0 - (x[0] / g) ** 2))


def dtlz2(p: Params) -> Losses:
    """Deb, Thiele, Laumanns and Zitzler (2002), DTLZ2 with three objectives: the front is the
    unit sphere's positive octant, where the last n - 2 parameters are 0.5."""
    x = _x(p, DTLZ_N)
    g = sum((xi - 0.5) ** 2 for xi in x[DTLZ_M - 1:])
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    r = 1.0 + g
    return (r * math.cos(a) * math.cos(b), r * math.cos(a) * math.sin(b), r * math.sin(a))


ZDT_REFERENCE = (1.1, 1.1)
DTLZ_REFERENCE = (1.1, 1.1, 1.1)


def _zdt_optimum(front_area: float, ref: Losses = ZDT_REFERENCE) -> float:
    """The hypervolume of a front f2 = h(f1), f1 in [0, 1], h falling from 1 to 0, whose
    integral over [0, 1] is *front_area*: the strip f1 in [0, 1] less the area under h, and
    the box f1 in [1, r1] whole."""
    return (ref[1] - front_area) + (ref[0] - 1.0) * ref[1]


def _dtlz2_optimum(ref: Losses = DTLZ_REFERENCE) -> float:
    """The box less the octant of the unit ball (what the sphere dominates is the rest)."""
    return math.prod(ref) - math.pi / 6


def _problems() -> dict[str, Problem]:
    zdt_names = tuple(f"x{i}" for i in range(1, ZDT_N + 1))
    dtlz_names = tuple(f"x{i}" for i in range(1, DTLZ_N + 1))
    return {
        "zdt1": Problem(
            "zdt1", zdt_names, zdt1, ("f1", "f2"), ZDT_REFERENCE, _zdt_optimum(1 - 2 / 3), 60,
            "2 objectives, convex front",
        ),
        "zdt2": Problem(
            "zdt2", zdt_names, zdt2, ("f1", "f2"), ZDT_REFERENCE, _zdt_optimum(1 - 1 / 3), 60,
            "2 objectives, non-convex front",
        ),
        "dtlz2": Problem(
            "dtlz2", dtlz_names, dtlz2, ("f1", "f2", "f3"), DTLZ_REFERENCE, _dtlz2_optimum(),
            80, "3 objectives, spherical front",
        ),
    }


PROBLEMS: dict[str, Problem] = _problems()


# -- evaluating and scoring ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    losses: Losses
    """The objective values."""
    seconds: float
    """Virtual run time."""


class Evaluator:
    """Evaluates points of one run: the k-th call gets the k-th duration, whoever asked."""

    def __init__(self, problem: Problem, seed: int) -> None:
        self.problem = problem
        self._durations = random.Random(f"durations:{problem.key}:{seed}")
        self.calls = 0

    def __call__(self, params: Params) -> Outcome:
        self.calls += 1
        seconds = DURATION_MEDIAN_S * self._durations.lognormvariate(0.0, DURATION_SIGMA)
        return Outcome(self.problem.f(params), seconds)


def final_hypervolume(problem: Problem, evaluated: Evaluated) -> float:
    """The hypervolume of every point evaluated (the front a user would be shown)."""
    return hypervolume([losses for _, losses in evaluated], problem.reference)

