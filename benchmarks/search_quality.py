"""Search quality: dse's agents against Optuna's samplers, same budgets, same evaluations.

What is measured (one process run; every method sees the same problems, budgets and seeds):

* **Problems** (all minimized):

  - ``branin``: Branin on [-5, 10] x [0, 15]; f* = 0.397887.
  - ``hartmann6``: Hartmann-6 on [0, 1]^6; f* = -3.322368.
  - ``mixed``: a synthetic "kernel time" over integer tile sizes ``tile_m``, ``tile_n`` (16..256,
    step 16), a categorical ``layout`` (row, col, blocked) and a log-scaled ``lr`` in
    [1e-5, 1e-1]; each layout has its own best tiles and lr, ``blocked`` is the fastest;
    f* = 1.0 at tile_m=128, tile_n=64, blocked, lr=3e-3. The observed value carries Gaussian
    noise (sd 0.03, that is 3 % of the best time).
  - ``constrained``: Branin with the unknown constraint of Gelbart, Snoek and Adams (2014),
    (x1 - 2.5)^2 + (x2 - 7.5)^2 <= 50, which makes two of Branin's three minima infeasible;
    f* = 0.397887 at (pi, 2.275). An infeasible point is a *failed* evaluation: dse records a
    FAILED trial (the probe job exits 1), Optuna is told ``TrialState.FAIL``. Neither side is
    given constraint values (Optuna's ``constraints_func`` would need them), so both learn
    of the constraint only by failing.

* **Methods**: dse ``bayesian`` and dse ``random`` run through dse's real engine
  (``dse.build_engine`` + ``Engine.run()``) on the probe backend with a fake clock, a fresh
  workspace and durable SQLite record per run; results are read back from the record. Optuna
  (imported only here) ``TPESampler(multivariate=True, constant_liar=P > 1)`` and
  ``GPSampler`` (needs torch) run an ask/tell loop.

* **Parallelism**: P = 1; P = 4 ``waves`` (ask 4, evaluate, tell 4); P = 4 ``rolling`` (4
  workers; a worker asks as soon as its trial ends). Every evaluation takes a seeded
  log-normal virtual duration (median 60 s): the k-th evaluation of a run gets the k-th
  duration and the k-th noise draw, whoever asked for it, so rolling runs interleave the
  same way for every method. dse's engine runs them on a fake clock; Optuna's rolling runs
  are an event simulation in the same virtual time.

* **Score**: simple regret = f(x_best) - f*, where x_best is the evaluated, feasible point
  with the best *observed* (noisy) value and f is noiseless. Each table cell is the median
  over seeds. The ratio is dse's median over the better of Optuna's two medians in the same
  setting, max(dse, 1e-9) / max(optuna_best, 1e-9); below 1 dse is better.

  On the noisy function the regret is mostly decided by which near-optimal point drew the
  luckiest noise, so one seed's regret is nearly a coin toss: the medians of seeds 0-19 and
  20-39 of the same method differed by up to 1.7x. That function therefore runs 40 seeds by
  default (10 for the others). A second table gives, for it, the noiseless regret of the best
  point each run evaluated: what the search *found*, apart from what the noise let it
  recognise.

* **Latency**: the ``bayesian`` agent built directly (``cls(space, seed=0)``) on the
  Hartmann-6 and mixed spaces proposes 64 points (its start-up design), then observes those
  and 936 random points (1,000 observations) in one call and is timed on ``propose(4, [])``:
  three batches, each after observing the previous one; the slowest is reported. Target:
  under a second per batch.

A second table counts, per run, the points that repeat an earlier one (nearly, or exactly)
and the failed trials: it shows a method that keeps proposing where it already failed.

Runs are spread over ``--jobs`` processes (default: one per core); full mode takes about 16
minutes on 2 cores, ``--quick`` about 25 seconds. BLAS/OpenMP threads are set to 1 (unless
already set in the environment) so that parallel runs do not oversubscribe the cores: Optuna
recommends it for GPSampler.

Usage::

    python benchmarks/search_quality.py           # 10 seeds (40 noisy), P=1/4w/4r, ~16 min
    python benchmarks/search_quality.py --quick   # under a minute: 2 seeds, budget 25, P=4 waves
    python benchmarks/search_quality.py --seeds 3 --jobs 2 --no-gp

The last line printed is one JSON object: ``<function>_ratio_to_optuna_best`` per function
(dse ``bayesian`` at P = 4; the worse of waves and rolling), the same for ``random``,
``bayesian_latency_1000_s`` and the medians.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from _peers import BenchmarkError, import_optuna, table

import dse
from dse.testing import FakeClock, ProbeBackend, ProbeScript

Mode = Literal["waves", "rolling"]
Params = Mapping[str, Any]

WORK_DIR = Path(__file__).resolve().parent / ".work"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
DSE_METHODS = ("dse bayesian", "dse random")
OPTUNA_METHODS = ("optuna TPE", "optuna GP")
LATENCY_OBSERVATIONS = 1_000
LATENCY_BATCH = 4
LATENCY_OWN_POINTS = 64
LATENCY_TARGET_S = 1.0
# Longer than any trial: the probe's wait then jumps the fake clock straight to the next end,
# so each polling pass sees exactly the trials that ended (an event simulation, like Optuna's).
POLL_INTERVAL_S = 1e6
DURATION_MEDIAN_S = 60.0
DURATION_SIGMA = 0.5
# Within this distance (unit cube, categorical equal) of an earlier point counts as a repeat.
REPEAT_TOLERANCE = 1e-3
EPS = 1e-9
NOISY_SEEDS = 40
"""Default seeds for a function with noise (see the module docstring)."""


# -- problems ------------------------------------------------------------------------------


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


def always(_p: Params) -> bool:
    return True


def gelbart_disk(p: Params) -> bool:
    return (float(p["x1"]) - 2.5) ** 2 + (float(p["x2"]) - 7.5) ** 2 <= 50.0


@dataclass(frozen=True, slots=True)
class Problem:
    key: str
    """Name in the tables and the JSON keys."""
    space: Mapping[str, Any]
    """The dse ``[space]`` table (Optuna's suggestions are derived from it)."""
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


BRANIN_SPACE = {
    "x1": {"type": "float", "low": -5.0, "high": 10.0},
    "x2": {"type": "float", "low": 0.0, "high": 15.0},
}
PROBLEMS: dict[str, Problem] = {
    p.key: p
    for p in (
        Problem("branin", BRANIN_SPACE, branin, always, 0.397887357729738, 0.0, 40, 308.13),
        Problem(
            "hartmann6",
            {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(1, 7)},
            hartmann6,
            always,
            -3.32236801141551,
            0.0,
            100,
            0.0,
        ),
        Problem(
            "mixed",
            {
                "tile_m": {"type": "int", "low": 16, "high": 256, "step": 16},
                "tile_n": {"type": "int", "low": 16, "high": 256, "step": 16},
                "layout": list(_LAYOUTS),
                "lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
            },
            kernel_time,
            always,
            1.0,
            0.03,
            60,
            5.51,
        ),
        Problem(
            "constrained", BRANIN_SPACE, branin, gelbart_disk, 0.397887357729738, 0.0, 60, 308.13
        ),
    )
}


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


def simple_regret(problem: Problem, evaluated: list[tuple[Params, float | None]]) -> float:
    """f - f* at the feasible point with the best observed (noisy) value: the point a user
    would pick from the record."""
    feasible = [(value, params) for params, value in evaluated if value is not None]
    if not feasible:
        return problem.worst - problem.optimum
    _, best = min(feasible, key=lambda item: item[0])
    return max(problem.f(best) - problem.optimum, 0.0)


def found_regret(problem: Problem, evaluated: list[tuple[Params, float | None]]) -> float:
    """f - f* at the best feasible point evaluated, judged without noise: what the search
    found, whether or not the noise let it be recognised."""
    feasible = [params for params, value in evaluated if value is not None]
    if not feasible:
        return problem.worst - problem.optimum
    return max(min(problem.f(params) for params in feasible) - problem.optimum, 0.0)


def _unit(problem: Problem, params: Params) -> tuple[float | str, ...]:
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
        unit = _unit(problem, params)
        for other in seen:
            if all(_close(a, b) for a, b in zip(unit, other, strict=True)):
                near += 1
                exact += unit == other
                break
        seen.append(unit)
    return near, exact


# -- runs ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setting:
    parallelism: int
    mode: Mode

    @property
    def label(self) -> str:
        return "P=1" if self.parallelism == 1 else f"P={self.parallelism} {self.mode}"


@dataclass(frozen=True, slots=True)
class Task:
    method: str
    problem: str
    setting: Setting
    budget: int
    seed: int


@dataclass(frozen=True, slots=True)
class RunResult:
    task: Task
    regret: float
    found: float
    """Regret of the best point evaluated, without noise (:func:`found_regret`)."""
    trials: int
    failed: int
    repeats: int
    """Points near an earlier one (see :func:`repeats`)."""
    exact_repeats: int
    """Points equal to an earlier one."""
    seconds: float


_PLUGINS: dse.PluginManager | None = None


def _plugins() -> dse.PluginManager:
    global _PLUGINS
    if _PLUGINS is None:
        _PLUGINS = dse.PluginManager()
    return _PLUGINS


def run_dse(task: Task, agent: str) -> list[tuple[Params, float | None]]:
    """One campaign through dse's engine; return (params, observed value) per trial."""
    problem = PROBLEMS[task.problem]
    evaluate = Evaluator(problem, task.seed)

    def script(params: Params) -> ProbeScript:
        outcome = evaluate(params)
        if outcome.observed is None:
            return ProbeScript(state=dse.JobState.FAILED, exit_code=1, seconds=outcome.seconds)
        return ProbeScript(metrics={"value": outcome.observed}, seconds=outcome.seconds)

    with tempfile.TemporaryDirectory(prefix=f"dse-quality-{task.problem}-", dir=WORK_DIR) as tmp:
        workspace = Path(tmp)
        campaign = dse.campaign_from_dict(
            {
                "campaign": {
                    "name": f"{task.problem}-{agent}",
                    "agent": agent,
                    "mode": task.setting.mode,
                    "max_parallelism": task.setting.parallelism,
                    "max_trials": task.budget,
                    "seed": task.seed,
                    "poll_interval": POLL_INTERVAL_S,
                },
                "space": dict(problem.space),
                "objectives": [{"metric": "value", "direction": "minimize"}],
            },
            workspace=workspace,
        )
        clock = FakeClock()
        store = dse.Store(workspace / "dse.sqlite")
        try:
            engine = dse.build_engine(
                campaign,
                store=store,
                plugins=_plugins(),
                clock=clock,
                backend=ProbeBackend(script, clock=clock),
            )
            result = engine.run()
            rows = store.trials(result.campaign_id)
        finally:
            store.close()
    if result.status != "completed":
        raise BenchmarkError(
            f"dse {agent} on {task.problem} ({task.setting.label}, seed {task.seed}): ended"
            f" {result.status} ({result.end_reason})"
        )
    evaluated: list[tuple[Params, float | None]] = []
    for row in rows:
        params = row.params
        metrics = row.metrics or {}
        ok = row["status"] in ("completed", "cached") and "value" in metrics
        evaluated.append((params, float(metrics["value"]) if ok else None))
    if len(evaluated) != task.budget:
        raise BenchmarkError(
            f"dse {agent} on {task.problem} ({task.setting.label}, seed {task.seed}):"
            f" {len(evaluated)} trials recorded, expected {task.budget} ({result.end_reason})"
        )
    return evaluated


def _import_optuna() -> Any:
    return import_optuna("optuna scipy torch==2.13.0")


def _suggest(trial: Any, space: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in space.items():
        if isinstance(spec, list):
            out[name] = trial.suggest_categorical(name, spec)
        elif spec["type"] == "int":
            out[name] = trial.suggest_int(name, spec["low"], spec["high"], step=spec.get("step", 1))
        else:
            out[name] = trial.suggest_float(
                name, spec["low"], spec["high"], log=spec.get("log", False)
            )
    return out


def run_optuna(task: Task, sampler_name: str) -> list[tuple[Params, float | None]]:
    """One ask/tell run (waves, or an event simulation of rolling workers)."""
    optuna = _import_optuna()
    problem = PROBLEMS[task.problem]
    evaluate = Evaluator(problem, task.seed)
    parallel = task.setting.parallelism
    if sampler_name == "TPE":
        sampler = optuna.samplers.TPESampler(
            seed=task.seed, multivariate=True, constant_liar=parallel > 1
        )
    else:
        sampler = optuna.samplers.GPSampler(seed=task.seed)
    study = optuna.create_study(sampler=sampler, direction="minimize")
    evaluated: list[tuple[Params, float | None]] = []
    fail = optuna.trial.TrialState.FAIL

    def launch() -> tuple[Any, dict[str, Any], Outcome]:
        # Suggest at once: the next ask must see this trial's params (constant liar, qLogEI).
        trial = study.ask()
        params = _suggest(trial, problem.space)
        return trial, params, evaluate(params)

    def tell(trial: Any, params: dict[str, Any], outcome: Outcome) -> None:
        if outcome.observed is None:
            study.tell(trial, state=fail)
        else:
            study.tell(trial, outcome.observed)
        evaluated.append((params, outcome.observed))

    if task.setting.mode == "waves" or parallel == 1:
        while len(evaluated) < task.budget:
            wave = [launch() for _ in range(min(parallel, task.budget - len(evaluated)))]
            for trial, params, outcome in wave:
                tell(trial, params, outcome)
        return evaluated
    # Rolling: a worker asks as soon as its trial ends; trials ending together are told first.
    running: list[tuple[float, int, Any, dict[str, Any], Outcome]] = []
    asked = 0
    now = 0.0
    while asked < min(parallel, task.budget):
        trial, params, outcome = launch()
        heapq.heappush(running, (now + outcome.seconds, asked, trial, params, outcome))
        asked += 1
    while running:
        now, _, trial, params, outcome = heapq.heappop(running)
        tell(trial, params, outcome)
        while running and running[0][0] == now:
            _, _, trial, params, outcome = heapq.heappop(running)
            tell(trial, params, outcome)
        while len(running) < parallel and asked < task.budget:
            trial, params, outcome = launch()
            heapq.heappush(running, (now + outcome.seconds, asked, trial, params, outcome))
            asked += 1
    return evaluated


def _init_worker(with_gp: bool) -> None:
    """Load the plugins, Optuna (and torch) before the first run, so no run pays for it."""
    if not _plugins().agents:
        raise BenchmarkError("no dse agent is registered: install packages/agents")
    _import_optuna()
    if with_gp:
        import torch  # noqa: F401


def run_task(task: Task) -> RunResult:
    start = time.perf_counter()
    if task.method.startswith("dse "):
        evaluated = run_dse(task, task.method.removeprefix("dse "))
    else:
        evaluated = run_optuna(task, task.method.removeprefix("optuna "))
    seconds = time.perf_counter() - start
    problem = PROBLEMS[task.problem]
    near, exact = repeats(problem, [params for params, _ in evaluated])
    return RunResult(
        task=task,
        regret=simple_regret(problem, evaluated),
        found=found_regret(problem, evaluated),
        trials=len(evaluated),
        failed=sum(value is None for _, value in evaluated),
        repeats=near,
        exact_repeats=exact,
        seconds=seconds,
    )


# -- latency -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Latency:
    problem: str
    observe_s: float
    """Seconds of the one ``observe`` call with the 1,000 observations."""
    propose_s: tuple[float, ...]
    """Seconds of each timed ``propose(4, [])`` batch."""


def _observation(
    problem: Problem, params: Params, number: int, rng: random.Random
) -> dse.Observation:
    if not problem.feasible(params):
        return dse.Observation(
            params=params,
            status=dse.TrialStatus.FAILED,
            trial_number=number,
            failure=dse.FailureClass.NONZERO_EXIT,
        )
    value = problem.f(params) + (rng.gauss(0.0, problem.noise_sd) if problem.noise_sd else 0.0)
    return dse.Observation(
        params=params,
        status=dse.TrialStatus.COMPLETED,
        metrics={"value": value},
        score=value,
        trial_number=number,
    )


def measure_latency(agent: str, problem: Problem, batches: int = 3) -> Latency:
    space = dse.Space.from_dict(dict(problem.space))
    instance = _plugins().agent_class(agent)(space, seed=0)
    rng = random.Random(f"latency:{problem.key}")
    # As in a campaign, the agent's own first proposals (its start-up design) are among the
    # observations; without this the timed batches could still come from that design.
    points: list[Params] = []
    while len(points) < LATENCY_OWN_POINTS:
        got = instance.propose(LATENCY_BATCH, [])
        if not got:
            break
        points.extend(space.coerce(params) for params in got)
    while len(points) < LATENCY_OBSERVATIONS:
        points.append(space.sample(rng))
    history = [_observation(problem, params, i + 1, rng) for i, params in enumerate(points)]
    start = time.perf_counter()
    instance.observe(history)
    observe_s = time.perf_counter() - start
    timings: list[float] = []
    number = LATENCY_OBSERVATIONS
    for _ in range(batches):
        start = time.perf_counter()
        proposals = instance.propose(LATENCY_BATCH, [])
        timings.append(time.perf_counter() - start)
        batch = []
        for params in proposals:
            number += 1
            batch.append(_observation(problem, space.coerce(params), number, rng))
        instance.observe(batch)
    return Latency(problem.key, observe_s, tuple(timings))


# -- report --------------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if value == 0:
        return "0"
    return f"{value:.3g}" if abs(value) >= 1e-3 else f"{value:.2e}"


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


def _ratio(dse_median: float, optuna_best: float) -> float:
    return max(dse_median, EPS) / max(optuna_best, EPS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 seeds, budget 25, P=4 waves only (under a minute)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        help=f"seeds per cell (default 10, {NOISY_SEEDS} for a noisy function; quick 2)",
    )
    parser.add_argument("--budget", type=int, help="trials per run for every function")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="runs in parallel (default: cores)"
    )
    parser.add_argument("--no-gp", action="store_true", help="leave Optuna's GPSampler out")
    parser.add_argument(
        "--functions",
        nargs="+",
        choices=sorted(PROBLEMS),
        default=list(PROBLEMS),
        help="functions to run (default: all four)",
    )
    args = parser.parse_args(argv)
    for var in THREAD_VARS:
        # Before numpy or torch is imported (plugins import numpy): inherited by the workers.
        os.environ.setdefault(var, "1")
    WORK_DIR.mkdir(exist_ok=True)

    seeds = {
        key: args.seeds or (2 if args.quick else NOISY_SEEDS if PROBLEMS[key].noise_sd else 10)
        for key in args.functions
    }
    settings = (
        [Setting(4, "waves")]
        if args.quick
        else [Setting(1, "waves"), Setting(4, "waves"), Setting(4, "rolling")]
    )
    with_gp = not args.no_gp
    budgets = {
        key: args.budget or (25 if args.quick else PROBLEMS[key].budget) for key in args.functions
    }
    try:
        optuna = _import_optuna()
        if with_gp:
            try:
                import torch  # noqa: F401  (GPSampler needs it: fail before the runs)
            except ImportError:
                raise BenchmarkError(
                    "GPSampler needs torch: `.venv/bin/pip install torch==2.13.0` (or --no-gp)"
                ) from None
    except BenchmarkError as exc:
        print(f"search_quality: error: {exc}", file=sys.stderr)
        return 1

    agents = _plugins().agents
    have_bayesian = "bayesian" in agents
    methods = [m for m in DSE_METHODS if have_bayesian or m != "dse bayesian"]
    methods += ["optuna TPE", *(["optuna GP"] if with_gp else [])]
    tasks = [
        Task(method, key, setting, budgets[key], seed)
        for key in args.functions
        for setting in settings
        for method in methods
        for seed in range(seeds[key])
    ]

    print(
        f"running {len(tasks)} runs ({', '.join(methods)}) on {args.jobs} worker(s) ...",
        file=sys.stderr,
        flush=True,
    )
    started = time.perf_counter()
    results: list[RunResult] = []
    try:
        if args.jobs > 1:
            import multiprocessing

            # spawn: torch and SQLite connections do not survive a fork well.
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(
                max_workers=args.jobs,
                mp_context=context,
                initializer=_init_worker,
                initargs=(with_gp,),
            ) as pool:
                results = list(pool.map(run_task, tasks))
        else:
            _init_worker(with_gp)
            results = [run_task(task) for task in tasks]
        latencies: list[Latency] = []
        if have_bayesian:
            print("timing bayesian propose after 1,000 observations ...", file=sys.stderr)
            latencies = [measure_latency("bayesian", PROBLEMS[k]) for k in ("hartmann6", "mixed")]
    except BenchmarkError as exc:
        print(f"search_quality: error: {exc}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - started

    cells: dict[tuple[str, str, str], list[RunResult]] = {}
    for result in results:
        t = result.task
        cells.setdefault((t.problem, t.setting.label, t.method), []).append(result)

    def median(key: str, label: str, method: str) -> float | None:
        runs = cells.get((key, label, method))
        return statistics.median(r.regret for r in runs) if runs else None

    print(
        "search quality: median simple regret over "
        + ", ".join(f"{n} seed(s) ({k})" for k, n in seeds.items())
        + f", {sys.platform}, Python"
        f" {sys.version.split()[0]}, dse {dse.__version__}, optuna {optuna.__version__},"
        f" threads {os.environ.get('OMP_NUM_THREADS')}, {wall:.0f} s"
    )
    if not have_bayesian:
        print("bayesian: not installed (no agent registered as 'bayesian'); dse random only")
    if not with_gp:
        print("optuna GP: skipped (--no-gp)")
    p4 = [s.label for s in settings if s.parallelism > 1]
    summary: dict[str, Any] = {}
    medians: dict[str, dict[str, dict[str, float | None]]] = {}
    ratios: dict[str, dict[str, dict[str, float]]] = {}
    found: dict[str, dict[str, dict[str, float | None]]] = {}
    all_methods = [*DSE_METHODS, *OPTUNA_METHODS]
    for key in args.functions:
        problem = PROBLEMS[key]
        medians[key] = {
            s.label: {m: _round(median(key, s.label, m)) for m in methods} for s in settings
        }
        print()
        print(
            f"{key}: budget {budgets[key]}, {seeds[key]} seeds, f* = {problem.optimum:.6g}"
            + (f", noise sd {problem.noise_sd}" if problem.noise_sd else "")
            + (", unknown constraint (infeasible = failed trial)" if key == "constrained" else "")
        )
        body: list[tuple[str, ...]] = []
        for method in all_methods:
            if method not in methods:
                reason = "not installed" if method == "dse bayesian" else "skipped"
                body.append((method, *(reason for _ in settings), "-"))
                continue
            runs = [r for s in settings for r in cells[(key, s.label, method)]]
            body.append((
                method,
                *(_fmt(medians[key][s.label][method]) for s in settings),
                f"{sum(r.seconds for r in runs):.1f}",
            ))
        print(table(("median regret", *(s.label for s in settings), "run s"), body))
        if problem.noise_sd:
            # What the search found, told apart from what the noise let it recognise.
            found[key] = {
                s.label: {
                    m: _round(statistics.median(r.found for r in cells[(key, s.label, m)]))
                    for m in methods
                }
                for s in settings
            }
            print(table(
                ("best evaluated, noiseless", *(s.label for s in settings)),
                [(m, *(_fmt(found[key][s.label][m]) for s in settings)) for m in methods],
            ))
        ratios[key] = {}
        for method in (m for m in DSE_METHODS if m in methods):
            ratios[key][method] = {}
            for label in p4:
                best = min(
                    v for m in OPTUNA_METHODS if (v := medians[key][label].get(m)) is not None
                )
                dse_median = medians[key][label][method]
                assert dse_median is not None
                ratios[key][method][label] = round(_ratio(dse_median, best), 4)
            worse = max(ratios[key][method].values())
            parts = ", ".join(f"{lbl} {r:.3g}" for lbl, r in ratios[key][method].items())
            print(f"{method} / optuna best (same setting): {parts}; worse: {worse:.3g}")
            name = method.removeprefix("dse ")
            prefix = key if name == "bayesian" else f"{key}_{name}"
            summary[f"{prefix}_ratio_to_optuna_best"] = round(worse, 4)
        if not have_bayesian:
            summary[f"{key}_ratio_to_optuna_best"] = None

    print()
    print(
        "repeats, mean per run: near (within 1e-3 of an earlier point in the unit cube) /"
        " exact (equal to one; a cache hit in dse) / failed trials"
    )
    body = []
    for key in args.functions:
        for method in methods:
            row: list[str] = [f"{key} / {method}"]
            for s in settings:
                runs = cells[(key, s.label, method)]
                row.append(" / ".join(
                    f"{statistics.fmean(getattr(r, field) for r in runs):.1f}"
                    for field in ("repeats", "exact_repeats", "failed")
                ))
            body.append(tuple(row))
    print(table(("function / method", *(f"{s.label} near/exact/fail" for s in settings)), body))

    print()
    latency_s: float | None = None
    if latencies:
        for lat in latencies:
            print(
                f"bayesian latency ({lat.problem}, {LATENCY_OBSERVATIONS:,} observations):"
                f" observe {lat.observe_s:.3f} s, propose({LATENCY_BATCH}) "
                + ", ".join(f"{s:.3f}" for s in lat.propose_s)
                + " s"
            )
        latency_s = max(max(lat.propose_s) for lat in latencies)
        met = latency_s < LATENCY_TARGET_S
        print(
            f"target: propose under {LATENCY_TARGET_S:.0f} s per batch at"
            f" {LATENCY_OBSERVATIONS:,} observations: {'met' if met else 'NOT met'}"
            f" ({latency_s:.3f} s)"
        )
    else:
        print("bayesian latency: not measured (bayesian: not installed)")
    bayes = [summary.get(f"{k}_ratio_to_optuna_best") for k in args.functions]
    targets_met: bool | None = None
    if have_bayesian and all(r is not None for r in bayes):
        targets_met = all(r is not None and r <= 1.0 for r in bayes)
        print(
            "target: dse bayesian at or below Optuna's best on every function at P=4:"
            f" {'met' if targets_met else 'NOT met'}"
        )
    summary.update({
        "bayesian_latency_1000_s": None if latency_s is None else round(latency_s, 4),
        "bayesian_installed": have_bayesian,
        "gp_included": with_gp,
        "ratio_setting": "worse of " + " and ".join(p4) if len(p4) > 1 else p4[0],
        "targets_met": targets_met,
        "medians": medians,
        "ratios": ratios,
        "found_medians": found,
        "budgets": budgets,
        "seeds": seeds,
        "settings": [s.label for s in settings],
        "quick": bool(args.quick),
        "optuna_version": optuna.__version__,
        "wall_s": round(wall, 1),
    })
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
