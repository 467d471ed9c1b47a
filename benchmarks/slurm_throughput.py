"""Short trials on Slurm: dse (default settings) against real submitit ``map_array``, same run.

What runs (the running Slurm cluster, one tool after the other, on the same durations):

* **dse**: a real campaign file with *default* Slurm settings — ``backend = "slurm"`` and no
  ``[backend.slurm]`` table, ``mode = "rolling"``, the ``random`` agent with a fixed seed,
  ``max_parallelism`` = the cluster's slots (6: ``n1`` to ``n3``, 2 CPUs each), ``time_limit =
  "1m"``, one float param ``seconds`` in [1, 3] — run through the engine's public API
  (:func:`dse.load_campaign`, :func:`dse.build_engine`, ``Engine.run``), as ``dse run`` does.
  The trial is ``python trial.py``: it reads its params file, notes the time, sleeps
  ``seconds``, notes the time and writes both in ``result.json``.
* **submitit** (from PyPI, the real library): ``AutoExecutor`` with
  ``slurm_array_parallelism`` = the same slots, one CPU per task (its other settings default), and
  ``map_array`` over the same durations (dse's trials' params, in trial order); the function
  notes the time, sleeps, notes the time and returns both. Its results are gathered with
  ``job.result()`` as a user would.

Definitions (both tools measured the same way, from what each trial itself recorded: its
start ``s`` and end ``e`` around the sleep, wall clock, and the node it ran on):

* **wall**: from just before the submission (``Engine.run``; ``map_array``) to the last result
  in hand (dse's run returned; submitit's last ``result()``).
* **utilisation**: ``sum(e - s) / (slots * (max(e) - min(s)))``: busy slot-seconds over the
  slot-seconds of the span from the first start to the last end. Everything that is not the
  trial's own sleep — queue wait, ``srun``, interpreter start, the controller — counts as idle.
* **refill gap**: per node, the events in time order; each start after the node's first
  ``cpus`` starts is matched to the earliest unmatched end before it on that node (the slot it
  refills), and the gap is ``start - end``. The median over all matched pairs is reported.
* **Slurm calls**: every ``sbatch``, ``squeue``, ``sacct``, ``scancel``, ``scontrol``,
  ``sinfo`` and ``srun`` run by the tool's controller process (the benchmark puts logging
  wrappers of those commands first on ``PATH``; a call made inside a Slurm job — dse's pilot
  starting its steps, submitit's batch script starting its task — is logged apart and shown,
  not counted). ``slurm_calls_per_trial`` is the controller's count over the whole sweep
  divided by the trials; dse's count is checked against its backend's own
  counter (:attr:`dse.Backend.commands`).

The cluster is shared with the Slurm tests: the benchmark holds the file lock they take
(``<tmp>/dse-slurm-cluster.lock``) while it measures, and it cancels every job it submitted,
whatever happens. Work files live in ``benchmarks/.work/slurm_throughput/<run>/``.

Usage::

    python benchmarks/slurm_throughput.py           # 300 trials each, about five minutes
    python benchmarks/slurm_throughput.py --quick   # 36 trials each, under a minute

Needs a Slurm cluster with accounting (``sacct``) and ``submitit``; without them it prints one
line and exits 2. The last line printed is one JSON object: ``dse_wall_s``,
``submitit_wall_s``, ``ratio`` (dse / submitit; below 1 is better), ``utilisation``,
``slurm_calls_per_trial``, ``median_refill_gap_s`` (dse's), the same figures for submitit
(``submitit_*``), the targets and the load.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from _peers import BenchmarkError, table

import dse

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

WORK_DIR = Path(__file__).resolve().parent / ".work" / "slurm_throughput"
LOCK_NAME = "dse-slurm-cluster.lock"
"""The lock the Slurm tests hold (in the temp directory): one measurement or test at a time."""
SLOTS = 6
PARTITION = "batch"
COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "srun")
TARGETS = {"ratio": 1.0, "utilisation": 0.9, "slurm_calls_per_trial": 0.1,
           "median_refill_gap_s": 0.5}
SHIM = """#!/bin/sh
if [ -n "$SLURM_JOB_ID" ]; then where=job; else where=controller; fi
printf '%s %s\\n' "{name}" "$where" >> "$DSE_BENCH_CALLS"
exec {real} "$@"
"""
TRIAL = """\
import json, os, socket, time
with open(os.environ["DSE_PARAMS_FILE"]) as handle:
    seconds = json.load(handle)["seconds"]
started = time.time()
time.sleep(seconds)
ended = time.time()
node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
with open(os.path.join(os.environ["DSE_TRIAL_DIR"], "result.json"), "w") as handle:
    json.dump({"complete": True, "metrics": {"slept": seconds}, "slept": seconds,
               "started": started, "ended": ended, "node": node}, handle)
"""
CAMPAIGN = """\
[campaign]
name = "throughput"
agent = "random"
backend = "slurm"
mode = "rolling"
max_parallelism = {slots}
max_trials = {trials}
seed = 19

[environment]
command = ["python", "trial.py"]
time_limit = "1m"

[[objectives]]
metric = "slept"
direction = "minimize"

[space]
seconds = {{ type = "float", low = 1.0, high = 3.0 }}
"""


@dataclass(slots=True)
class Run:
    """One tool's sweep: what each trial recorded, and what it cost."""

    tool: str
    wall_s: float = 0.0
    spans: list[tuple[float, float, str]] = field(default_factory=list)
    controller_calls: Counter[str] = field(default_factory=Counter)
    job_calls: Counter[str] = field(default_factory=Counter)
    note: str = ""

    def utilisation(self, slots: int) -> float:
        first = min(s for s, _, _ in self.spans)
        last = max(e for _, e, _ in self.spans)
        return sum(e - s for s, e, _ in self.spans) / (slots * (last - first))

    def refill_gaps(self, cpus_per_node: dict[str, int]) -> list[float]:
        gaps: list[float] = []
        for node in {n for _, _, n in self.spans}:
            events = sorted([(s, 1) for s, _, n in self.spans if n == node]
                            + [(e, 0) for _, e, n in self.spans if n == node])
            ends: list[float] = []
            starts = 0
            for at, kind in events:
                if kind == 0:
                    ends.append(at)
                    continue
                starts += 1
                if starts > cpus_per_node.get(node, 1) and ends:
                    gaps.append(at - ends.pop(0))
        return gaps

    def calls(self) -> int:
        return sum(self.controller_calls.values())


def run_slurm(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        raise BenchmarkError(f"{argv[0]} failed: {proc.stderr.strip()[:200]}")
    return proc.stdout


def cluster_cpus() -> dict[str, int]:
    """CPUs of each node of the partition, or :class:`BenchmarkError` when no cluster answers."""
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise BenchmarkError(f"{', '.join(missing)} not on PATH: this benchmark needs Slurm")
    out = run_slurm(["sinfo", "--noheader", "--Node", f"--partition={PARTITION}",
                     "--format=%N %c %t"])
    nodes = {n: int(c) for n, c, state in (line.split() for line in out.splitlines())
             if not state.startswith(("down", "drain"))}
    if sum(nodes.values()) < SLOTS:
        raise BenchmarkError(f"partition {PARTITION} has {nodes}; {SLOTS} CPUs needed")
    run_slurm(["sacct", "-X", "--noheader", "--starttime=now-1minutes"])
    return nodes


@contextlib.contextmanager
def cluster_lock() -> Iterator[None]:
    """Hold the lock the Slurm tests take, so none of them runs beside the measurement."""
    with open(Path(tempfile.gettempdir()) / LOCK_NAME, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def install_shims(bin_dir: Path) -> None:
    """Logging wrappers of the Slurm commands, first on ``PATH`` from now on."""
    bin_dir.mkdir(parents=True)
    for name in COMMANDS:
        real = shutil.which(name)
        assert real is not None
        shim = bin_dir / name
        shim.write_text(SHIM.format(name=name, real=real))
        shim.chmod(0o755)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def read_calls(log: Path, into: Run) -> None:
    with contextlib.suppress(FileNotFoundError):
        for line in log.read_text().splitlines():
            name, where = line.split()
            (into.controller_calls if where == "controller" else into.job_calls)[name] += 1


def run_dse(work: Path, trials: int) -> tuple[Run, list[float]]:
    """The campaign through the engine's public API; its trials' durations, in order."""
    work.mkdir(parents=True)
    (work / "trial.py").write_text(TRIAL)
    path = work / "campaign.toml"
    path.write_text(CAMPAIGN.format(slots=SLOTS, trials=trials))
    log = work / "calls.log"
    os.environ["DSE_BENCH_CALLS"] = str(log)
    campaign = dse.load_campaign(path)
    campaign.workspace.mkdir(parents=True, exist_ok=True)
    store = dse.Store(campaign.workspace / "dse.sqlite")
    run = Run("dse")
    engine = dse.build_engine(campaign, store=store)
    backend = engine.backend
    run.note = type(backend).__name__
    began = time.monotonic()
    try:
        result = engine.run()
        run.wall_s = time.monotonic() - began
    finally:
        with contextlib.suppress(Exception):
            backend.shutdown()
        store.close()
    own = dict(getattr(backend, "commands", {}))
    read_calls(log, run)
    if own != dict(run.controller_calls):
        run.note += f"; backend counted {own}"
    if result.end_reason.value not in ("max_trials", "agent_exhausted"):
        raise BenchmarkError(f"dse ended {result.end_reason.value}: {result}")
    durations = []
    for trial_dir in sorted((p for p in (campaign.workspace / campaign.name).glob("run-*/*")
                             if (p / "result.json").exists()),
                            key=lambda p: int(p.name.rsplit("-", 1)[-1])):
        doc = json.loads((trial_dir / "result.json").read_text())
        run.spans.append((doc["started"], doc["ended"], doc["node"]))
        durations.append(float(doc["slept"]))
    if len(run.spans) != trials:
        raise BenchmarkError(f"dse: {len(run.spans)} results for {trials} trials")
    return run, durations


def sleep_for(seconds: float) -> tuple[float, float, str]:
    """The submitit task: the same work as dse's trial, its own record of it."""
    import os as os_
    import socket
    import time as time_
    started = time_.time()
    time_.sleep(seconds)
    return started, time_.time(), os_.environ.get("SLURMD_NODENAME") or socket.gethostname()


def run_submitit(work: Path, durations: Sequence[float], submitted: list[str]) -> Run:
    try:
        import submitit
    except ImportError:
        raise BenchmarkError("submitit is not installed: `pip install submitit`") from None
    work.mkdir(parents=True)
    log = work / "calls.log"
    os.environ["DSE_BENCH_CALLS"] = str(log)
    executor = submitit.AutoExecutor(folder=work / "%j", cluster="slurm")
    executor.update_parameters(slurm_array_parallelism=SLOTS, cpus_per_task=1,
                               tasks_per_node=1, nodes=1, slurm_partition=PARTITION)
    run = Run("submitit", note=f"submitit {submitit.__version__}")
    began = time.monotonic()
    jobs = executor.map_array(sleep_for, list(durations))
    submitted += sorted({job.job_id.split("_", 1)[0] for job in jobs})
    run.spans = [job.result() for job in jobs]
    run.wall_s = time.monotonic() - began
    read_calls(log, run)
    return run


def cancel_leftovers(run_dir: Path, submitted: Sequence[str]) -> None:
    """Cancel every job the benchmark submitted that may still be queued."""
    ids = list(submitted)
    for pilot_id in run_dir.rglob("pilot.id"):
        ids.append(pilot_id.read_text().strip())
    ids = [i for i in ids if i.isdigit()]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=30, check=False)


def figures(run: Run, trials: int, cpus: dict[str, int]) -> dict[str, float]:
    gaps = run.refill_gaps(cpus)
    return {
        "wall_s": round(run.wall_s, 2),
        "utilisation": round(run.utilisation(SLOTS), 3),
        "slurm_calls_per_trial": round(run.calls() / trials, 4),
        "median_refill_gap_s": round(statistics.median(gaps), 3) if gaps else float("nan"),
        "p90_refill_gap_s": round(sorted(gaps)[int(0.9 * (len(gaps) - 1))], 3) if gaps else 0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="36 trials each, under a minute")
    parser.add_argument("--trials", type=int, default=None, help="trials per tool (300)")
    args = parser.parse_args(argv)
    trials = args.trials or (36 if args.quick else 300)
    if trials < 2 * SLOTS:
        parser.error(f"--trials: at least {2 * SLOTS} expected")
    try:
        cpus = cluster_cpus()
    except BenchmarkError as exc:
        print(f"slurm_throughput: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run_dir = WORK_DIR / time.strftime("%Y%m%d-%H%M%S")
    submitted: list[str] = []
    try:
        install_shims(run_dir / "bin")
        with cluster_lock():
            load = os.getloadavg()[0]
            print(f"dse: {trials} trials ...", file=sys.stderr)
            ours, durations = run_dse(run_dir / "dse", trials)
            print(f"submitit: {trials} tasks ...", file=sys.stderr)
            peer = run_submitit(run_dir / "submitit", durations, submitted)
            load = max(load, os.getloadavg()[0])
    except BenchmarkError as exc:
        print(f"slurm_throughput: {exc}", file=sys.stderr)
        return 1
    finally:
        cancel_leftovers(run_dir, submitted)
    mine, theirs = figures(ours, trials, cpus), figures(peer, trials, cpus)
    body = []
    for key in ("wall_s", "utilisation", "slurm_calls_per_trial", "median_refill_gap_s",
                "p90_refill_gap_s"):
        body.append([key, f"{mine[key]:g}", f"{theirs[key]:g}"])
    body.append(["controller Slurm calls", _calls(ours.controller_calls),
                 _calls(peer.controller_calls)])
    body.append(["calls inside jobs (not counted)", _calls(ours.job_calls),
                 _calls(peer.job_calls)])
    body.append(["", ours.note, peer.note])
    print(table(["", "dse", "submitit"], body))
    print(f"{trials} trials of sleep 1-3 s on {SLOTS} slots; ideal wall"
          f" {sum(durations) / SLOTS:.1f}s; load {load:.2f}")
    out = {
        "trials": trials,
        "dse_wall_s": mine["wall_s"],
        "submitit_wall_s": theirs["wall_s"],
        "ratio": round(mine["wall_s"] / theirs["wall_s"], 3),
        "utilisation": mine["utilisation"],
        "slurm_calls_per_trial": mine["slurm_calls_per_trial"],
        "median_refill_gap_s": mine["median_refill_gap_s"],
        "submitit_utilisation": theirs["utilisation"],
        "submitit_slurm_calls_per_trial": theirs["slurm_calls_per_trial"],
        "submitit_median_refill_gap_s": theirs["median_refill_gap_s"],
        "dse_mode": ours.note.split(";", 1)[0],
        "targets": TARGETS,
        "load": round(load, 2),
    }
    print(json.dumps(out))
    return 0


def _calls(counts: Counter[str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "-"


if __name__ == "__main__":
    sys.exit(main())
