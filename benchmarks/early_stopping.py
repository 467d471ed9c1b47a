"""Early stopping: compute to reach a target regret, dse's stopping rules against Optuna's
pruners and against no stopping, on real learning curves and on a synthetic family; and dse's
population based training against Ray Tune's on a workload with a schedule to discover.

What is measured (one process run; every method sees the same configs, in the same order, at
the same parallelism):

* **Workloads** (all minimise a loss; one step is one unit of work):

  - ``mlp``: a one-hidden-layer network trained with numpy on scikit-learn's digits
    (``_es_mlp.py``): learning rate, L2 penalty, hidden width and minibatch size; one step is
    one epoch (5-30 ms), the value is the validation cross-entropy. Deterministic: a config's
    curve is the same in every method.
  - ``synthetic``: a family of parametric curves with noise (``_es_curve.py``) where configs
    that learn fast plateau higher, so curves cross and the early ranking is imperfect (the
    best config at step 81 is in the median at rank fraction 0.14 at step 1); a dse trial
    sleeps ``--step-ms`` per step as its work (``STEP_MS``, 50).
  - ``schedule``: the expected loss of SGD on a noisy quadratic (``_es_schedule.py``, whose
    docstring gives the constants and why), one param ``lr``; a step is 5 updates and sleeps
    ``--step-ms``. A large ``lr`` gets down fast to a high noise floor, a small one too slowly
    to a low one: no fixed ``lr`` reaches the best loss at step 40 (the best fixed one ends
    2.47 times above it), a decaying schedule does. Deterministic.

* **Configs**: per seed, the first N proposals of dse's ``random`` agent with that seed; dse's
  campaigns run that agent with that seed (the record is checked to hold those configs in that
  order), Optuna's studies get them enqueued in that order.

* **Methods**: dse on the local backend, every trial a real process that saves a checkpoint
  before it reports each step (``dse.trial.report_progress``) and resumes from it: without
  ``[stopping]`` (``no stopping``, which is also the reference full sweep) and with the
  ``median``, ``asha`` and ``hyperband`` rules (min_step 1, reduction factor 3, promotion on).
  Optuna (the peer, in the same run): ``MedianPruner`` (5 startup trials),
  ``SuccessiveHalvingPruner`` and ``HyperbandPruner`` (min resource 1, reduction factor 3,
  max resource = the full run) over the same curves as an objective stepped in process: the
  synthetic family as a function, the mlp by training the same network (its values are checked
  against dse's). Optuna's P parallel workers are simulated in lockstep: each running trial
  advances one step per tick, and a freed worker takes the next enqueued config at once.

  On ``schedule`` the methods are population based training (PBT) and the fixed rates:
  ``dse pbt`` (``[stopping] rule = "pbt"``: population 8, interval 4, quantile 0.25, factors
  0.8 and 1.2, resample probability 0.25, seed = the seed; max_parallelism 8, the population
  capping the proposals), ``ray tune pbt`` (Ray Tune's ``PopulationBasedTraining`` with the
  same options over a function trainable of the same workload, the same 8 initial configs all
  running at once: ``_es_raytune.py``), Optuna's pruners over the fixed rates (Optuna cannot
  change a rate during a trial: what a schedule buys), and ``no stopping``, the 8 fixed rates
  run to the end. Both PBTs replace a member judged in the bottom quantile by a copy of a top
  member's checkpoint with perturbed params: dse as a new trial (a child), Ray by restarting
  the same trial from the donor's checkpoint (``stopped``: members replaced, ``promoted``:
  copies started).

* **Compute**: steps actually run, counted alike for both. For dse it is read from the record:
  per attempt, the steps it reported beyond where it resumed from (its first reported step less
  one, or the previous attempt's last step if that is lower: a step checkpointed but not
  reported before a stop counts once, a step redone counts twice), so a promotion neither
  counts the work up to its rung again nor is free. Steps a trial ran after the rule's verdict
  and before its process ended count (a real cost of deciding between polling passes: the
  ``late`` column). For Optuna it is the number of ``report`` calls. A PBT copy (dse's child,
  a Ray trial restarted from a donor's checkpoint) resumed from its first reported step less
  one: the donor's steps are not counted again (``_es_pbt.py``); for Ray every reported
  iteration of every trial is one step.

* **Regret** of a run at a moment: the true final value of the config it would pick then (the
  fully evaluated config with the best observed final value), less the best achievable. For the
  synthetic family the true value is noiseless and the best achievable is the family's optimum
  over the whole space (so no stopping has a regret too: the best of N sampled configs); for the
  mlp the best achievable is the best final value of the reference full sweep of the same
  configs (dse without stopping), so no stopping's regret is 0. On ``schedule`` a run's pick
  is the member with the best value at step 40 so far (the value is the truth: no noise), and
  the best achievable is the loss of the optimal schedule (5.06e-4).

* **Target regret** (per workload and seed): the final regret of no stopping, which saw every
  config to the end, plus 1 % of the best achievable value (about half the synthetic noise's
  sd: configs closer than that are told apart by no single evaluation, and no stopping too picks
  by observed values). **Compute to target**: the compute the run had spent when its pick first
  had a regret at most the target (``-``: never). Its ratio to no stopping (``/budget``, the
  headline) is over no stopping's whole budget, which is what no stopping spends to reach the
  target: it cannot know its regret before it has seen every config. ``/full's`` is the strict
  reading: over the compute at which no stopping's own pick first reached the target (hindsight
  for both; where the best config falls in the order helps no stopping as much). Ratios are per
  seed, then the median over seeds (never reaching counts as infinitely worse).
  On ``schedule`` the target is a loss at most 1.75 times the best achievable (regret 0.75
  times it): no fixed rate reaches it (the best is 41 % above), a schedule does; PBT in a
  lockstep simulation reaches it in about 3 seeds of 4, both PBTs on real processes in a third
  to a half (two runs of 10 seeds at load 10-17: dse 5 and 4, Ray 4 and 3). The headline is
  dse's PBT against Ray's, per seed: dse's compute to target over Ray's, read against dse
  where it cannot be told (over Ray's whole compute when only dse reached the target: Ray
  would have needed more; infinite when only Ray reached it; left out when neither did), the
  median over the seeds left (``"inf"`` in the JSON for an infinite one).

* **Best** of dse's rules and of Optuna's pruners, per workload: the least median ``/budget``
  ratio, then the least final regret. ``rule <name> (lockstep)`` rows run dse's
  rule objects (from the plugins, as the engine builds them) in Optuna's lockstep simulation,
  verdicts acting on the step they are about: what the rule decides apart from the engine's
  latency. They are diagnostics, never the headline.

Usage::

    python benchmarks/early_stopping.py           # 5 synthetic, 3 mlp, 10 schedule seeds
    python benchmarks/early_stopping.py --quick   # 1 seed each, small runs: a smoke test
    python benchmarks/early_stopping.py --workloads schedule          # PBT: dse against Ray
    python benchmarks/early_stopping.py --workloads schedule --quick  # 12 steps, interval 2
    python benchmarks/early_stopping.py --workloads synthetic --seeds 3 --rules asha
    python benchmarks/early_stopping.py --quick --keep /tmp/es   # keep the dse workspaces

The synthetic and mlp workloads take about 30 minutes on 2 cores at a load of 11 to 15 (the
synthetic half 19 minutes, most of it no stopping's 81 x 81 steps of 50 ms at P = 4); the
schedule workload's 10 seeds 10 to 13 minutes at a load of 10 to 17 (Ray Tune's PBT 30-90 s
a seed, dse's 4 s); ``--quick`` about a minute at the same load (a smoke test: one seed of 12 and
6 configs decides nothing), and ``--quick --workloads schedule`` under a minute.

Targets (issue 21, on synthetic and mlp): dse's best rule reaches the target regret with at
least 3x less compute than no stopping (``/budget``; the strict ratio is printed beside it) at
equal final regret (its median final regret within the median target regret, on every
workload run), and with no more than Optuna's best pruner (per seed, compute to target over
compute to target). Issue 45, on schedule: dse's PBT reaches the target with no more compute
than Ray Tune's PBT (same population and interval; the median per-seed ratio at most 1).

Needs scikit-learn for the digits (a benchmark-only dependency: ``pip install scikit-learn``;
the trials themselves import numpy only), optuna, and for ``schedule`` Ray Tune (``pip install
'ray[tune]==2.40.0'``). The last line printed is one JSON object:
``dse_compute_ratio_to_full``, ``dse_compute_ratio_to_optuna_best``, ``regret_ratio_to_full``
(each the worse over synthetic and mlp), ``dse_pbt_compute_ratio_to_ray_pbt`` (schedule) and
per workload the medians, spreads and the rules' decisions; for schedule also each seed's
compute to target, total compute, final regret and exploits of both PBTs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _es_curve import observed_loss, true_loss
from _es_mlp import Trainer, load_digits_split, write_digits_split
from _es_pbt import PbtRun, SeedRatio, read_dse_pbt, read_ray_pbt, schedule_stepper
from _es_raytune import PbtOptions, import_ray, run_ray_pbt, stop_ray
from _es_schedule import SPACE as SCHEDULE_SPACE
from _es_schedule import TARGET_FACTOR, best_achievable, best_fixed
from _peers import BenchmarkError, import_optuna, plugins, table

import dse
from dse_agents import RandomAgent

HERE = Path(__file__).resolve().parent
WORK_DIR = HERE / ".work"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
DSE_RULES = ("median", "asha", "hyperband")
PBT = "pbt"
"""dse's population based training: the schedule workload's only dse rule (and only there)."""
RAY_PBT = "ray tune pbt"
OPTUNA_PRUNERS = ("median", "successive halving", "hyperband")
FULL = "no stopping"
REDUCTION = 3
MEDIAN_PEERS = 5
EPS = 1e-9
TARGET_SPEEDUP = 3.0
TARGET_TOLERANCE = 0.01
"""The target regret is no stopping's final regret plus this fraction of the best value."""
Params = dict[str, Any]


# -- workloads ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    key: str
    metric: str
    space: dict[str, Any]
    configs: int
    max_step: int
    parallelism: int
    step_seconds: float = 0.0
    """Sleep per step of a synthetic or schedule trial (the mlp's steps are its epochs)."""
    interval: int = 0
    """PBT's interval (the schedule workload; its population is ``configs``)."""

    def command(self, data: Path) -> list[str]:
        if self.key == "mlp":
            return [sys.executable, str(HERE / "_es_mlp.py"), str(data), str(self.max_step)]
        script = "_es_schedule.py" if self.key == "schedule" else "_es_curve.py"
        return [sys.executable, str(HERE / script), str(self.max_step),
                repr(self.step_seconds)]

    def pbt(self) -> PbtOptions:
        """PBT's options, the same for dse's rule and Ray Tune's scheduler."""
        return PbtOptions(population=self.configs, interval=self.interval,
                          quantile=PBT_QUANTILE, factors=PBT_FACTORS,
                          resample_probability=PBT_RESAMPLE)


PBT_QUANTILE = 0.25
PBT_FACTORS = (0.8, 1.2)
PBT_RESAMPLE = 0.25


SYNTHETIC_SPACE = {"u": {"type": "float", "low": 0.0, "high": 1.0},
                   "v": {"type": "float", "low": 0.0, "high": 1.0}}
MLP_SPACE = {
    "lr": {"type": "float", "low": 3e-3, "high": 1.0, "log": True},
    "l2": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
    "width": {"type": "int", "low": 8, "high": 128},
    "batch": [16, 32, 64, 128],
}


def synthetic_optimum(max_step: int, grid: int = 200_001) -> float:
    """The family's best noiseless value at *max_step* over [0, 1]^2: the loss grows with
    the plateau, which is least at v = 0.55 for any u, so a fine grid over u finds it."""
    return min(true_loss(i / (grid - 1), 0.55, max_step) for i in range(grid))


def sample_configs(workload: Workload, seed: int) -> list[Params]:
    """The first N proposals of dse's random agent with *seed* (what the campaign proposes)."""
    space = dse.Space.from_dict(workload.space)
    agent = RandomAgent(space, seed=seed)
    out: list[Params] = []
    while len(out) < workload.configs:
        out += [dict(space.coerce(p)) for p in agent.propose(workload.configs - len(out), [])]
    return out


def same_params(a: Params, b: Params) -> bool:
    return a.keys() == b.keys() and all(
        math.isclose(float(a[k]), float(b[k]), rel_tol=1e-12) for k in a)


# -- what a run leaves ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Point:
    at: float
    number: int
    attempt: int
    step: int
    value: float


@dataclass(slots=True)
class RunLog:
    """One method's run on one seed: its learning-curve points in time order, the configs it
    evaluated fully and how it stopped the others."""

    method: str
    points: list[Point]
    finals: dict[int, float]
    """Trial number -> its observed value at max_step (a full evaluation)."""
    wall_s: float
    stopped: int = 0
    promoted: int = 0
    late: list[int] = field(default_factory=list)
    """Per stop verdict: steps the trial reported beyond the step it was stopped at."""
    rungs: dict[str, int] = field(default_factory=dict)
    """``"<verdict>@<rung>"`` -> how many decisions (dse's record)."""
    unrecorded: int = 0
    """Steps in the trials' progress files that are not in the record (dse)."""
    resumed: dict[tuple[int, int], int] = field(default_factory=dict)
    """``(trial number, attempt)`` -> the step it resumed from, where the number alone does
    not say it (a PBT copy of a donor: its first step less one)."""

    def timeline(self) -> list[tuple[float, int, int | None, float | None]]:
        """``(compute so far, trial number, the step it reached, its value)`` per point, in
        time order, where compute counts each attempt's steps beyond where it resumed."""
        last: dict[tuple[int, int], int] = {}
        reached: dict[int, int] = {}
        out: list[tuple[float, int, int | None, float | None]] = []
        compute = 0
        for p in sorted(self.points, key=lambda p: (p.at, p.number, p.attempt, p.step)):
            key = (p.number, p.attempt)
            # An attempt's first point: it resumed from the step before it, or from where the
            # previous attempt stopped reporting, whichever is lower.
            before = last[key] if key in last else self.resumed.get(
                key, min(p.step - 1, reached.get(p.number, 0)))
            compute += max(p.step - before, 0)
            last[key] = max(last.get(key, 0), p.step)
            reached[p.number] = max(reached.get(p.number, 0), p.step)
            out.append((compute, p.number, p.step, p.value))
        return out


@dataclass(frozen=True, slots=True)
class Scored:
    method: str
    seed: int
    compute: float
    regret: float
    to_target: float | None
    log: RunLog
    target: float


def final_regret(log: RunLog, max_step: int, truth: Callable[[int], float],
                 best: float) -> float:
    """The regret of the config *log*'s run picks in the end: the fully evaluated one with the
    best observed final value."""
    if not log.finals:
        return math.inf
    number = min(log.finals, key=lambda n: (log.finals[n], n))
    return truth(number) - best


def score(log: RunLog, seed: int, max_step: int, truth: Callable[[int], float],
          best: float, target: float) -> Scored:
    """Final regret, total compute, and the compute spent when the run's pick (the best
    observed final value so far) first had a regret at most *target* (``None``: never)."""
    pick_value = math.inf
    regret = math.inf
    to_target: float | None = None
    compute = 0.0
    for compute, number, step, _ in log.timeline():
        if step == max_step and number in log.finals and log.finals[number] < pick_value:
            pick_value = log.finals[number]
            regret = truth(number) - best
        if to_target is None and regret <= target + EPS:
            to_target = compute
    return Scored(log.method, seed, compute, final_regret(log, max_step, truth, best),
                  to_target, log, target)


# -- dse ------------------------------------------------------------------------------------


def campaign_dict(workload: Workload, seed: int, rule: str | None, data: Path) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "campaign": {
            "name": f"{workload.key}-{rule or 'full'}",
            "agent": "random",
            "seed": seed,
            "mode": "rolling",
            "max_parallelism": workload.parallelism,
            "max_trials": workload.configs,
            "backend": "local",
            "poll_interval": POLL_S,
        },
        "backend": {"local": {"cpus": workload.parallelism}},
        "space": workload.space,
        "objectives": [{"metric": workload.metric, "direction": "minimize"}],
        "environment": {"command": workload.command(data)},
    }
    if rule is not None:
        options: dict[str, Any] = {"reduction_factor": REDUCTION}
        if rule == "median":
            options = {"min_peers": MEDIAN_PEERS}
        elif rule == PBT:  # its population caps the proposals (end reason 'population')
            options = workload.pbt().table(seed)
            del doc["campaign"]["max_trials"]
        doc["stopping"] = {"rule": rule, "max_step": workload.max_step, "min_step": 1,
                           "metric": workload.metric, rule: options}
    return doc


POLL_S = 0.05
"""The controller's polling interval: a verdict acts at the next pass after the point."""
STEP_MS = 50.0
"""A synthetic step's work. A dse trial takes about 0.3 s from its start to its first point
(Python, dse.trial; more under load): with 15 ms steps the trials that survive a rung run ~20
steps on while a stopped trial's successor starts, reach the next rung while few peers are
there, pass it, and rolling ASHA spent twice the compute of its lockstep run (935 against 453
steps, seed 0); at 60 ms it spent 460 (late steps per stop 0.17 instead of 1.0). Steps of
real work are seconds to hours; 50 ms keeps the benchmark's length bearable."""
KEEP: Path | None = None
"""Where to keep each dse run's workspace (``--keep``); ``None``: a temporary directory."""


def run_dse(workload: Workload, configs: list[Params], seed: int, rule: str | None,
            data: Path) -> RunLog:
    """One campaign on the local backend; the log read back from its record."""
    method = f"dse {rule or FULL}" if rule else FULL
    with contextlib.ExitStack() as stack:
        if KEEP is not None:  # --keep: the workspace stays, for `dse show` and the decisions
            workspace = KEEP / f"{workload.key}-{rule or 'full'}-seed{seed}"
            shutil.rmtree(workspace, ignore_errors=True)
            workspace.mkdir(parents=True)
        else:
            workspace = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="dse-es-", dir=WORK_DIR)))
        campaign = dse.campaign_from_dict(campaign_dict(workload, seed, rule, data),
                                          workspace=workspace)
        store = dse.Store(workspace / "dse.sqlite")
        try:
            engine = dse.build_engine(campaign, store=store, plugins=plugins())
            start = time.perf_counter()
            result = engine.run()
            wall = time.perf_counter() - start
            if rule == PBT:
                log = pbt_log(method, read_dse_pbt(
                    store, result.campaign_id, workload.metric, configs, workload.max_step,
                    wall, f"{method} on {workload.key}"))
            else:
                log = _read_record(store, result.campaign_id, workload, configs, method, wall)
        finally:
            store.close()
    if result.status != "completed":
        raise BenchmarkError(f"{method} on {workload.key} seed {seed}: ended {result.status}"
                             f" ({result.end_reason})")
    return log


def _read_record(store: dse.Store, campaign_id: int, workload: Workload,
                 configs: list[Params], method: str, wall: float) -> RunLog:
    rows = store.reads.trials(campaign_id)
    where = f"{method} on {workload.key}"
    if len(rows) != len(configs):
        raise BenchmarkError(f"{where}: {len(rows)} trials recorded, expected {len(configs)}")
    points: list[Point] = []
    finals: dict[int, float] = {}
    unrecorded = 0
    for row in rows:
        if not same_params(row.params, configs[row.number - 1]):
            raise BenchmarkError(f"{where}: trial {row.number} ran {row.params}, not the"
                                 f" seed's config {configs[row.number - 1]}")
        status = row.status.value
        if status not in ("completed", "stopped"):
            raise BenchmarkError(f"{where}: trial {row.number} ended {status}: {row.message}")
        curve = store.reads.progress(row.id)
        points += [Point(p.at, row.number, p.attempt, p.step, float(p.metrics[workload.metric]))
                   for p in curve]
        if status == "completed":
            finals[row.number] = float((row.metrics or {})[workload.metric])
        if row.trial_dir:
            unrecorded += _file_points(Path(row.trial_dir)) - len(curve)
    log = RunLog(method, points, finals, wall, unrecorded=unrecorded)
    stops = store.stops.run_decisions(campaign_id, ("stop",))
    log.stopped = len(stops)
    log.promoted = len(store.stops.run_decisions(campaign_id, ("promote",)))
    log.rungs = {f"{v}@{rung}": n for (v, rung), n in sorted(
        store.stops.decision_counts(campaign_id).items())}
    reached = {(p.number, p.attempt): 0 for p in points}
    for p in points:
        reached[(p.number, p.attempt)] = max(reached[(p.number, p.attempt)], p.step)
    log.late = [reached.get((d.number, d.attempt), d.step) - d.step for d in stops]
    return log


def _file_points(trial_dir: Path) -> int:
    """Lines in the trial's progress file: what it reported, whether read or not."""
    path = trial_dir / "progress.jsonl"
    if not path.exists():
        return 0
    with open(path, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def pbt_log(method: str, run: PbtRun) -> RunLog:
    """A PBT run (dse's or Ray Tune's) as a log: each copy of a donor counted from the step it
    resumed at."""
    return RunLog(method, [Point(*p) for p in run.points], run.finals, run.wall_s,
                  stopped=run.exploited, promoted=run.children, late=run.late,
                  rungs=run.rungs, unrecorded=run.unrecorded, resumed=run.resumed)


# -- Optuna ---------------------------------------------------------------------------------


def _pruner(optuna: Any, name: str, workload: Workload) -> Any:
    pruners = optuna.pruners
    if name == "median":
        return pruners.MedianPruner(n_startup_trials=MEDIAN_PEERS, n_warmup_steps=0)
    if name == "successive halving":
        return pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=REDUCTION)
    return pruners.HyperbandPruner(min_resource=1, max_resource=workload.max_step,
                                   reduction_factor=REDUCTION)


def _suggest(trial: Any, space: dict[str, Any]) -> Params:
    out: Params = {}
    for name, spec in space.items():
        if isinstance(spec, list):
            out[name] = trial.suggest_categorical(name, spec)
        elif spec["type"] == "int":
            out[name] = trial.suggest_int(name, spec["low"], spec["high"])
        else:
            out[name] = trial.suggest_float(name, spec["low"], spec["high"],
                                            log=spec.get("log", False))
    return out


Stepper = Callable[[], float]


def run_optuna(workload: Workload, configs: list[Params], pruner: str,
               stepper: Callable[[Params], Stepper], seed: int) -> RunLog:
    """The enqueued configs through Optuna's ask/tell with *pruner*, P workers in lockstep."""
    optuna = import_optuna("optuna scikit-learn")
    # A fixed name: HyperbandPruner puts a trial in a bracket by a hash of it and the number.
    study = optuna.create_study(direction="minimize", study_name=f"{workload.key}-{seed}",
                                sampler=optuna.samplers.RandomSampler(seed=0),
                                pruner=_pruner(optuna, pruner, workload))
    for config in configs:
        study.enqueue_trial(config)
    running: list[tuple[int, Any, Stepper, list[int]]] = []
    points: list[Point] = []
    finals: dict[int, float] = {}
    pruned = 0
    started = 0
    tick = 0
    start = time.perf_counter()
    while started < len(configs) or running:
        while len(running) < workload.parallelism and started < len(configs):
            trial = study.ask()
            params = _suggest(trial, workload.space)
            if not same_params(params, configs[started]):
                raise BenchmarkError(f"optuna asked {params}, not {configs[started]}")
            started += 1
            running.append((started, trial, stepper(params), [0]))
        tick += 1
        for item in list(running):
            number, trial, step_once, reached = item
            reached[0] += 1
            step = reached[0]
            value = step_once()
            points.append(Point(float(tick), number, 1, step, value))
            trial.report(value, step)
            if step >= workload.max_step:
                study.tell(trial, value)
                finals[number] = value
                running.remove(item)
            elif trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                pruned += 1
                running.remove(item)
    return RunLog(f"optuna {pruner}", points, finals, time.perf_counter() - start,
                  stopped=pruned)


def run_rule_lockstep(workload: Workload, configs: list[Params], rule: str,
                      stepper: Callable[[Params], Stepper]) -> RunLog:
    """dse's stopping *rule* alone (from the plugins, as the engine builds it) over the same
    lockstep simulation as Optuna's: a verdict acts on the step it is about, and a free worker
    takes a promotion before a new config. What the rule decides, apart from the engine."""
    options: dict[str, Any] = ({"min_peers": MEDIAN_PEERS} if rule == "median"
                               else {"reduction_factor": REDUCTION})
    decide = plugins().stopping_rule_class(rule)(min_step=1, max_step=workload.max_step,
                                                  **options)
    running: list[list[Any]] = []  # [number, attempt, stepper, step]
    paused: dict[int, list[Any]] = {}
    points: list[Point] = []
    finals: dict[int, float] = {}
    stopped = promoted = started = tick = 0
    start = time.perf_counter()
    while True:
        while len(running) < workload.parallelism and paused:
            chosen = [d.trial for d in decide.promotions(set(paused))]
            if not chosen:
                break
            for number in chosen[:workload.parallelism - len(running)]:
                item = paused.pop(number)
                item[1] += 1
                running.append(item)
                promoted += 1
        while len(running) < workload.parallelism and started < len(configs):
            running.append([started + 1, 1, stepper(configs[started]), 0])
            started += 1
        if not running:
            break
        tick += 1
        for item in list(running):
            number, attempt, step_once, step = item
            item[3] = step = step + 1
            value = step_once()
            points.append(Point(float(tick), number, attempt, step, value))
            if step >= workload.max_step:
                finals[number] = value
                running.remove(item)
                continue
            decision = decide.report(number, step, value)
            if decision is not None and decision.verdict is dse.Verdict.STOP:
                stopped += 1
                running.remove(item)
                paused[number] = item
    return RunLog(f"rule {rule} (lockstep)", points, finals, time.perf_counter() - start,
                  stopped=stopped, promoted=promoted)


def synthetic_stepper(params: Params) -> Stepper:
    u, v = float(params["u"]), float(params["v"])
    state = [0]

    def step_once() -> float:
        state[0] += 1
        return observed_loss(u, v, state[0])

    return step_once


def mlp_stepper(data: dict[str, Any]) -> Callable[[Params], Stepper]:
    def make(params: Params) -> Stepper:
        return Trainer(params, data).epoch

    return make


# -- a workload over seeds ------------------------------------------------------------------


@dataclass(slots=True)
class Seeded:
    """Every method's scored run on one workload, per seed."""

    workload: Workload
    runs: dict[str, list[Scored]] = field(default_factory=dict)
    mismatch: float = 0.0
    """Largest difference between a value Optuna's side computed and dse's record (mlp)."""
    not_run: dict[str, str] = field(default_factory=dict)
    """Method -> why it did not run (dse's pbt before the rule is installed)."""

    def add(self, scored: Scored) -> None:
        self.runs.setdefault(scored.method, []).append(scored)


def run_seed(workload: Workload, seed: int, data: Path, out: Seeded,
             rules: Sequence[str], pruners: Sequence[str]) -> None:
    if workload.key == "schedule":
        run_schedule_seed(workload, seed, data, out, PBT in rules, pruners)
        return
    rules = [r for r in rules if r != PBT]
    configs = sample_configs(workload, seed)
    say(f"{workload.key} seed {seed}: {FULL} (dse, the reference sweep) ...")
    full = run_dse(workload, configs, seed, None, data)
    if len(full.finals) != len(configs):
        raise BenchmarkError(f"{FULL}: {len(full.finals)} of {len(configs)} trials completed")
    if workload.key == "synthetic":
        best = OPTIMA[workload.max_step]

        def truth(number: int) -> float:
            c = configs[number - 1]
            return true_loss(float(c["u"]), float(c["v"]), workload.max_step)

        stepper: Callable[[Params], Stepper] = synthetic_stepper
    else:
        best = min(full.finals.values())
        reference = dict(full.finals)

        def truth(number: int) -> float:
            return reference[number]

        stepper = mlp_stepper(load_digits_split(str(data)))
    target = (final_regret(full, workload.max_step, truth, best)
              + TARGET_TOLERANCE * abs(best))
    base = score(full, seed, workload.max_step, truth, best, target)
    if base.compute != len(configs) * workload.max_step:  # the accounting, checked
        raise BenchmarkError(f"{FULL}: {base.compute:g} steps counted from the record, not"
                             f" {len(configs)} x {workload.max_step}")
    out.add(base)
    for rule in rules:
        say(f"{workload.key} seed {seed}: dse {rule} ...")
        log = run_dse(workload, configs, seed, rule, data)
        out.add(score(log, seed, workload.max_step, truth, best, target))
    curves = {(p.number, p.step): p.value for p in full.points}
    for rule in rules:
        log = run_rule_lockstep(workload, configs, rule, stepper)
        out.add(score(log, seed, workload.max_step, truth, best, target))
    for pruner in pruners:
        say(f"{workload.key} seed {seed}: optuna {pruner} ...")
        log = run_optuna(workload, configs, pruner, stepper, seed)
        for p in log.points:
            out.mismatch = max(out.mismatch, abs(p.value - curves[(p.number, p.step)]))
        out.add(score(log, seed, workload.max_step, truth, best, target))


def run_schedule_seed(workload: Workload, seed: int, data: Path, out: Seeded, with_dse: bool,
                      pruners: Sequence[str]) -> None:
    """The schedule workload: no stopping (the fixed rates, each to the end), dse's pbt, Ray
    Tune's PBT and Optuna's pruners over the same initial configs. A run's pick is its best
    value at max_step so far, and its regret that value less the best achievable (the curves
    are deterministic: what a run observes is the truth)."""
    configs = sample_configs(workload, seed)
    best = best_achievable(workload.max_step)
    target = (TARGET_FACTOR - 1.0) * best

    def scored(log: RunLog) -> Scored:
        return score(log, seed, workload.max_step, lambda n: log.finals[n], best, target)

    say(f"schedule seed {seed}: {FULL} (dse, the fixed rates) ...")
    full = run_dse(workload, configs, seed, None, data)
    if len(full.finals) != len(configs):
        raise BenchmarkError(f"{FULL}: {len(full.finals)} of {len(configs)} trials completed")
    base = scored(full)
    if base.compute != len(configs) * workload.max_step:  # the accounting, checked
        raise BenchmarkError(f"{FULL}: {base.compute:g} steps counted from the record, not"
                             f" {len(configs)} x {workload.max_step}")
    out.add(base)
    if with_dse:
        say(f"schedule seed {seed}: dse {PBT} ...")
        try:
            out.add(scored(run_dse(workload, configs, seed, PBT, data)))
        except dse.PluginError as exc:  # the rule is not installed: the rest still runs
            out.not_run[f"dse {PBT}"] = str(exc)
            say(f"schedule seed {seed}: dse {PBT} not run: {exc}")
    say(f"schedule seed {seed}: {RAY_PBT} ...")
    got, wall = run_ray_pbt(configs, seed, workload.max_step, workload.step_seconds,
                            workload.pbt(), WORK_DIR)
    out.add(scored(pbt_log(RAY_PBT, read_ray_pbt(got, workload.max_step, wall))))
    curves = {(p.number, p.step): p.value for p in full.points}
    for pruner in pruners:
        say(f"schedule seed {seed}: optuna {pruner} ...")
        log = run_optuna(workload, configs, pruner, schedule_stepper, seed)
        for p in log.points:
            out.mismatch = max(out.mismatch, abs(p.value - curves[(p.number, p.step)]))
        out.add(scored(log))


OPTIMA: dict[int, float] = {}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- report ---------------------------------------------------------------------------------


def _median(values: Sequence[float | None]) -> float | None:
    """Median with ``None`` (never reached) as infinity; ``None`` when that is the median."""
    ordered = sorted(math.inf if v is None else v for v in values)
    if not ordered:
        return None
    m = statistics.median(ordered)
    return None if math.isinf(m) else m


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return f"{value:.{digits}g}"


def _spread(values: Sequence[float | None]) -> str:
    if len(values) < 2:
        return ""
    ordered = sorted(math.inf if v is None else v for v in values)
    hi = "-" if math.isinf(ordered[-1]) else _fmt(ordered[-1])
    lo = "-" if math.isinf(ordered[0]) else _fmt(ordered[0])
    return f" [{lo}, {hi}]"


@dataclass(frozen=True, slots=True)
class Summary:
    method: str
    compute: float
    to_target: float | None
    regret: float
    reached: int
    seeds: int
    to_target_ratio: float | None
    """Median over seeds of its compute to target over no stopping's in the same seed."""
    budget_ratio: float | None
    """Median over seeds of its compute to target over no stopping's whole budget."""


def _per_seed_ratio(runs: Sequence[Scored], others: Sequence[Scored]) -> list[float | None]:
    """Per seed: compute to target of *runs* over that of *others* (``None``: never)."""
    theirs = {s.seed: s.to_target for s in others}
    out: list[float | None] = []
    for s in runs:
        other = theirs[s.seed]
        out.append(None if s.to_target is None or other is None
                   else s.to_target / max(other, EPS))
    return out


def summarize(seeded: Seeded) -> tuple[dict[str, Summary], str]:
    rows: list[tuple[str, ...]] = []
    out: dict[str, Summary] = {}
    full = seeded.runs[FULL]
    full_compute = statistics.median(s.compute for s in full)
    for method, runs in seeded.runs.items():
        compute = statistics.median(s.compute for s in runs)
        to_target = _median([s.to_target for s in runs])
        regret = statistics.median(s.regret for s in runs)
        reached = sum(s.to_target is not None for s in runs)
        per_seed = _per_seed_ratio(runs, full)
        budget = {s.seed: s.compute for s in full}
        of_budget = [None if s.to_target is None else s.to_target / budget[s.seed]
                     for s in runs]
        out[method] = Summary(method, compute, to_target, regret, reached, len(runs),
                              _median(per_seed), _median(of_budget))
        late = [n for s in runs for n in s.log.late]
        rows.append((
            method,
            _fmt(compute) + _spread([s.compute for s in runs]),
            f"{compute / full_compute:.2f}",
            _fmt(to_target) + _spread([s.to_target for s in runs]),
            _fmt(_median(per_seed)) + _spread(per_seed),
            _fmt(_median(of_budget)),
            f"{reached}/{len(runs)}",
            _fmt(regret) + _spread([s.regret for s in runs]),
            f"{statistics.fmean(s.log.stopped for s in runs):.1f}",
            f"{statistics.fmean(s.log.promoted for s in runs):.1f}"
            if not method.startswith("optuna") else "-",
            f"{statistics.fmean(late):.2f}" if late else "-",
            f"{statistics.median(s.log.wall_s for s in runs):.1f}",
        ))
    text = table(("method", "compute (steps)", "/full", "to target", "/full's", "/budget",
                  "reached", "final regret", "stopped", "promoted", "late", "wall s"), rows)
    return out, text


def ratios(seeded: Seeded, summaries: dict[str, Summary]) -> dict[str, Any]:
    """The headline ratios of one workload: dse's best rule against no stopping and against
    Optuna's best pruner (best: the least median over seeds of compute to target over no
    stopping's budget, then the least final regret); compute ratios are medians of per-seed
    ratios."""

    def rank(s: Summary) -> tuple[float, float]:
        ratio = s.budget_ratio
        return (math.inf if ratio is None else ratio, s.regret)

    full = summaries[FULL]
    dse_best = min((s for m, s in summaries.items() if m.startswith("dse ")), key=rank,
                   default=None)
    optuna_best = min((s for m, s in summaries.items() if m.startswith("optuna ")), key=rank)
    if dse_best is None:  # --rules with none: the harness and the peer alone
        return {"dse_best": None, "optuna_best": optuna_best.method,
                "dse_compute_ratio_to_full": None, "dse_compute_ratio_to_optuna_best": None,
                "regret_ratio_to_full": None,
                "optuna_best_compute_ratio_to_full": optuna_best.budget_ratio,
                "optuna_best_compute_ratio_to_full_strict": optuna_best.to_target_ratio}
    to_optuna = _median(_per_seed_ratio(seeded.runs[dse_best.method],
                                        seeded.runs[optuna_best.method]))

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    target = statistics.median(s.target for s in seeded.runs[FULL])
    return {
        "dse_best": dse_best.method,
        "optuna_best": optuna_best.method,
        "dse_final_regret_at_target": dse_best.regret <= target + EPS,
        "dse_compute_ratio_to_full": rounded(dse_best.budget_ratio),
        "dse_compute_ratio_to_optuna_best": rounded(to_optuna),
        "regret_ratio_to_full": round((dse_best.regret + EPS) / (full.regret + EPS), 4),
        "dse_compute_ratio_to_full_strict": rounded(dse_best.to_target_ratio),
        "dse_total_compute_ratio_to_full": round(dse_best.compute / full.compute, 4),
        "optuna_best_compute_ratio_to_full": rounded(optuna_best.budget_ratio),
        "optuna_best_compute_ratio_to_full_strict": rounded(optuna_best.to_target_ratio),
    }


# -- main -----------------------------------------------------------------------------------


def workloads(quick: bool, step_ms: float) -> dict[str, Workload]:
    if quick:
        return {
            "synthetic": Workload("synthetic", "loss", SYNTHETIC_SPACE, 12, 9, 4,
                                  step_ms / 1000),
            "mlp": Workload("mlp", "val_loss", MLP_SPACE, 6, 9, 2),
            "schedule": Workload("schedule", "loss", SCHEDULE_SPACE, POPULATION, 12,
                                 POPULATION, step_ms / 1000, interval=2),
        }
    return {
        "synthetic": Workload("synthetic", "loss", SYNTHETIC_SPACE, 81, 81, 4, step_ms / 1000),
        "mlp": Workload("mlp", "val_loss", MLP_SPACE, 27, 27, 2),
        "schedule": Workload("schedule", "loss", SCHEDULE_SPACE, POPULATION, 40, POPULATION,
                             step_ms / 1000, interval=4),
    }


POPULATION = 8
"""PBT's population on the schedule workload: the configs, all running at once."""
SEEDS = {"synthetic": 5, "mlp": 3, "schedule": 10}
"""Seeds per workload by default. The schedule's PBTs reach its target in about half the
seeds, so a median of per-seed ratios needs more of them."""


def pbt_ratios(seeded: Seeded) -> dict[str, Any]:
    """The schedule workload's headline: per seed, dse's PBT compute to target over Ray
    Tune's (:class:`SeedRatio`: over Ray's whole compute when only dse reached it, infinite
    when only Ray did, left out when neither did), the median over the seeds left; and the
    figures it rests on."""
    ray = {s.seed: s for s in seeded.runs.get(RAY_PBT, [])}
    ours = {s.seed: s for s in seeded.runs.get(f"dse {PBT}", [])}
    pairs = [SeedRatio(seed, ours[seed].to_target, ray[seed].to_target, ray[seed].compute)
             for seed in sorted(ours) if seed in ray]
    told = [p.ratio for p in pairs if p.ratio is not None]
    median = statistics.median(told) if told else None
    shown = None if median is None or math.isinf(median) else round(median, 4)

    def figures(runs: dict[int, Scored]) -> dict[str, Any]:
        return {str(seed): {"to_target": s.to_target, "compute": s.compute,
                            "final_regret": round(s.regret, 7), "exploited": s.log.stopped,
                            "wall_s": round(s.log.wall_s, 1)} for seed, s in runs.items()}

    per_seed = ", ".join(f"seed {p.seed} {_fmt(p.dse)}/{_fmt(p.ray)}" for p in pairs)
    print(f"schedule: dse {PBT} / {RAY_PBT}, compute to target per seed: {per_seed or '-'};"
          f" median ratio {_fmt(shown)} over {len(told)} seed(s) where one reached it")
    out: dict[str, Any] = {
        "dse_pbt_compute_ratio_to_ray_pbt": shown,
        "per_seed_ratio": {str(p.seed): (None if p.ratio is None else "inf"
                                         if math.isinf(p.ratio) else round(p.ratio, 4))
                           for p in pairs},
        "dse_pbt": figures(ours), "ray_pbt": figures(ray),
        "best_achievable": best_achievable(seeded.workload.max_step),
        "target_loss": TARGET_FACTOR * best_achievable(seeded.workload.max_step),
        "best_fixed_loss": best_fixed(seeded.workload.max_step)[0],
        "population": seeded.workload.configs, "interval": seeded.workload.interval,
    }
    if f"dse {PBT}" in seeded.not_run:
        out["dse_pbt_not_run"] = seeded.not_run[f"dse {PBT}"]
    return out


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="1 seed each, 12 synthetic configs of 9 steps, 6 mlp configs of 9"
                             " epochs (under a minute; a smoke test, not a measurement); the"
                             " schedule workload (8 members of 12 steps, interval 2) only when"
                             " --workloads names it")
    parser.add_argument("--seeds", type=int, help="seeds per workload (default 5 synthetic,"
                                                  " 3 mlp, 10 schedule; quick 1)")
    parser.add_argument("--workloads", nargs="+", choices=("synthetic", "mlp", "schedule"),
                        help="default: all three (--quick: synthetic and mlp)")
    parser.add_argument("--rules", nargs="*", choices=(*DSE_RULES, PBT),
                        default=[*DSE_RULES, PBT],
                        help=f"dse's rules (default all; {PBT} runs on the schedule workload"
                             " only, the others on synthetic and mlp)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep each dse run's workspace in DIR/<workload>-<rule>-seed<n>"
                             " (to read its decisions: dse show <name>:<n> --workspace ...)")
    parser.add_argument("--step-ms", type=float, default=None,
                        help=f"work per synthetic or schedule step, ms (default {STEP_MS:g};"
                             " quick 10)")
    args = parser.parse_args(argv)
    global KEEP
    KEEP = args.keep.resolve() if args.keep else None
    for var in THREAD_VARS:  # before the trials start: one BLAS thread per process
        os.environ.setdefault(var, "1")
    WORK_DIR.mkdir(exist_ok=True)
    step_ms = args.step_ms or (10.0 if args.quick else STEP_MS)
    named = args.workloads or (["synthetic", "mlp"] if args.quick
                               else ["synthetic", "mlp", "schedule"])
    chosen = {k: w for k, w in workloads(args.quick, step_ms).items() if k in named}
    seeds = {k: args.seeds or (1 if args.quick else SEEDS[k]) for k in chosen}
    load_before = _load()
    started = time.perf_counter()
    ray_version = None
    try:
        optuna = import_optuna("optuna scikit-learn")
        if "schedule" in chosen:
            ray_version = import_ray().__version__
        data = WORK_DIR / "digits.npz"
        if "mlp" in chosen and not data.exists():
            try:
                write_digits_split(str(data))
            except ImportError:
                raise BenchmarkError("the mlp workload needs scikit-learn's digits:"
                                     " `.venv/bin/pip install scikit-learn`") from None
        results: dict[str, Seeded] = {}
        for key, workload in chosen.items():
            if key == "synthetic":
                OPTIMA[workload.max_step] = synthetic_optimum(workload.max_step)
            results[key] = Seeded(workload)
            for seed in range(seeds[key]):
                run_seed(workload, seed, data, results[key], args.rules, OPTUNA_PRUNERS)
    except BenchmarkError as exc:
        print(f"early_stopping: error: {exc}", file=sys.stderr)
        return 1
    finally:
        stop_ray()
    wall = time.perf_counter() - started
    return report(results, seeds, optuna.__version__, wall, load_before, args.quick,
                  ray_version)


def report(results: dict[str, Seeded], seeds: dict[str, int], optuna_version: str,
           wall: float, load_before: str, quick: bool, ray_version: str | None = None) -> int:
    ray = f", ray {ray_version}" if ray_version else ""
    print(f"early stopping: {sys.platform}, Python {sys.version.split()[0]}, dse"
          f" {dse.__version__}, optuna {optuna_version}{ray}, {os.cpu_count()} cores, load"
          f" (1/5/15 min) {load_before} before, {_load()} after, {wall:.0f} s")
    summary: dict[str, Any] = {}
    per: dict[str, Any] = {}
    for key, seeded in results.items():
        w = seeded.workload
        print()
        print(f"{key}: {w.configs} configs x {w.max_step} steps, P = {w.parallelism},"
              f" {seeds[key]} seed(s); median [min, max] over seeds")
        if key == "schedule":
            print(f"PBT: population {w.configs}, interval {w.interval}, quantile"
                  f" {PBT_QUANTILE:g}, factors {', '.join(f'{f:g}' for f in PBT_FACTORS)},"
                  f" resample probability {PBT_RESAMPLE:g}; best achievable loss"
                  f" {best_achievable(w.max_step):.3g}, best fixed lr"
                  f" {best_fixed(w.max_step)[0]:.3g} (lr {best_fixed(w.max_step)[1]:.3g}),"
                  f" target loss {TARGET_FACTOR * best_achievable(w.max_step):.3g}")
        summaries, text = summarize(seeded)
        print(text)
        if key in ("mlp", "schedule"):
            print(f"optuna's in-process steps against dse's record: largest difference"
                  f" {seeded.mismatch:.2g}")
        for method, why in seeded.not_run.items():
            print(f"{method}: not run ({why})")
        for method, runs in seeded.runs.items():
            counts: dict[str, int] = {}
            for s in runs:
                for rung, n in s.log.rungs.items():
                    counts[rung] = counts.get(rung, 0) + n
            if counts:
                ordered = sorted(counts.items(), key=lambda kv: (kv[0].split("@")[0],
                                                                 int(kv[0].split("@")[1])))
                shown = ", ".join(f"{k} {n}" for k, n in ordered[:10])
                if len(ordered) > 10:
                    shown += (f", ... ({len(ordered) - 10} more steps,"
                              f" {sum(n for _, n in ordered[10:])} decisions)")
                print(f"{method} decisions, verdict@rung (all seeds): {shown}")
            missing = sum(s.log.unrecorded for s in runs)
            if missing:
                print(f"{method}: {missing} step(s) in progress files not in the record")
        medians = {m: {"compute": s.compute, "to_target": s.to_target,
                       "regret": round(s.regret, 6), "reached": s.reached, "seeds": s.seeds}
                   for m, s in summaries.items()}
        if key == "schedule":
            per[key] = {**pbt_ratios(seeded), "medians": medians}
            continue
        got = ratios(seeded, summaries)
        per[key] = {**got, "medians": medians}
        print(f"{key}: best dse rule {got['dse_best']}, best optuna pruner {got['optuna_best']};"
              f" compute to target / no stopping's budget {_fmt(got['dse_compute_ratio_to_full'])}"
              f" (strict {_fmt(got.get('dse_compute_ratio_to_full_strict'))}),"
              f" / optuna best {_fmt(got['dse_compute_ratio_to_optuna_best'])}; final regret /"
              f" no stopping {_fmt(got['regret_ratio_to_full'])}")
    keys = ("dse_compute_ratio_to_full", "dse_compute_ratio_to_optuna_best",
            "regret_ratio_to_full")
    rules = [k for k in per if k != "schedule"]  # issue 21's workloads
    for name in keys:
        values = [per[k][name] for k in rules]
        summary[name] = None if not values or any(v is None for v in values) else max(values)
    # At equal final regret: the best rule's median final regret within the median target.
    equal = bool(rules) and all(per[k].get("dse_final_regret_at_target", False) for k in rules)
    summary["dse_final_regret_at_target"] = equal if rules else None
    full_ok = (summary["dse_compute_ratio_to_full"] is not None
               and summary["dse_compute_ratio_to_full"] <= 1 / TARGET_SPEEDUP and equal)
    optuna_ok = (summary["dse_compute_ratio_to_optuna_best"] is not None
                 and summary["dse_compute_ratio_to_optuna_best"] <= 1.0)
    print()
    if rules:  # issue 21's targets, on synthetic and mlp
        print(f"target: dse >= {TARGET_SPEEDUP:g}x less compute to the target regret than no"
              f" stopping's budget (ratio <= {1 / TARGET_SPEEDUP:.3f}):"
              f" {'met' if full_ok else 'NOT met'}"
              f" ({_fmt(summary['dse_compute_ratio_to_full'])}; final regret ratio"
              f" {_fmt(summary['regret_ratio_to_full'])}, median final regret"
              f" {'within' if equal else 'NOT within'} the target regret)")
        print(f"target: dse no more compute than Optuna's best pruner (ratio <= 1):"
              f" {'met' if optuna_ok else 'NOT met'}"
              f" ({_fmt(summary['dse_compute_ratio_to_optuna_best'])})")
    pbt_ok = None
    if "schedule" in per:
        ratio = per["schedule"]["dse_pbt_compute_ratio_to_ray_pbt"]
        pbt_ok = ratio is not None and ratio <= 1.0
        why = per["schedule"].get("dse_pbt_not_run")
        print(f"target: dse's PBT no more compute to the target than Ray Tune's PBT (ratio <="
              f" 1): {'met' if pbt_ok else 'NOT met'} ({_fmt(ratio)}"
              + (f"; dse {PBT} not run: {why})" if why else ")"))
    summary["dse_pbt_compute_ratio_to_ray_pbt"] = (per["schedule"][
        "dse_pbt_compute_ratio_to_ray_pbt"] if "schedule" in per else None)
    summary["pbt_target_met"] = pbt_ok
    summary.update({"targets_met": full_ok and optuna_ok if rules else None,
                    "workloads": per, "seeds": seeds, "ray": ray_version,
                    "quick": quick, "poll_interval_s": POLL_S, "wall_s": round(wall, 1),
                    "load_before": load_before, "load_after": _load()})
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
