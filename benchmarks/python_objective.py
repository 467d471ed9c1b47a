"""Python function objectives: ``dse.run(campaign, objective)`` against Optuna's ``n_jobs``.

What is measured (one process, same machine, one run after the other, each shape and system
repeated ``--repeat`` times and the median kept):

* **dse**: ``dse.run`` of a campaign of N trials of the function ``_pyobjective.objective``
  (it sleeps the trial's ``sleep`` param, then returns a number), random agent, at
  ``max_parallelism = 4`` with the local backend declaring 4 CPU slots, in ``rolling`` and
  ``waves`` mode, quiet. Every trial is a process of its own under dse's attempt wrapper (its
  own time limit and kill), its result recorded durably in a fresh SQLite workspace. The
  local backend starts such trials warm: a server imports the function once and each trial
  is a fork of it (``dse_local/_warm.py``).
* **Optuna** (the peer; ``pip install optuna``): ``study.optimize`` of the same function with
  ``n_jobs = 4`` threads, in-memory storage, ``RandomSampler``: every trial a call in the
  controller's own process, with no isolation, no record on disk and no time limit.

The wall time of each is from the call (``dse.run``; ``create_study``) to its return, so dse's
includes opening the record, its environment checks and starting its wrappers. Both run once
untimed first (imports, the disk's caches). Python writes its bytecode caches here, as on a
user's machine (``PYTHONDONTWRITEBYTECODE`` is unset for the run): the trial processes import
dse.

Shapes (issue 43): 40 x 0.5 s and 200 x 0.05 s at 4 in parallel; the ideal is N x sleep / 4.
Target: dse's wall <= 1.1x Optuna's on both, in both modes.

Usage::

    python benchmarks/python_objective.py             # 3 repeats (about a minute and a half)
    python benchmarks/python_objective.py --quick     # one repeat (under a minute)

The last line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _peers import import_optuna, table
from _pyobjective import objective

import dse

if TYPE_CHECKING:
    from collections.abc import Callable

PARALLELISM = 4
SHAPES = ((40, 0.5), (200, 0.05))
TARGET = 1.1
WORK_DIR = Path(__file__).resolve().parent / ".work"


def campaign(trials: int, sleep: float, mode: str) -> dict[str, Any]:
    return {
        "campaign": {"name": "pyobj", "agent": "random", "max_trials": trials,
                     "max_parallelism": PARALLELISM, "mode": mode},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}, "sleep": [sleep]},
        "objectives": [{"metric": "loss"}],
        "backend": {"local": {"cpus": PARALLELISM}},
    }


def run_dse(trials: int, sleep: float, mode: str) -> float:
    with tempfile.TemporaryDirectory(dir=WORK_DIR) as tmp:
        start = time.perf_counter()
        results = dse.run(campaign(trials, sleep, mode), objective, workspace=tmp,
                          fresh=True, quiet=True)
        wall = time.perf_counter() - start
        done = sum(1 for t in results.trials if t.status.value == "completed")
        if done != trials:
            sys.exit(f"dse completed {done} of {trials} trials")
    return wall


def run_optuna(optuna: Any, trials: int, sleep: float) -> float:
    def trial(t: Any) -> float:
        return objective({"x": t.suggest_float("x", 0.0, 1.0), "sleep": sleep})

    start = time.perf_counter()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(trial, n_trials=trials, n_jobs=PARALLELISM)
    wall = time.perf_counter() - start
    if len(study.trials) != trials:
        sys.exit(f"optuna ran {len(study.trials)} of {trials} trials")
    return wall


def median_of(repeat: int, run: Callable[[], float]) -> tuple[float, float, float]:
    walls = [run() for _ in range(repeat)]
    return statistics.median(walls), min(walls), max(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repeat (under a minute)")
    parser.add_argument("--repeat", type=int, default=None, help="runs of each (default 3)")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    warnings.simplefilter("ignore")
    optuna = import_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    WORK_DIR.mkdir(exist_ok=True)
    run_dse(PARALLELISM, 0.0, "rolling")  # untimed: imports, caches
    run_optuna(optuna, PARALLELISM, 0.0)
    load = os.getloadavg()[0]
    rows: list[list[str]] = []
    figures: dict[str, Any] = {}
    met = True
    for trials, sleep in SHAPES:
        ideal = trials * sleep / PARALLELISM
        shape = f"{trials}x{sleep:g}s"
        print(f"running {shape} at P={PARALLELISM} ...", file=sys.stderr)
        peer = median_of(repeat, functools.partial(run_optuna, optuna, trials, sleep))
        walls = {mode: median_of(repeat, functools.partial(run_dse, trials, sleep, mode))
                 for mode in ("rolling", "waves")}
        for name, (wall, low, high) in [*((f"dse {m}", w) for m, w in walls.items()),
                                        ("optuna n_jobs=4", peer)]:
            rows.append([name, shape, f"{wall:.2f}", f"{low:.2f}-{high:.2f}", f"{ideal:.2f}",
                         f"{wall / ideal:.3f}", f"{wall / peer[0]:.2f}x"])
        for mode, (wall, _, _) in walls.items():
            ratio = wall / peer[0]
            figures[f"{shape}_{mode}_over_optuna"] = round(ratio, 3)
            figures[f"{shape}_{mode}_wall_s"] = round(wall, 3)
            met = met and ratio <= TARGET
        figures[f"{shape}_optuna_wall_s"] = round(peer[0], 3)
        figures[f"{shape}_ideal_s"] = ideal
    print(f"Python function objectives at P={PARALLELISM}, median of {repeat} run(s), load"
          f" {load:.1f} at start, {os.getloadavg()[0]:.1f} at the end")
    print(table(["method", "shape", "wall s", "range", "ideal s", "/ideal", "/optuna"], rows))
    print(f"target: dse's wall <= {TARGET}x Optuna's on every shape and mode:"
          f" {'met' if met else 'NOT met'}")
    print(json.dumps({**figures, "repeat": repeat, "load": round(load, 2),
                      "target": TARGET, "target_met": met}))


if __name__ == "__main__":
    main()
