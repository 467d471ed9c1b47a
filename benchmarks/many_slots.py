"""Many slots: 1,000 x ``sleep 1`` at P = 16 on the local backend, against the ideal and Optuna.

What is measured (one process, same machine, one run after the other; ``--repeat N`` runs each
system N times, alternating):

* **dse**: ``dse.run`` on a campaign given as a dict — what ``dse run`` does for one campaign:
  the campaign checked, the installed plugins, the workspace lock, a SQLite record in a fresh
  workspace, the engine, the record read back — of N trials, proposed by the grid agent over
  one integer parameter (N distinct configurations), ``mode = "rolling"`` (a slot refilled as
  soon as it frees), ``max_parallelism = P``, on the local backend declaring P slots
  (``[backend.local] cpus = P``; each trial asks 1 CPU). Each trial is a real process tree under
  dse's attempt wrapper running ``sh -c 'sleep S && printf ... > "$DSE_TRIAL_DIR/result.json"'``:
  the sleep and the result file the trial contract asks for (a trial without one is never
  scored); the objective is ``spend.wall_s``, which dse measures itself. Wall time is the whole
  ``dse.run`` call, from before the campaign is parsed to its return; every trial must be
  recorded completed.
* **Optuna** (the peer, measured in the same run; ``pip install optuna``): ``create_study`` (in
  memory, ``RandomSampler``) and ``study.optimize(objective, n_trials=N, n_jobs=P)``, the
  objective suggesting one integer and running ``subprocess.run(["sleep", S])``: no record,
  no result file, no time limit — the lightest correct way to run a process per trial from a
  Python optimiser. With ``--same-command`` it also runs dse's very command (``sh -c 'sleep S
  && printf ...'``, its result file included), to tell the command's cost from dse's.
* **Ray Tune** is not measured: its published figure for this shape (10,000 x 1 s trials on
  one 16-CPU node: 715.27 s against 625 s minimum, 1.14x; "Scalability and Overhead Benchmarks
  for Ray Tune", docs.ray.io/en/latest/tune/tutorials/tune-scalability.html) is printed as a
  reference row, labelled as such.

The ideal is ceil(N / P) x S: each slot runs its share of trials back to back with no gap.
The ratio is wall / ideal; "ms/trial/slot" is (wall - ideal) / ceil(N / P): what each trial
costs the slot it runs in beyond its sleep (Ray Tune's: 144 ms).

Where dse's time goes, read back from its record (each attempt's ``started_at`` and
``ended_at``, as its wrapper stamped them in its exit file): **setup** (the call to the first
attempt's start), **span** (first start to last end), **close** (last end to the call's
return: the final pass and the record read back into ``dse.Results``), **hand-off** (the k-th
start after the first P against the (k - P)-th end: from a slot freeing to its next trial
starting — the wrapper's exit, the controller seeing it and asking the wrapper server for the
next attempt's wrapper) and **stretch** (an attempt's duration beyond S: its command handed to
the process forked ahead for it, ``sh``, the result file, the wrapper seeing it end).

Usage::

    python benchmarks/many_slots.py             # 1,000 x sleep 1 at P = 16: about 2.5 minutes
    python benchmarks/many_slots.py --quick     # 160 x sleep 0.2 at P = 16: under a minute
    python benchmarks/many_slots.py --repeat 3  # each system 3 times; the medians are kept

Target (issue 43): dse's wall <= 1.02x the ideal (the median of the runs), at the full
shape; ``--quick``'s 0.2 s trials leave a fixed cost (the start, the first imports) five
times the weight, so it checks the program, not the target.

The last line printed is one JSON object: dse_ratio_to_ideal, optuna_ratio_to_ideal,
dse_wall_s, optuna_wall_s, ideal_s (medians; every run's walls too), the breakdown of dse's
time, the load, the target and whether it was met.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _peers import BenchmarkError, import_optuna, table

import dse

WORK_DIR = Path(__file__).resolve().parent / ".work"
# Records live beside the benchmark, as a user's `.dse/` lives beside the campaign file; the
# machine's /tmp may sit on a different, slower filesystem (--work-dir to choose).
TARGET = 1.02
"""dse's wall time over the ideal (issue 43)."""
RAY_TUNE = (10_000, 16, 1.0, 715.27)
"""Ray Tune's published run of this shape: trials, CPUs, seconds a trial, wall seconds."""
RESULT = "printf '{\"complete\": true, \"metrics\": {}}' > \"$DSE_TRIAL_DIR/result.json\""


@dataclass(frozen=True, slots=True)
class Shape:
    trials: int
    sleep: float
    parallelism: int

    @property
    def ideal(self) -> float:
        return math.ceil(self.trials / self.parallelism) * self.sleep

    @property
    def label(self) -> str:
        return f"{self.trials:,} x sleep {self.sleep:g} at P={self.parallelism}"


@dataclass(frozen=True, slots=True)
class DseRun:
    wall: float
    setup: float
    """From the call to the first attempt's start."""
    span: float
    """From the first attempt's start to the last one's end."""
    close: float
    """From the last attempt's end to the call's return."""
    handoffs: list[float]
    """Each start after the first P against the end that freed its slot."""
    stretch: list[float]
    """Each attempt's measured duration beyond the sleep."""


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))] if values else math.nan


def campaign(shape: Shape, workdir: Path, mode: str) -> dict[str, Any]:
    """The campaign: *shape*'s trials as distinct grid points, P slots declared."""
    return {
        "campaign": {"name": "many-slots", "agent": "grid", "mode": mode,
                     "max_parallelism": shape.parallelism, "max_trials": shape.trials},
        "space": {"i": {"type": "int", "low": 0, "high": shape.trials - 1}},
        "objectives": [{"metric": "spend.wall_s"}],
        # workdir: the trials run in the scratch directory, and no git checkout is scanned
        # for the workload's code version (`sh` and `sleep` are none of the repository's).
        "environment": {"command": ["sh", "-c", f"sleep {shape.sleep:g} && {RESULT}"],
                        "workdir": str(workdir)},
        "backend": {"local": {"cpus": shape.parallelism}},
    }


def run_dse(shape: Shape, work_dir: Path, mode: str) -> DseRun:
    """One ``dse.run`` of *shape* in a fresh workspace under *work_dir*; its wall time and
    where it went, from the record. Raises :class:`BenchmarkError` unless every trial
    completed."""
    with tempfile.TemporaryDirectory(prefix="many-slots-", dir=work_dir) as tmp:
        spec = campaign(shape, Path(tmp), mode)
        # The record's times are the wall clock's; perf_counter times the call.
        called = time.time()
        start = time.perf_counter()
        results = dse.run(spec, workspace=Path(tmp) / ".dse", quiet=True)
        wall = time.perf_counter() - start
        returned = called + wall
    counts = results.counts
    if counts != {"completed": shape.trials}:
        raise BenchmarkError(f"dse did not complete every trial: {counts}")
    attempts = [a for t in results.trials for a in t.attempts]
    starts = sorted(a.started_at for a in attempts if a.started_at is not None)
    ends = sorted(a.ended_at for a in attempts if a.ended_at is not None)
    if len(starts) != shape.trials or len(ends) != shape.trials:
        raise BenchmarkError(f"{len(starts)} starts and {len(ends)} ends recorded for"
                             f" {shape.trials} trials")
    p = shape.parallelism
    return DseRun(
        wall=wall,
        setup=starts[0] - called,
        span=ends[-1] - starts[0],
        close=returned - ends[-1],
        handoffs=[starts[k] - ends[k - p] for k in range(p, len(starts))],
        stretch=[a.ended_at - a.started_at - shape.sleep for a in attempts
                 if a.started_at is not None and a.ended_at is not None],
    )


def run_optuna(shape: Shape, work_dir: Path, same_command: bool = False) -> float:
    """Optuna's optimize with ``n_jobs = P`` threads, one ``sleep`` process per trial (with
    *same_command*: dse's trials' command, writing its result file in a directory of its own);
    wall seconds of ``create_study`` and ``optimize``."""
    optuna = import_optuna()
    argv = ["sleep", f"{shape.sleep:g}"]
    if same_command:
        argv = ["sh", "-c", f"sleep {shape.sleep:g} && {RESULT}"]

    def objective(trial: Any) -> float:
        number = trial.suggest_int("i", 0, shape.trials - 1)
        if not same_command:
            subprocess.run(argv, check=True)
            return 1.0
        trial_dir = Path(tmp) / f"{trial.number:06d}"
        trial_dir.mkdir()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DSE_TRIAL_DIR": str(trial_dir)}
        subprocess.run(argv, check=True, env=env, cwd=trial_dir)
        return float(number)

    with tempfile.TemporaryDirectory(prefix="many-slots-optuna-", dir=work_dir) as tmp:
        start = time.perf_counter()
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        study.optimize(objective, n_trials=shape.trials, n_jobs=shape.parallelism)
        wall = time.perf_counter() - start
    finished = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    if finished != shape.trials:
        raise BenchmarkError(f"optuna completed {finished} of {shape.trials} trials")
    return wall


def _row(name: str, shape: Shape, wall: float) -> tuple[str, ...]:
    ideal = shape.ideal
    slot_ms = (wall - ideal) / math.ceil(shape.trials / shape.parallelism) * 1000
    return (name, shape.label, f"{wall:.2f}", f"{ideal:.1f}", f"{wall / ideal:.4f}",
            f"{slot_ms:.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="160 x sleep 0.2 at P = 16 (under a minute)")
    parser.add_argument("--trials", type=int, help="trials per run (default 1000; quick 160)")
    parser.add_argument("--sleep", type=float, help="seconds a trial sleeps (default 1; quick 0.2)")
    parser.add_argument("--parallelism", type=int, default=16,
                        help="trials at once, and the local backend's slots (default 16)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each system this many times, alternating; medians kept")
    parser.add_argument("--mode", choices=("rolling", "waves"), default="rolling",
                        help="dse's campaign mode (default rolling)")
    parser.add_argument("--no-optuna", action="store_true", help="skip the peer")
    parser.add_argument("--same-command", action="store_true",
                        help="also run Optuna on dse's command (sh, sleep, the result file)")
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR,
                        help="where the workspaces are made (default benchmarks/.work)")
    args = parser.parse_args(argv)
    shape = Shape(
        trials=args.trials or (160 if args.quick else 1000),
        sleep=args.sleep if args.sleep is not None else (0.2 if args.quick else 1.0),
        parallelism=args.parallelism,
    )
    if shape.trials < 1 or shape.sleep < 0 or shape.parallelism < 1 or args.repeat < 1:
        parser.error("--trials, --parallelism and --repeat must be >= 1, --sleep >= 0")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()

    dse_runs: list[DseRun] = []
    optuna_walls: list[float] = []
    same_walls: list[float] = []
    try:
        if not args.no_optuna:
            import_optuna()  # before any clock starts, and fail before the runs
        for i in range(args.repeat):
            print(f"running dse ({i + 1}/{args.repeat}): {shape.label}, {args.mode} ...",
                  file=sys.stderr, flush=True)
            dse_runs.append(run_dse(shape, args.work_dir, args.mode))
            if not args.no_optuna:
                print(f"running optuna n_jobs={shape.parallelism} ({i + 1}/{args.repeat}) ...",
                      file=sys.stderr, flush=True)
                optuna_walls.append(run_optuna(shape, args.work_dir))
            if args.same_command and not args.no_optuna:
                print(f"running optuna n_jobs={shape.parallelism} on dse's command"
                      f" ({i + 1}/{args.repeat}) ...", file=sys.stderr, flush=True)
                same_walls.append(run_optuna(shape, args.work_dir, same_command=True))
    except BenchmarkError as exc:
        print(f"many_slots: error: {exc}", file=sys.stderr)
        return 1
    load_after = os.getloadavg()

    ideal = shape.ideal
    dse_walls = [r.wall for r in dse_runs]
    dse_wall, optuna_wall = _median(dse_walls), _median(optuna_walls)
    body = [_row(f"dse {args.mode} (run {i + 1})", shape, w) for i, w in enumerate(dse_walls)]
    body += [_row(f"optuna n_jobs (run {i + 1})", shape, w) for i, w in enumerate(optuna_walls)]
    body += [_row(f"optuna, dse's command (run {i + 1})", shape, w)
             for i, w in enumerate(same_walls)]
    if args.repeat > 1:
        body.append(_row("dse median", shape, dse_wall))
        if optuna_walls:
            body.append(_row("optuna median", shape, optuna_wall))
        if same_walls:
            body.append(_row("optuna, dse's command, median", shape, _median(same_walls)))
    ray_n, ray_p, ray_s, ray_wall = RAY_TUNE
    body.append(_row("ray tune (PUBLISHED, not measured)", Shape(ray_n, ray_s, ray_p), ray_wall))
    print(f"many slots: {shape.label} on the local backend ({shape.parallelism} slots declared),"
          f" {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, dse {dse.__version__},"
          f" load {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(table(("method", "shape", "wall s", "ideal s", "ratio", "ms/trial/slot"), body))

    print("where dse's time went (from the record; run 1 includes dse's first imports):")
    for i, r in enumerate(dse_runs):
        print(f"  run {i + 1}: setup {r.setup:.3f} s, span {r.span:.3f} s"
              f" ({r.span / ideal:.4f}x ideal), close {r.close:.3f} s; hand-off median"
              f" {_median(r.handoffs) * 1000:.1f} ms, p90 {_p90(r.handoffs) * 1000:.1f} ms,"
              f" max {max(r.handoffs, default=math.nan) * 1000:.1f} ms; stretch median"
              f" {_median(r.stretch) * 1000:.1f} ms, p90 {_p90(r.stretch) * 1000:.1f} ms")
    handoffs = [h for r in dse_runs for h in r.handoffs]
    stretch = [s for r in dse_runs for s in r.stretch]
    setup = _median([r.setup for r in dse_runs])
    span = _median([r.span for r in dse_runs])
    close = _median([r.close for r in dse_runs])
    ratio = dse_wall / ideal
    met = ratio <= TARGET
    print(f"target: dse <= {TARGET}x ideal: {'met' if met else 'NOT met'} ({ratio:.4f}x;"
          f" Ray Tune published {ray_wall / Shape(ray_n, ray_s, ray_p).ideal:.3f}x)")
    print(json.dumps({
        "dse_ratio_to_ideal": round(ratio, 4),
        "optuna_ratio_to_ideal": round(optuna_wall / ideal, 4) if optuna_walls else None,
        "dse_wall_s": round(dse_wall, 3),
        "optuna_wall_s": round(optuna_wall, 3) if optuna_walls else None,
        "ideal_s": round(ideal, 3),
        "dse_walls_s": [round(w, 3) for w in dse_walls],
        "optuna_walls_s": [round(w, 3) for w in optuna_walls],
        "optuna_same_command_walls_s": [round(w, 3) for w in same_walls],
        "dse_overhead_ms_per_slot_trial": round(
            (dse_wall - ideal) / math.ceil(shape.trials / shape.parallelism) * 1000, 2),
        "dse_setup_s": round(setup, 3),
        "dse_span_s": round(span, 3),
        "dse_close_s": round(close, 3),
        "dse_handoff_ms_median": round(_median(handoffs) * 1000, 2),
        "dse_stretch_ms_median": round(_median(stretch) * 1000, 2),
        "ray_tune_published": {"trials": ray_n, "cpus": ray_p, "trial_s": ray_s,
                                "wall_s": ray_wall, "ratio_to_ideal": round(
                                    ray_wall / Shape(ray_n, ray_s, ray_p).ideal, 4)},
        "trials": shape.trials,
        "sleep_s": shape.sleep,
        "parallelism": shape.parallelism,
        "mode": args.mode,
        "repeat": args.repeat,
        "quick": bool(args.quick),
        "load": {"before": [round(x, 2) for x in load_before],
                 "after": [round(x, 2) for x in load_after]},
        "target": TARGET,
        "target_met": met,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
