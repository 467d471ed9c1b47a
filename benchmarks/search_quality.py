"""Search quality: dse's agents against Optuna's samplers and Ax/BoTorch, same budgets, same
evaluations.

What is measured (one process run; every method sees the same problems, budgets and seeds):

* **Problems** (all minimised; defined in ``_sq_problems.py``; budget = trials per run):

  - ``branin`` (budget 40): Branin on [-5, 10] x [0, 15]; f* = 0.397887.
  - ``hartmann6`` (100): Hartmann-6 on [0, 1]^6; f* = -3.322368.
  - ``mixed`` (60, noisy): a synthetic "kernel time" over integer tile sizes ``tile_m``,
    ``tile_n`` (16..256, step 16), a categorical ``layout`` (row, col, blocked) and a
    log-scaled ``lr`` in [1e-5, 1e-1]; each layout has its own best tiles and lr; f* = 1.0 at
    tile_m=128, tile_n=64, blocked, lr=3e-3; Gaussian noise sd 0.03 (3 % of f*).
  - ``constrained`` (60, failures): Branin with the unknown constraint of Gelbart, Snoek and
    Adams (2014), (x1 - 2.5)^2 + (x2 - 7.5)^2 <= 50, which makes two of Branin's three minima
    infeasible; f* = 0.397887 at (pi, 2.275), 0.12 inside the constraint's edge.
  - ``levy7`` (100): Levy's function in 7-D on [-5, 5]^7, of w = 1 + R (x - s) / 4 with a
    fixed random rotation R and a fixed shift s (each coordinate 1 to 3.5 from the centre, so
    the optimum is on no symmetric point and Levy's ridges are off the axes); f* = 0 at x = s.
    Random search's best of 100 points is about 5; a good optimiser gets below 1.
  - ``training`` (80, noisy): a synthetic validation loss over a mixed space: ``optimizer``
    (sgd, momentum, adam, adamw), ``schedule`` (constant, cosine, step), integer ``layers``
    (1..16), integer ``batch`` (8..512, log scale), log-scaled ``lr`` in [1e-5, 1] and a plain
    float ``dropout`` in [0, 0.5]. The best lr depends on the optimizer and the schedule, the
    best batch size on the lr (a linear scaling rule), the best depth on the optimizer, the
    best dropout on the schedule; f* = 0.8 (adamw, cosine, lr 10^-2.9, 11 layers, batch 32,
    dropout 0.1: no best value at the centre of its range, where Ax starts); Gaussian noise sd
    0.02 (2.5 % of f*).
  - ``edge4`` (60, failures): in [0, 1]^4, trials fail inside a ball (centre (0.85, 0.2,
    0.75, 0.6), radius 0.66) that covers 33 % of the cube; the objective is a bowl around the
    optimum minus the larger of two Gaussian bumps, the optimum's (depth 1, width 0.16) 0.03
    inside the ball's edge, and a decoy's (depth 0.8) 0.50 from it: a search that fears the
    edge settles on the decoy or short of the optimum. f* = -1.
  - ``embedded20`` (160): Styblinski-Tang in 5-D, rotated and moved so its optimum is at a
    fixed random point (each coordinate 1 to 3.5 from the centre), read from 5 of 20
    coordinates on [-5, 5]; 5 other coordinates add 0.05 (x - b)^2 each, the last 10 are
    irrelevant (an embedding of a low-dimensional function with weak and irrelevant
    dimensions); f* = 0.

  On ``constrained`` and ``edge4`` an infeasible point is a *failed* evaluation: dse records a
  FAILED trial (the probe job exits 1), Optuna is told ``TrialState.FAIL``, Ax
  ``mark_trial_failed``. No method is given constraint values, so all learn of the
  constraint only by failing. For these problems the report gives, per method, the failed
  trials (mean per run; dse bayesian's against :data:`FAILED_BASELINE`, measured on the agent
  of 2026-12-02) and the median distance (unit cube) of the chosen point to the edge.

* **Methods**: dse ``bayesian`` and dse ``random`` run through dse's real engine
  (``dse.build_engine`` + ``Engine.run()``) on the probe backend with a fake clock, a fresh
  workspace and durable SQLite record per run; results are read back from the record.
  ``dse optuna TPE``, ``dse optuna TPE indep`` and ``dse optuna random`` run Optuna's samplers
  through dse (``agent = "optuna"``, dse-agents[optuna]) with the peer's sampler, options and
  seed: the same numbers as the peer of the same name are what "the adapter adds nothing and
  loses nothing" looks like; so does ``dse ax`` (``agent = "ax"``, dse-agents[ax], with Ax's
  defaults) for the ``ax botorch`` peer (left out, as it is, by ``--no-ax`` and ``--quick``,
  and at P = 1 without ``--ax-p1``). The peers run ask/tell (``_sq_peers.py``): Optuna's
  ``GPSampler``, ``TPESampler`` multivariate and independent (``multivariate=False``), both
  with ``constant_liar`` at P > 1, and ``RandomSampler``; and Ax (``ax-platform`` 1.3,
  ``ax.api.client.Client(random_seed=seed)`` with its default generation strategy: a centre
  point and Sobol, then BoTorch's GP with qLogNEI; ``get_next_trials``, ``complete_trial``,
  ``mark_trial_failed``).

* **Settings**: P = 1; P = 4 ``waves`` (ask 4, evaluate, tell 4); P = 4 ``rolling`` (4
  workers; a worker asks as soon as its trial ends, the trials running pending). Every
  evaluation takes a seeded log-normal virtual duration (median 60 s): the k-th evaluation of a
  run gets the k-th duration and the k-th noise draw, whoever asked for it, so rolling runs
  interleave the same way for every method. dse's engine runs them on a fake clock; the peers'
  rolling runs are an event simulation in the same virtual time. Ax runs at P = 4 in both
  modes; at P = 1 only with ``--ax-p1`` (its P = 1 runs would double the full run's hours:
  one model fit per trial instead of per four).

* **Seeds**: 10 per cell, 20 for a noisy function (``mixed``, ``training``); every method
  gets the same seeds. On a noisy function one run's regret is partly decided by which
  near-optimal point drew the luckiest noise. Measured on 2026-12-02 (dse bayesian and TPE at
  P = 4 waves, 40 seeds): the medians of seeds 0-19 and 20-39 differed by 1.15-1.66x, and the
  10-90 % bootstrap band of a cell's median is about +-25-50 % at 20 seeds against +-20-30 %
  at 40. 40 seeds would double the noisy functions' share of a full run (about 2 hours more,
  most of it Ax on ``training``, whose mixed space costs it the most per trial) for a band
  only somewhat narrower; so 20, with each cell's quartiles in the tables and, for a noisy
  function, the noiseless regret of the best point each run evaluated (what the search found,
  apart from what the noise let it recognise). A ratio near 1 on a noisy function should be
  settled with ``--seeds 40 --functions mixed training``.

* **Score**: simple regret = f(x_best) - f*, where x_best is the evaluated, feasible point
  with the best *observed* (noisy) value and f is noiseless (a run with no feasible point is
  charged f's maximum). Each cell is the median over seeds. The ratio per function and
  setting is dse bayesian's median over the best median among all peers (Optuna's four
  samplers and Ax) in that setting, max(dse, 1e-9) / max(best, 1e-9); below 1 dse is better.
  ``worst_ratio`` is the worst over functions at P = 4 (waves and rolling), ``worst_ratio_all``
  includes P = 1. ``waves_over_rolling`` is dse bayesian's P = 4 waves median over its rolling
  one per function. Beside the medians' ratios the report gives, per issue 44, the paired
  per-seed geometric means of the same ratios, and the waves/rolling ratio, above the
  function's solved floor (``_sq_report.py``: regrets below 1e-4 of f's range count as equal).

* **Latency**: the ``bayesian`` agent built directly (``cls(space, seed=0)``) on the
  Hartmann-6, mixed and 20-parameter (``embedded20``) spaces proposes 64 points (its start-up
  design), then observes those and 936 random points (1,000 observations) in one call and is
  timed on ``propose(4, [])``: three batches, each after observing the previous one; the
  slowest is reported, in wall and in CPU seconds. Targets: under a second per batch (issue
  22), at most 0.5 s of CPU (issue 44). ``search_quality_agent.py`` gives the agent's CPU
  per batch within the runs beside the peers' logged seconds per batch.

* **Cost**: measured on 2026-12-02 on 2 cores at load 4-6 (other work beside it), Ax spent
  8.7 s per batch of 4 and 4.1 s per single trial on ``levy7`` (7 parameters, 100 trials: 223 s
  a run in waves, 395 s rolling) and 27.8 s per batch on ``embedded20`` (20 parameters, 160
  trials: 1,123 s a run in waves); its cost per trial grows with the trials observed, the
  parameters, and categoricals (it optimises over each combination). The report gives every
  peer's mean seconds per ask. A full run (all functions, the three settings, Ax at P = 4) is
  2,000 runs: ``--estimate`` prints the model's figure (about 15.5 hours on 2 workers at that
  load, 10 of them Ax; ``--ax-p1`` adds 6.5) and each run prints it up front. Ax on
  ``embedded20`` alone is 4.4 of those hours; GPSampler on the two spaces with categoricals
  costs about 9x its per-trial time on floats, most of the 5.6 hours without Ax. Measured
  on 2026-12-02 (one worker, load 2-4): every peer on every function at P = 4, waves and
  rolling, took 40-45 minutes of one core per seed (Ax 85 % of it; Ax on ``embedded20``
  rolling alone 700 s a run); dse bayesian's side of the same, 4 seeds, 330 s. Hence a log
  per side (see below): the peers' seeds accumulate over days, dse's are redone in minutes.
  ``--quick`` (2 seeds, budget 20, P = 4 waves and rolling) leaves out the two torch-based
  peers, Ax and Optuna's GPSampler (GPSampler alone took 3 minutes of it on a mixed space): a
  smoke test of the harness and of the summary's shape, 37 s at load 5.7.

Each finished run is appended as a JSON line to a log under ``benchmarks/.work`` (printed at
the start); ``--resume LOG`` skips the runs already in LOG that were made by the same code and
appends the rest; on a finished log it prints the report again. "The same code" is judged per
side: a dse run, by the sources of the benchmark's problems, runs and peers and of dse and
dse_agents; a peer's run, by the benchmark's sources and the peers' package versions alone. So
after a change to dse, ``--resume`` reruns dse's runs and keeps the peers' (the hours of Ax),
and a log of ``--methods "ax botorch"`` made once serves later runs with every method.
The peers' runs are also kept in the repository, in the peers' log (``_sq_log.py``,
``benchmarks/peers/search_quality/``: one JSON line per run, per peer and version, with
digests of the function and of the peer's settings): ``--record-peers [--seeds N] [--peers
...] [--functions ...]`` records the runs it lacks (seeds 0 to N - 1, default 20), each as it
ends, so an interrupted recording resumes. Every other run reads the peers' runs of its seeds
from the log, runs only those missing (``--peers-from-log``: none; ``--no-peer-log``: all),
says per peer how many came from the log and of which version (one line more when the log
holds another version, which is never mixed into a cell) and marks their rows ``(log)``.
Runs are spread over ``--jobs`` processes (default: one per core). BLAS/OpenMP threads are set
to 1 (unless already set in the environment) so parallel runs do not oversubscribe the cores.

Usage::

    python benchmarks/search_quality.py                   # the full run, with Ax (hours)
    python benchmarks/search_quality.py --quick           # under a minute: no Ax, no GP
    python benchmarks/search_quality.py --seeds 3 --functions levy7 edge4 \
        --settings "P=4 waves" "P=4 rolling"              # a reduced run, with Ax
    python benchmarks/search_quality.py --estimate        # the runs and their hours
    python benchmarks/search_quality.py --record-peers --peers "optuna TPE" --seeds 20
    python benchmarks/search_quality.py --seeds 20 --peers-from-log --methods "dse bayesian" \
        "optuna GP" "optuna TPE" "optuna TPE indep" "optuna random" "ax botorch"
    python benchmarks/search_quality.py --resume benchmarks/.work/search_quality-....jsonl
    python benchmarks/search_quality.py --report benchmarks/.work/search_quality-....jsonl
    python benchmarks/search_quality.py --report PEERS.jsonl DSE.jsonl   # logs merged

The last line printed is one JSON object: ``ratios`` (function -> setting -> ratio) and the
same flat as ``<function>_<setting>_ratio`` (setting as ``p1``, ``p4_waves``,
``p4_rolling``), ``worst_ratio``, ``worst_ratio_all``, ``waves_over_rolling`` and its worst,
``failed`` (function -> method -> setting -> mean failed trials per run), ``failed_baseline``,
``edge_distance``, ``bayesian_latency_1000_s`` (the slowest batch over the three spaces) and
``bayesian_latency_20d_s``, the medians and the run's parameters; and issue 44's figures
(``_sq_report.py``): ``solved_floor`` per function (1e-4 of its range: a regret below it
counts as solved), ``ratios_geomean`` (dse bayesian over the best peer as a paired per-seed
geometric mean above that floor) and its worst at P = 4, ``waves_over_rolling_solved`` (the
medians' ratio above the floor), ``waves_over_rolling_geomean`` (paired per seed) and their
worst, and ``peer_log`` (per peer: the version read, the runs from the log, the runs run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from _bench import (
    SETTINGS,
    WORK_DIR,
    Task,
    add_choices,
    add_logs,
    announce,
    choose_methods,
    open_log,
    prepare_process,
    present,
    read_logs,
    require_torch,
    run_all,
    run_fields,
    run_head,
    seeds_and_budgets,
    significant,
)
from _peers import BenchmarkError, table
from _sq_log import PEER_LOG_DIR, RECORD_SEEDS, PeerLog, fill, record, record_tasks, sources
from _sq_peers import AX_METHOD, quiet_optuna
from _sq_problems import PROBLEMS, Problem
from _sq_report import PEER_METHODS, Report, fmt, solved_floor
from _sq_runs import (
    LATENCY_BATCH,
    LATENCY_OBSERVATIONS,
    Latency,
    RunLog,
    RunResult,
    code_digests,
    init_worker,
    measure_latency,
    run_task,
    sanity_check,
)

import dse

if TYPE_CHECKING:
    from pathlib import Path

DSE_METHODS = ("dse bayesian", "dse random", "dse optuna TPE", "dse optuna TPE indep",
               "dse optuna random", "dse ax")
AX_METHODS = (AX_METHOD, "dse ax")
"""Ax natively and through dse: left out by ``--no-ax`` and ``--quick``, run at P=1 only with
``--ax-p1``."""
ALL_METHODS = (*DSE_METHODS, *PEER_METHODS)
SEEDS = 10
NOISY_SEEDS = 20
"""Default seeds for a function with noise (see the module docstring)."""
QUICK_SEEDS = 2
QUICK_BUDGET = 20
QUICK_SETTINGS = ("P=4 waves", "P=4 rolling")
LATENCY_TARGET_S = 1.0
LATENCY_CPU_TARGET_S = 0.5
"""Issue 44's target: CPU seconds of ``propose(4)`` after 1,000 observations."""
LATENCY_PROBLEMS = ("hartmann6", "mixed", "embedded20")
FAILED_BASELINE_DATE = "2026-12-02"
FAILED_BASELINE: dict[str, dict[str, float]] = {
    "constrained": {"P=1": 12.7, "P=4 waves": 13.5, "P=4 rolling": 11.6},
    "edge4": {"P=1": 4.5, "P=4 waves": 4.2, "P=4 rolling": 4.5},
}
"""dse bayesian's failed trials, mean per run of 60 trials over seeds 0-9, on the agent of
:data:`FAILED_BASELINE_DATE` (main at 05:30 UTC, commit d91d7fa): the counts later agents
must not exceed. The same runs' median regrets (and the chosen point's median distance to
the edge): constrained 7.3e-4 (0.121), 0.0194 (0.121), 0.0122 (0.123); edge4 0.081 (0.075),
0.072 (0.051), 0.0011 (0.030) at P=1, P=4 waves, P=4 rolling."""
COST_LOAD = "4-6"
"""The load average (2 cores) at which :data:`COST_PER_TRIAL` was measured."""
COST_PER_TRIAL: dict[str, tuple[float, float, float]] = {
    "dse bayesian": (0.15, 0.13, 0.15),
    "dse random": (0.01, 0.01, 0.01),
    "dse optuna TPE": (0.03, 0.03, 0.03),
    "dse optuna TPE indep": (0.06, 0.06, 0.06),
    "dse optuna random": (0.01, 0.01, 0.01),
    "optuna GP": (0.56, 0.44, 0.56),
    "optuna TPE": (0.016, 0.016, 0.017),
    "optuna TPE indep": (0.045, 0.046, 0.044),
    "optuna random": (0.002, 0.002, 0.002),
    AX_METHOD: (4.0, 2.2, 4.0),
    "dse ax": (4.0, 2.2, 4.0),
}
"""Seconds per trial (P=1, P=4 waves, P=4 rolling) of a run of 100 trials on 7 float
parameters (levy7), measured on 2026-12-02 at load :data:`COST_LOAD` in the pilot run (P=1
taken as rolling: one ask per trial)."""
MODEL_BASED = ("dse bayesian", "optuna GP", *AX_METHODS)
"""Their time per trial grows with the trials observed (a model refitted on them)."""
CATEGORICAL_FACTOR = {AX_METHOD: 2.4, "dse ax": 2.4, "optuna GP": 9.0}
"""How much more Ax and GPSampler spend per trial on a space with categoricals (they optimise
the acquisition over each combination): measured on training against the float model."""


def setting_key(label: str) -> str:
    """``P=4 waves`` -> ``p4_waves`` (for the flat JSON keys)."""
    return label.lower().replace("=", "").replace(" ", "_")


def estimate_seconds(task: Task) -> float:
    """A rough model of a run's seconds, for the estimate printed up front and the order."""
    problem = PROBLEMS[task.problem]
    rate = COST_PER_TRIAL[task.method][list(SETTINGS).index(task.setting)]
    if task.method in MODEL_BASED:
        rate *= (len(problem.space) / 7) ** 0.66 * task.budget / 100
        if any(isinstance(spec, list) for spec in problem.space.values()):
            rate *= CATEGORICAL_FACTOR.get(task.method, 1.0)
    return task.budget * rate


# -- arguments and tasks -------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true",
        help=f"{QUICK_SEEDS} seeds, budget {QUICK_BUDGET}, P=4 waves and rolling, no Ax nor"
        " GPSampler (under a minute)",
    )
    parser.add_argument(
        "--seeds", type=int,
        help=f"seeds per cell (default {SEEDS}, {NOISY_SEEDS} for a noisy function)",
    )
    parser.add_argument("--budget", type=int, help="trials per run for every function")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="runs in parallel (default: cores)"
    )
    parser.add_argument("--no-gp", action="store_true", help="leave Optuna's GPSampler out")
    parser.add_argument("--no-ax", action="store_true", help="leave Ax/BoTorch out")
    parser.add_argument("--ax-p1", action="store_true", help="run Ax at P=1 too (hours more)")
    parser.add_argument(
        "--functions", nargs="+", choices=sorted(PROBLEMS), default=list(PROBLEMS),
        help="functions to run (default: all)",
    )
    add_choices(parser, ALL_METHODS)
    parser.add_argument(
        "--record-peers", action="store_true",
        help=f"record the peers' runs the peers' log lacks (seeds 0 .. --seeds - 1, default"
        f" {RECORD_SEEDS}; --peers, --functions, --settings, --ax-p1 choose) and exit",
    )
    parser.add_argument("--peers", nargs="+", choices=PEER_METHODS, default=list(PEER_METHODS),
                        help="peers --record-peers records (default: all)")
    parser.add_argument("--peers-from-log", action="store_true",
                        help="report only the peers' runs the peers' log holds (run none)")
    parser.add_argument("--no-peer-log", action="store_true",
                        help="run every peer's runs, reading nothing from the peers' log")
    parser.add_argument("--no-latency", action="store_true", help="skip the propose timing")
    parser.add_argument(
        "--estimate", action="store_true", help="print the runs and their estimated time; exit"
    )
    add_logs(
        parser,
        "print the report of the runs in the logs (for example one of the peers' runs and one"
        " of dse's); exit",
    )
    return parser.parse_args(argv)


def make_tasks(
    args: argparse.Namespace, methods: list[str]
) -> tuple[list[Task], dict[str, int], dict[str, int], list[str]]:
    settings = args.settings or (list(QUICK_SETTINGS) if args.quick else list(SETTINGS))
    settings = [s for s in SETTINGS if s in settings]
    seeds = {
        key: args.seeds
        or (QUICK_SEEDS if args.quick else NOISY_SEEDS if PROBLEMS[key].noise_sd else SEEDS)
        for key in args.functions
    }
    budgets = {
        key: args.budget or (QUICK_BUDGET if args.quick else PROBLEMS[key].budget)
        for key in args.functions
    }
    tasks = [
        Task(method, key, label, budgets[key], seed)
        for key in args.functions
        for label in settings
        for method in methods
        if not (method in AX_METHODS and label == "P=1" and not args.ax_p1)
        for seed in range(seeds[key])
    ]
    return tasks, seeds, budgets, settings


def order(task: Task) -> tuple[int, float]:
    """Seed by seed (a run cut short has whole seeds of every cell), the longest first within
    a seed."""
    return task.seed, -estimate_seconds(task)


# -- report --------------------------------------------------------------------------------


def print_function(report: Report, problem: Problem, seeds: int, budget: int) -> None:
    key = problem.key
    print()
    print(
        f"{key}: budget {budget}, {seeds} seeds, f* = {problem.optimum:.6g}"
        + (f", {problem.description}" if problem.description else "")
    )
    settings = report.settings
    body = [
        (report.label(key, m), *(report.cell(key, s, m) for s in settings),
         f"{sum(r.seconds for s in settings for r in report.runs(key, s, m)):.0f}")
        for m in report.methods
    ]
    print(table(("median regret (quartiles)", *settings, "run s"), body))
    if problem.noise_sd:
        print(table(
            ("best evaluated, noiseless", *settings),
            [(report.label(key, m), *(report.cell(key, s, m, "found") for s in settings))
             for m in report.methods],
        ))
    counts = {f"{m} {s}": n for m in report.methods for s in settings
              if 0 < (n := len(report.runs(key, s, m))) < seeds}
    if counts:
        print("fewer seeds: " + ", ".join(f"{cell} {n}" for cell, n in counts.items()))
    parts = []
    for s in settings:
        best = report.best_peer(key, s)
        r, g = report.ratio(key, s), report.ratio_geomean(key, s)
        if best is not None and r is not None:
            parts.append(f"{s} {r:.3g} (best peer {best[0]}; paired geomean {fmt(g)})")
    if parts:
        print("dse bayesian / best peer: " + ", ".join(parts))
    wor = report.waves_over_rolling(key)
    if wor is not None:
        others = [
            f"{m.removeprefix('optuna ')} {w:.3g}"
            for m in report.methods
            if m != "dse bayesian" and (w := report.waves_over_rolling(key, m)) is not None
        ]
        print(f"waves / rolling: dse bayesian {wor:.3g}; " + ", ".join(others))
        print_solved(report, key)
    if problem.fails:
        print_failures(report, key)
        if budget != problem.budget or seeds != SEEDS:
            print(f"(the baseline is of {SEEDS} seeds at the default budget {problem.budget})")


def print_solved(report: Report, key: str) -> None:
    """The waves/rolling ratios above the solved floor: of the medians, and the paired
    per-seed geometric mean."""
    parts = []
    for m in report.methods:
        solved = report.waves_over_rolling(key, m, solved_floor(key))
        if solved is not None:
            name = m.removeprefix("optuna ")
            parts.append(f"{name} {solved:.3g} / {fmt(report.waves_rolling_geomean(key, m))}")
    print(f"waves / rolling above the solved floor ({fmt(solved_floor(key))}), median /"
          " paired geomean: " + "; ".join(parts))


def print_failures(report: Report, key: str) -> None:
    settings = report.settings
    body = []
    for m in report.methods:
        row = [m]
        for s in settings:
            failed, edge = report.mean(key, s, m, "failed"), report.median(key, s, m, "edge")
            row.append("-" if failed is None else f"{failed:.1f} / {fmt(edge)}")
        body.append(tuple(row))
    print(table(("failed per run / edge distance", *settings), body))
    baseline = FAILED_BASELINE.get(key, {})
    parts = []
    for s in settings:
        now = report.mean(key, s, "dse bayesian", "failed")
        if now is not None:
            then = baseline.get(s)
            was = "-" if then is None else f"{then:.1f}"
            parts.append(f"{s} now {now:.1f}, {FAILED_BASELINE_DATE} baseline {was}")
    if parts:
        print("dse bayesian failed trials: " + "; ".join(parts))


def print_repeats(report: Report, functions: list[str]) -> None:
    print()
    print(
        "repeats, mean per run: near (within 1e-3 of an earlier point in the unit cube) /"
        " exact (equal to one; a cache hit in dse) / failed trials"
    )
    body = []
    for key in functions:
        for m in report.methods:
            row = [f"{key} / {m}"]
            for s in report.settings:
                means = [report.mean(key, s, m, f) for f in ("repeats", "exact_repeats", "failed")]
                row.append("-" if None in means else " / ".join(f"{v:.1f}" for v in means))
            body.append(tuple(row))
    print(table(("function / method", *(f"{s} near/exact/fail" for s in report.settings)), body))


def print_costs(report: Report, functions: list[str]) -> None:
    """Seconds per ask of each peer (batch / single), mean over runs."""
    print()
    print("peers' seconds per ask, mean: batch of 4 (P=4 waves) / one trial (P=1, P=4 rolling)")
    body = []
    for key in functions:
        for m in report.methods:
            if m.startswith("dse "):
                continue
            batch = [s for lbl in report.settings for r in report.runs(key, lbl, m)
                     for s in r.batch_ask_s]
            single = [s for lbl in report.settings for r in report.runs(key, lbl, m)
                      for s in r.single_ask_s]
            body.append((f"{key} / {m}",
                         fmt(statistics.fmean(batch)) if batch else "-",
                         fmt(statistics.fmean(single)) if single else "-"))
    print(table(("function / peer", "batch s", "single s"), body))


def print_latency(
    latencies: list[Latency],
) -> tuple[float | None, float | None, float | None]:
    """The timed batches; (slowest wall seconds, slowest on 20 parameters, slowest CPU
    seconds)."""
    print()
    if not latencies:
        print("bayesian latency: not measured")
        return None, None, None
    for lat in latencies:
        print(
            f"bayesian latency ({lat.problem}, {lat.parameters} parameters,"
            f" {LATENCY_OBSERVATIONS:,} observations): observe {lat.observe_s:.3f} s,"
            f" propose({LATENCY_BATCH}) " + ", ".join(f"{s:.3f}" for s in lat.propose_s)
            + " s wall, " + ", ".join(f"{s:.3f}" for s in lat.propose_cpu_s) + " s CPU"
        )
    worst = max(max(lat.propose_s) for lat in latencies)
    worst_cpu = max(max(lat.propose_cpu_s) for lat in latencies)
    wide = [max(lat.propose_s) for lat in latencies if lat.parameters >= 20]
    met = "met" if worst < LATENCY_TARGET_S else "NOT met"
    print(
        f"target: propose under {LATENCY_TARGET_S:.0f} s per batch at"
        f" {LATENCY_OBSERVATIONS:,} observations: {met} ({worst:.3f} s)"
    )
    met = "met" if worst_cpu <= LATENCY_CPU_TARGET_S else "NOT met"
    print(f"target: propose({LATENCY_BATCH}) at most {LATENCY_CPU_TARGET_S} s of CPU at"
          f" {LATENCY_OBSERVATIONS:,} observations: {met} ({worst_cpu:.3f} s)")
    return worst, (max(wide) if wide else None), worst_cpu


def summarise(report: Report, functions: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    ratios: dict[str, dict[str, float | None]] = {}
    for key in functions:
        ratios[key] = {s: report.ratio(key, s) for s in SETTINGS}
        for s, r in ratios[key].items():
            summary[f"{key}_{setting_key(s)}_ratio"] = r
    p4 = [r for k in functions for s in ("P=4 waves", "P=4 rolling")
          if (r := ratios[k][s]) is not None]
    every = [r for k in functions for r in ratios[k].values() if r is not None]
    wor = {k: report.waves_over_rolling(k) for k in functions}
    wor_values = [v for v in wor.values() if v is not None]
    failing = [k for k in functions if PROBLEMS[k].fails]
    summary.update(paired_summary(report, functions))
    summary.update({
        "ratios": ratios,
        "worst_ratio": max(p4) if p4 else None,
        "worst_ratio_all": max(every) if every else None,
        "waves_over_rolling": wor,
        "worst_waves_over_rolling": max(wor_values) if wor_values else None,
        "failed": {
            k: {m: {s: significant(report.mean(k, s, m, "failed")) for s in report.settings}
                for m in report.methods}
            for k in failing
        },
        "failed_baseline": {k: FAILED_BASELINE.get(k) for k in failing},
        "failed_baseline_date": FAILED_BASELINE_DATE,
        "edge_distance": {
            k: {m: {s: significant(report.median(k, s, m, "edge")) for s in report.settings}
                for m in report.methods}
            for k in failing
        },
        "medians": {
            k: {s: {m: significant(report.median(k, s, m)) for m in report.methods}
                for s in report.settings}
            for k in functions
        },
    })
    return summary


def paired_summary(report: Report, functions: list[str]) -> dict[str, Any]:
    """The JSON of the solved floors and of the ratios above them (issue 44): dse bayesian's
    paired per-seed geometric mean over the best peer per setting, and its waves/rolling
    ratio above the floor (medians, and paired geomean), with their worst."""
    geomeans = {k: {s: report.ratio_geomean(k, s) for s in SETTINGS} for k in functions}
    solved = {k: report.waves_over_rolling(k, floor=solved_floor(k)) for k in functions}
    paired = {k: report.waves_rolling_geomean(k) for k in functions}
    p4 = [g for k in functions for s in ("P=4 waves", "P=4 rolling")
          if (g := geomeans[k][s]) is not None]

    def worst(values: dict[str, float | None]) -> float | None:
        return max((v for v in values.values() if v is not None), default=None)

    return {
        "solved_floor": {k: significant(solved_floor(k)) for k in functions},
        "ratios_geomean": geomeans,
        "worst_ratio_geomean": max(p4) if p4 else None,
        "waves_over_rolling_solved": solved,
        "worst_waves_over_rolling_solved": worst(solved),
        "waves_over_rolling_geomean": paired,
        "worst_waves_over_rolling_geomean": worst(paired),
    }


def print_report(
    results: list[RunResult], methods: list[str], settings: list[str], functions: list[str],
    latencies: list[Latency], head: str, from_log: set[Any] | None = None,
) -> dict[str, Any]:
    """The tables of *results* (*from_log*: the keys of the peers' runs read from the peers'
    log); returns the summary (the last line's JSON, less the run's parameters)."""
    report = Report(results, methods, settings, from_log)
    seeds, budgets = seeds_and_budgets(results, functions)
    print(
        "search quality: median simple regret (quartiles) over "
        + ", ".join(f"{n} seed(s) ({k})" for k, n in seeds.items())
        + f"; {sys.platform}, Python {sys.version.split()[0]}, dse {dse.__version__}, {head}"
    )
    for key in functions:
        print_function(report, PROBLEMS[key], seeds[key], budgets[key])
    print_repeats(report, functions)
    print_costs(report, functions)
    latency_s, latency_20, latency_cpu = print_latency(latencies)
    summary = summarise(report, functions)
    worst = summary["worst_ratio"]
    if worst is not None:
        print(f"target: dse bayesian at or below the best peer on every function at P=4:"
              f" {'met' if worst <= 1.0 else 'NOT met'} (worst ratio {worst:.3g})")
    summary.update({
        "bayesian_latency_1000_s": None if latency_s is None else round(latency_s, 4),
        "bayesian_latency_20d_s": None if latency_20 is None else round(latency_20, 4),
        "bayesian_latency_1000_cpu_s": None if latency_cpu is None else round(latency_cpu, 4),
        "methods": methods,
        "ax_included": AX_METHOD in methods,
        "ax_settings": sorted({r.task.setting for r in results if r.task.method == AX_METHOD}),
        "budgets": budgets,
        "seeds": seeds,
        "settings": settings,
    })
    return summary


def report_log(paths: list[Path]) -> int:
    """``--report LOG [LOG ...]``: the report of the runs in the logs, finished or not (a run
    in several logs counts once, from the last), over the seeds every method and setting of a
    function has."""
    try:
        results = read_logs(paths, RunLog)
    except BenchmarkError as exc:
        print(f"search_quality: error: {exc}", file=sys.stderr)
        return 1
    methods, functions, settings = present(results, ALL_METHODS, PROBLEMS)
    counts = Counter((r.task.method, r.task.problem, r.task.setting) for r in results).values()
    where = ", ".join(str(p) for p in paths)
    head = f"from {where}: {len(results)} runs, {min(counts, default=0)}-{max(counts, default=0)}"
    summary = print_report(results, methods, settings, functions, [], head + " per cell")
    summary.update({"log": where, "partial": min(counts, default=0) != max(counts, default=0)})
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.report:
        return report_log(args.report)
    prepare_process()
    if args.record_peers:
        settings = [s for s in SETTINGS if s in (args.settings or SETTINGS)]
        return record(record_tasks(args.peers, args.functions, settings,
                                   args.seeds or RECORD_SEEDS, args.budget, args.ax_p1),
                      args.jobs, order, estimate_seconds if args.estimate else None)
    WORK_DIR.mkdir(exist_ok=True)
    methods, skipped = choose_methods(
        args, ALL_METHODS, {"optuna GP": "--no-gp", **dict.fromkeys(AX_METHODS, "--no-ax")}
    )
    tasks, seeds, budgets, settings = make_tasks(args, methods)
    if args.estimate:
        hours = sum(estimate_seconds(t) for t in tasks) / max(args.jobs, 1) / 3600
        ax = sum(estimate_seconds(t) for t in tasks if t.method in AX_METHODS)
        print(f"{len(tasks)} runs of {', '.join(methods)}: about {hours:.1f} h on {args.jobs}"
              f" worker(s) at load {COST_LOAD}, {ax / 3600 / max(args.jobs, 1):.1f} h of it Ax")
        return 0
    try:
        optuna = quiet_optuna()
        if "optuna GP" in methods:
            require_torch()
        sanity_check(methods)
        log = open_log(RunLog, args.resume, {"code": code_digests()})
    except BenchmarkError as exc:
        print(f"search_quality: error: {exc}", file=sys.stderr)
        return 1
    peer_log = PeerLog(PEER_LOG_DIR if not args.no_peer_log else WORK_DIR / "no-peer-log")
    kept, taken = fill(tasks, peer_log, log.done, log.add, args.peers_from_log)
    peer_lines, peer_sources = sources(tasks, kept, taken, peer_log)
    tasks = kept
    todo = [t for t in tasks if t.key not in log.done]
    estimate = sum(estimate_seconds(t) for t in todo) / max(args.jobs, 1)
    announce(log, tasks, methods, args.jobs,
             f"estimate {estimate / 60:.0f} min at load {COST_LOAD}; ")
    started = time.perf_counter()
    try:
        results = run_all(tasks, log, args.jobs, run_task, init_worker,
                          ("optuna GP" in methods, any(m in methods for m in AX_METHODS)),
                          order)
        latencies: list[Latency] = []
        if "dse bayesian" in methods and not args.no_latency:
            print("timing bayesian propose after 1,000 observations ...", file=sys.stderr)
            latencies = [measure_latency("bayesian", PROBLEMS[k]) for k in LATENCY_PROBLEMS]
    except BenchmarkError as exc:
        print(f"search_quality: error: {exc}", file=sys.stderr)
        return 1
    finally:
        log.close()
    wall = time.perf_counter() - started
    head = run_head(optuna, wall)
    for method, why in skipped.items():
        print(f"{method}: {why}")
    for method in (m for m in AX_METHODS if m in methods):
        if "P=1" in settings and not args.ax_p1:
            print(f"{method}: P=1 not run (--ax-p1 runs it)")
    print("\n".join(peer_lines))
    summary = print_report(results, methods, settings, args.functions, latencies, head, taken)
    summary.update({"budgets": budgets, "seeds": seeds, "peer_log": peer_sources,
                    **run_fields(args, skipped, optuna, log.path, wall)})
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
