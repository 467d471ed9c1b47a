"""The problems of search_quality.py: objectives, unknown constraints, and how a run is scored.

Every problem is minimised; its :class:`Problem` says f*, the budget of a full run, the noise
and the value charged when a run found nothing feasible. The module docstring of
search_quality.py describes each problem; the numbers that fix the shifted and rotated ones are
drawn here from seeded generators, so they are the same in every process and every run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Params = Mapping[str, Any]
Vector = tuple[float, ...]

# Within this distance (unit cube, categorical equal) of an earlier point counts as a repeat.
REPEAT_TOLERANCE = 1e-3
DURATION_MEDIAN_S = 60.0
DURATION_SIGMA = 0.5


@dataclass(frozen=True, slots=True)
class Problem:
    key: str
    """Name in the tables and the JSON keys."""
    space: Mapping[str, Any]
    """The dse ``[space]`` table (Optuna's and Ax's parameters are derived from it)."""
    f: Callable[[Params], float]
    """Noiseless objective."""
    feasible: Callable[[Params], bool]
    """Unknown constraint: an infeasible point's evaluation fails."""
    optimum: float
    """f* over the feasible set."""
    noise_sd: float
    """Standard deviation of the Gaussian noise on the observed value."""
    budget: int
    """Trials per run in full mode."""
    worst: float
    """Value whose regret is charged when a run found no feasible point (f's maximum)."""
    edge: Callable[[Params], float] | None = None
    """Distance in the unit cube from a feasible point to the edge of the failure region (a
    problem with failures only)."""
    description: str = ""
    """One line for the table's heading."""

    @property
    def fails(self) -> bool:
        return self.edge is not None


# -- helpers -------------------------------------------------------------------------------


def _rotation(dim: int, rng: random.Random) -> tuple[Vector, ...]:
    """A random orthogonal matrix (Gram-Schmidt on Gaussian rows)."""
    rows: list[list[float]] = []
    while len(rows) < dim:
        v = [rng.gauss(0.0, 1.0) for _ in range(dim)]
        for r in rows:
            dot = sum(a * b for a, b in zip(v, r, strict=True))
            v = [a - dot * b for a, b in zip(v, r, strict=True)]
        norm = math.sqrt(sum(a * a for a in v))
        if norm > 1e-6:
            rows.append([a / norm for a in v])
    return tuple(tuple(r) for r in rows)


def _rotate(matrix: Sequence[Vector], v: Sequence[float]) -> list[float]:
    return [sum(a * b for a, b in zip(row, v, strict=True)) for row in matrix]


def _vector(p: Params, names: Sequence[str]) -> list[float]:
    return [float(p[n]) for n in names]


def _box(names: Sequence[str], low: float, high: float) -> dict[str, Any]:
    return {n: {"type": "float", "low": low, "high": high} for n in names}


def _always(_p: Params) -> bool:
    return True


# -- the four original problems ------------------------------------------------------------


def branin(p: Params) -> float:
    x1, x2 = float(p["x1"]), float(p["x2"])
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


_H6_ALPHA = (1.0, 1.2, 3.0, 3.2)
_H6_A = (
    (10.0, 3.0, 17.0, 3.5, 1.7, 8.0),
    (0.05, 10.0, 17.0, 0.1, 8.0, 14.0),
    (3.0, 3.5, 1.7, 10.0, 17.0, 8.0),
    (17.0, 8.0, 0.05, 10.0, 0.1, 14.0),
)
_H6_P = (
    (0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886),
    (0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991),
    (0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650),
    (0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381),
)


def hartmann6(p: Params) -> float:
    x = [float(p[f"x{i}"]) for i in range(1, 7)]
    total = 0.0
    for alpha, a_row, p_row in zip(_H6_ALPHA, _H6_A, _H6_P, strict=True):
        inner = sum(a * (xi - pi) ** 2 for a, xi, pi in zip(a_row, x, p_row, strict=True))
        total += alpha * math.exp(-inner)
    return -total


# layout -> (time at its best point, best tile_m, best tile_n, best lr)
_LAYOUTS: dict[str, tuple[float, int, int, float]] = {
    "row": (1.15, 64, 192, 1e-3),
    "col": (1.30, 32, 128, 1e-2),
    "blocked": (1.00, 128, 64, 3e-3),
}


def kernel_time(p: Params) -> float:
    """Smooth in log2(tile) and log10(lr), with a tile interaction; minimum 1.0 (blocked)."""
    base, best_m, best_n, best_lr = _LAYOUTS[str(p["layout"])]
    u = math.log2(int(p["tile_m"]) / best_m)
    v = math.log2(int(p["tile_n"]) / best_n)
    w = math.log10(float(p["lr"]) / best_lr)
    return base * (1.0 + 0.15 * (u * u + v * v + 0.8 * u * v) + 0.1 * w * w)


_DISK_CENTRE = (2.5, 7.5)
_DISK_RADIUS = math.sqrt(50.0)
_BRANIN_SIDE = 15.0
"""Both of Branin's ranges are 15 wide, so the disk is a disk in the unit square too."""


def gelbart_disk(p: Params) -> bool:
    return (float(p["x1"]) - 2.5) ** 2 + (float(p["x2"]) - 7.5) ** 2 <= 50.0


def gelbart_edge(p: Params) -> float:
    dx, dy = float(p["x1"]) - _DISK_CENTRE[0], float(p["x2"]) - _DISK_CENTRE[1]
    return abs(_DISK_RADIUS - math.hypot(dx, dy)) / _BRANIN_SIDE


# -- levy7: a shifted, rotated 7-D Levy function --------------------------------------------

LEVY_NAMES = tuple(f"x{i}" for i in range(1, 8))
_LEVY_RNG = random.Random("search_quality:levy7")
LEVY_ROTATION = _rotation(len(LEVY_NAMES), _LEVY_RNG)
LEVY_SHIFT: Vector = tuple(
    round(_LEVY_RNG.choice((-1, 1)) * _LEVY_RNG.uniform(1.0, 3.5), 4) for _ in LEVY_NAMES
)
"""The optimum: each coordinate 1 to 3.5 from the centre of [-5, 5], away from the centre and
from the box's diagonals (the rotation moves Levy's own ridges off the axes too)."""


def levy7(p: Params) -> float:
    """Levy's function of w = 1 + R (x - shift) / 4: 0 at x = shift, ridges of sin^2 in every
    rotated direction."""
    z = _rotate(LEVY_ROTATION, [a - s for a, s in zip(_vector(p, LEVY_NAMES), LEVY_SHIFT,
                                                           strict=True)])
    w = [1.0 + zi / 4.0 for zi in z]
    total = math.sin(math.pi * w[0]) ** 2
    for wi in w[:-1]:
        total += (wi - 1) ** 2 * (1 + 10 * math.sin(math.pi * wi + 1) ** 2)
    last = w[-1]
    return total + (last - 1) ** 2 * (1 + math.sin(2 * math.pi * last) ** 2)


# -- training: a noisy mixed space ---------------------------------------------------------

# optimizer -> (loss at its best point, best log10(lr), best layer count)
_OPTIMIZERS: dict[str, tuple[float, float, int]] = {
    "sgd": (1.02, -1.0, 3),
    "momentum": (0.92, -1.8, 4),
    "adam": (0.85, -3.0, 6),
    "adamw": (0.80, -3.3, 11),
}
# schedule -> (added loss, shift of the best log10(lr), best dropout)
_SCHEDULES: dict[str, tuple[float, float, float]] = {
    "constant": (0.06, -0.4, 0.35),
    "cosine": (0.00, 0.4, 0.10),
    "step": (0.03, 0.0, 0.25),
}
TRAINING_NOISE_SD = 0.02
"""2.5 % of f* = 0.8."""


def training_loss(p: Params) -> float:
    """A synthetic validation loss; the best learning rate depends on the optimizer and the
    schedule, the best batch size on the learning rate (a linear scaling rule), the best depth
    on the optimizer and the best dropout on the schedule. f* = 0.8 (adamw, cosine, lr 10^-2.9,
    11 layers, batch 32, dropout 0.1): no best value is the centre of its range (Ax's first
    trial is the centre of the space)."""
    base, lr_best, layers_best = _OPTIMIZERS[str(p["optimizer"])]
    extra, lr_shift, dropout_best = _SCHEDULES[str(p["schedule"])]
    dlr = math.log10(float(p["lr"])) - (lr_best + lr_shift)
    batch_best = 5.0 + 1.5 * dlr
    dbatch = math.log2(int(p["batch"])) - batch_best
    dlayers = int(p["layers"]) - layers_best
    ddrop = float(p["dropout"]) - dropout_best
    return (
        base + extra + 0.12 * dlr * dlr + 0.012 * dlayers * dlayers + 0.03 * dbatch * dbatch
        + 0.8 * ddrop * ddrop
    )


# -- edge4: the optimum 0.03 inside the edge of a failure region ----------------------------

EDGE_NAMES = ("x1", "x2", "x3", "x4")
EDGE_CENTRE: Vector = (0.85, 0.2, 0.75, 0.6)
"""Centre of the failure ball (inside the cube, off its centre)."""
EDGE_RADIUS = 0.66
"""The ball fails 33 % of the unit cube (Monte Carlo: :func:`failed_fraction`)."""
EDGE_INSIDE = 0.03
"""How far inside the feasible side of the edge the optimum lies."""
_EDGE_DIRECTION = (-0.62, 0.45, -0.25, -0.3)
_EDGE_NORM = math.sqrt(sum(a * a for a in _EDGE_DIRECTION))
EDGE_OPTIMUM: Vector = tuple(
    c + (EDGE_RADIUS + EDGE_INSIDE) * a / _EDGE_NORM
    for c, a in zip(EDGE_CENTRE, _EDGE_DIRECTION, strict=True)
)
EDGE_DECOY: Vector = (0.15, 0.85, 0.2, 0.25)
"""A second, shallower basin far from the edge: where a search that fears the edge settles."""
_EDGE_WIDTH = 0.16
_DECOY_WIDTH = 0.15
_DECOY_DEPTH = 0.8
_EDGE_BOWL = 0.3


def _distance(a: Sequence[float], b: Sequence[float]) -> float:
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))


def edge_feasible(p: Params) -> bool:
    return _distance(_vector(p, EDGE_NAMES), EDGE_CENTRE) >= EDGE_RADIUS


def edge_distance(p: Params) -> float:
    return abs(_distance(_vector(p, EDGE_NAMES), EDGE_CENTRE) - EDGE_RADIUS)


def edge_objective(p: Params) -> float:
    """A bowl around the optimum, minus the larger of two Gaussian bumps: the optimum's (depth
    1) and a decoy's (depth 0.8). f* = -1 at :data:`EDGE_OPTIMUM`; at most 1.2."""
    x = _vector(p, EDGE_NAMES)
    d_opt = _distance(x, EDGE_OPTIMUM)
    d_decoy = _distance(x, EDGE_DECOY)
    bump = max(
        math.exp(-(d_opt**2) / (2 * _EDGE_WIDTH**2)),
        _DECOY_DEPTH * math.exp(-(d_decoy**2) / (2 * _DECOY_WIDTH**2)),
    )
    return _EDGE_BOWL * d_opt**2 - bump


def random_point(space: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """A point drawn uniformly from *space* (a dse ``[space]`` table): log scale where
    declared, integers on their step, categoricals by choice."""
    out: dict[str, Any] = {}
    for name, spec in space.items():
        if isinstance(spec, list):
            out[name] = rng.choice(spec)
            continue
        low, high = spec["low"], spec["high"]
        if spec.get("log"):
            value = math.exp(rng.uniform(math.log(low), math.log(high)))
        else:
            value = rng.uniform(low, high)
        if spec["type"] == "int":
            step = spec.get("step", 1)
            value = int(min(max(low + round((value - low) / step) * step, low), high))
        out[name] = value
    return out


def failed_fraction(problem: Problem, points: int = 200_000, seed: int = 0) -> float:
    """The share of the space where *problem*'s trials fail (Monte Carlo)."""
    rng = random.Random(seed)
    names = list(problem.space)
    fails = 0
    for _ in range(points):
        p = {n: rng.uniform(problem.space[n]["low"], problem.space[n]["high"]) for n in names}
        fails += not problem.feasible(p)
    return fails / points


# -- embedded20: 5 rotated Styblinski-Tang coordinates among 20 -----------------------------

EMB_NAMES = tuple(f"x{i:02d}" for i in range(1, 21))
_EMB_RNG = random.Random("search_quality:embedded20")
_EMB_ORDER = list(range(20))
_EMB_RNG.shuffle(_EMB_ORDER)
EMB_ACTIVE = tuple(sorted(_EMB_ORDER[:5]))
"""The five coordinates the multimodal part reads."""
EMB_WEAK = tuple(sorted(_EMB_ORDER[5:10]))
"""Five coordinates with a small quadratic effect; the other ten have none."""
EMB_ROTATION = _rotation(5, _EMB_RNG)
EMB_WEAK_BEST: Vector = tuple(round(_EMB_RNG.uniform(-3.0, 3.0), 4) for _ in EMB_WEAK)
EMB_OPTIMUM: Vector = tuple(
    round(_EMB_RNG.choice((-1, 1)) * _EMB_RNG.uniform(1.0, 3.5), 4) for _ in EMB_ACTIVE
)
"""The active coordinates at the optimum: 1 to 3.5 from the centre of [-5, 5] each; the 31
other basins of the rotated function lie elsewhere, none on a symmetric point of the box."""
_ST_ARGMIN = -2.903534027771177
_ST_MIN_1D = 0.5 * (_ST_ARGMIN**4 - 16 * _ST_ARGMIN**2 + 5 * _ST_ARGMIN)


def embedded20(p: Params) -> float:
    """Styblinski-Tang of R (x_active - optimum) + its argmin, plus 0.05 (x_weak - best)^2 per
    weak coordinate; minus 5 times its 1-D minimum, so f* = 0 at :data:`EMB_OPTIMUM`."""
    x = _vector(p, EMB_NAMES)
    moved = [x[i] - o for i, o in zip(EMB_ACTIVE, EMB_OPTIMUM, strict=True)]
    z = [zi + _ST_ARGMIN for zi in _rotate(EMB_ROTATION, moved)]
    st = sum(0.5 * (zi**4 - 16 * zi**2 + 5 * zi) for zi in z) - 5 * _ST_MIN_1D
    weak = sum(0.05 * (x[i] - b) ** 2 for i, b in zip(EMB_WEAK, EMB_WEAK_BEST, strict=True))
    return st + weak


# -- the table -----------------------------------------------------------------------------

BRANIN_SPACE = {
    "x1": {"type": "float", "low": -5.0, "high": 10.0},
    "x2": {"type": "float", "low": 0.0, "high": 15.0},
}


def _problems() -> dict[str, Problem]:
    return {
        p.key: p
        for p in (
            Problem("branin", BRANIN_SPACE, branin, _always, 0.397887357729738, 0.0, 40, 308.13),
            Problem(
                "hartmann6",
                _box([f"x{i}" for i in range(1, 7)], 0.0, 1.0),
                hartmann6, _always, -3.32236801141551, 0.0, 100, 0.0,
            ),
            Problem(
                "mixed",
                {
                    "tile_m": {"type": "int", "low": 16, "high": 256, "step": 16},
                    "tile_n": {"type": "int", "low": 16, "high": 256, "step": 16},
                    "layout": list(_LAYOUTS),
                    "lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
                },
                kernel_time, _always, 1.0, 0.03, 60, 5.51,
                description="noise sd 0.03",
            ),
            Problem(
                "constrained", BRANIN_SPACE, branin, gelbart_disk, 0.397887357729738, 0.0, 60,
                308.13, edge=gelbart_edge,
                description="unknown constraint (infeasible = failed trial)",
            ),
            Problem(
                "levy7", _box(LEVY_NAMES, -5.0, 5.0), levy7, _always, 0.0, 0.0, 100, 200.0,
                description="shifted, rotated Levy",
            ),
            Problem(
                "training",
                {
                    "optimizer": list(_OPTIMIZERS),
                    "schedule": list(_SCHEDULES),
                    "layers": {"type": "int", "low": 1, "high": 16},
                    "batch": {"type": "int", "low": 8, "high": 512, "log": True},
                    "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
                    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
                },
                training_loss, _always, 0.8, TRAINING_NOISE_SD, 80, 6.0,
                description=f"noise sd {TRAINING_NOISE_SD}",
            ),
            Problem(
                "edge4", _box(EDGE_NAMES, 0.0, 1.0), edge_objective, edge_feasible, -1.0, 0.0,
                60, 1.2, edge=edge_distance, description=(
                    f"failing ball on 33 % of the cube, optimum {EDGE_INSIDE} inside its edge"
                ),
            ),
            Problem(
                "embedded20", _box(EMB_NAMES, -5.0, 5.0), embedded20, _always, 0.0, 0.0, 160,
                6e5, description="Styblinski-Tang on 5 of 20 coordinates",
            ),
        )
    }


PROBLEMS: dict[str, Problem] = _problems()
NEW_PROBLEMS = ("levy7", "training", "edge4", "embedded20")


# -- evaluating and scoring ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    observed: float | None
    """Observed (noisy) value, ``None`` for a failed (infeasible) evaluation."""
    seconds: float
    """Virtual run time."""


class Evaluator:
    """Evaluates points of one run: the k-th call gets the k-th duration and noise draw."""

    def __init__(self, problem: Problem, seed: int) -> None:
        self.problem = problem
        self._durations = random.Random(f"durations:{problem.key}:{seed}")
        self._noise = random.Random(f"noise:{problem.key}:{seed}")
        self.calls = 0

    def __call__(self, params: Params) -> Outcome:
        self.calls += 1
        seconds = DURATION_MEDIAN_S * self._durations.lognormvariate(0.0, DURATION_SIGMA)
        noise = self._noise.gauss(0.0, self.problem.noise_sd) if self.problem.noise_sd else 0.0
        if not self.problem.feasible(params):
            return Outcome(None, seconds)
        return Outcome(self.problem.f(params) + noise, seconds)


Evaluated = list[tuple[Params, float | None]]


def best_point(evaluated: Evaluated) -> Params | None:
    """The feasible point with the best observed (noisy) value: what a user would pick."""
    feasible = [(value, params) for params, value in evaluated if value is not None]
    if not feasible:
        return None
    return min(feasible, key=lambda item: item[0])[1]


def simple_regret(problem: Problem, evaluated: Evaluated) -> float:
    """f - f* at :func:`best_point`."""
    best = best_point(evaluated)
    if best is None:
        return problem.worst - problem.optimum
    return max(problem.f(best) - problem.optimum, 0.0)


def found_regret(problem: Problem, evaluated: Evaluated) -> float:
    """f - f* at the best feasible point evaluated, judged without noise: what the search
    found, whether or not the noise let it be recognised."""
    feasible = [params for params, value in evaluated if value is not None]
    if not feasible:
        return problem.worst - problem.optimum
    return max(min(problem.f(params) for params in feasible) - problem.optimum, 0.0)


def unit(problem: Problem, params: Params) -> tuple[float | str, ...]:
    """*params* in the unit cube (log scale where declared); categoricals as they are."""
    out: list[float | str] = []
    for name, spec in problem.space.items():
        value = params[name]
        if isinstance(spec, list):
            out.append(str(value))
        elif spec.get("log"):
            lo, hi = math.log(spec["low"]), math.log(spec["high"])
            out.append((math.log(float(value)) - lo) / (hi - lo))
        else:
            out.append((float(value) - spec["low"]) / (spec["high"] - spec["low"]))
    return tuple(out)


def _close(a: float | str, b: float | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return abs(a - b) <= REPEAT_TOLERANCE


def repeats(problem: Problem, points: list[Params]) -> tuple[int, int]:
    """(near, exact): points within REPEAT_TOLERANCE of an earlier point of the run, and
    points equal to one (in dse, a cache hit)."""
    seen: list[tuple[float | str, ...]] = []
    near = exact = 0
    for params in points:
        u = unit(problem, params)
        for other in seen:
            if all(_close(a, b) for a, b in zip(u, other, strict=True)):
                near += 1
                exact += u == other
                break
        seen.append(u)
    return near, exact
