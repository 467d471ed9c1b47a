"""What finding a workload's code and dependencies costs (issue 36): dse with detection against
dse told both, on the same work in the same run.

The identity of a result holds the workload's code (outside git, the digest of the files that
are its code) and dependencies (its Python's distributions). dse finds them before anything is
dispatched; this program measures what that adds to a run, as whole ``dse run`` processes:

* **probe, 10,000 trials** — a campaign of zero-length probe trials (the probe runs no command,
  so only code is found) whose ``[environment] code = ["src/"]`` is a tree of 1,000 Python
  files: run (the digests made) and rerun (every file unchanged: one ``stat`` each, every trial
  a cache hit), against the same campaign with ``code_version`` declared (nothing to find).
* **local, real processes** — ``python trial.py`` (a script importing a module beside it) on
  the local backend, 8 trials: the unchanged rerun with a 300 MB file beside the code, against
  the rerun without it (the file is never named nor imported: never read), and the first run
  with ``code_version`` and ``dependencies`` declared against the first run finding both (its
  Python asked once; later runs answer from the cache while its ``site-packages`` is
  unchanged).

Each pair runs alternately, ``--repeat`` times (median). Targets: probe run and rerun within
5% of declared; the rerun beside 300 MB within 10% of the rerun without it.

Usage::

    python benchmarks/identity_cost.py            # 10,000 probe trials, 3 repeats
    python benchmarks/identity_cost.py --quick    # 2,000 probe trials, 2 repeats (< 1 min)

The last line printed is one JSON object of the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _peers import table

PROBE = """
[campaign]
name = "cost"
agent = "random"
backend = "probe"
max_parallelism = 64
max_trials = {trials}
seed = 1

[environment]
{identity}

[[objectives]]
metric = "value"                # what the probe's trials report

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}
"""

LOCAL = """
[campaign]
name = "cost"
agent = "grid"
max_parallelism = 2

[environment]
command = ["python", "trial.py"]
{identity}

[[objectives]]
metric = "loss"

[space]
x = [1, 2, 3, 4, 5, 6, 7, 8]
"""

TRIAL = """
import dse.trial
from helper import f
dse.trial.report({"loss": f(dse.trial.params()["x"])})
"""


def dse_run(where: Path, env: dict[str, str]) -> float:
    """Seconds of one ``dse run campaign.toml`` in *where* (a failing run stops the program)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dse", "run", "campaign.toml"], cwd=where,
                          env=env, capture_output=True, text=True, check=False, timeout=900)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"dse run in {where} failed: {proc.stderr.strip()[-400:]}")
    return took


def probe_project(root: Path, name: str, trials: int, identity: str) -> Path:
    where = root / name
    (where / "src" / "pkg").mkdir(parents=True)
    for i in range(1000):
        (where / "src" / "pkg" / f"mod{i:04d}.py").write_text(f"VALUE = {i}\n" * 20)
    (where / "campaign.toml").write_text(PROBE.format(trials=trials, identity=identity))
    return where


def local_project(root: Path, name: str, identity: str, big: bool) -> Path:
    where = root / name
    where.mkdir(parents=True)
    (where / "trial.py").write_text(TRIAL)
    (where / "helper.py").write_text("def f(x):\n    return (x - 3.5) ** 2\n")
    (where / "campaign.toml").write_text(LOCAL.format(identity=identity))
    if big:
        with (where / "dataset.bin").open("wb") as handle:
            for _ in range(300):  # 300 MB of real bytes (a sparse file reads as zeros fast)
                handle.write(os.urandom(1 << 20))
        # On disk before the clock starts: 300 MB still being written back would slow the
        # record's fsyncs, which is not what is measured.
        os.sync()
    return where


def pair(make_a: object, make_b: object, repeat: int, env: dict[str, str],
         runs: int) -> tuple[list[list[float]], list[list[float]]]:
    """*runs* runs of fresh projects a and b, alternately, *repeat* times: the seconds of each
    run of each (a list per run index)."""
    a_times: list[list[float]] = [[] for _ in range(runs)]
    b_times: list[list[float]] = [[] for _ in range(runs)]
    for i in range(repeat):
        for make, times in ((make_a, a_times), (make_b, b_times)):
            where = make(i)  # type: ignore[operator]
            for k in range(runs):
                times[k].append(dse_run(where, env))
            shutil.rmtree(where)
    return a_times, b_times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 probe trials, 2 repeats")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args()
    trials = 2000 if args.quick else 10_000
    repeat = args.repeat or (2 if args.quick else 3)
    root = Path(tempfile.mkdtemp(prefix="dse-identity-", dir=Path(__file__).parent))
    env = dict(os.environ, DSE_CACHE_DIR=str(root / "cache"))
    env.pop("DSE_DEBUG", None)
    try:
        found, told = pair(
            lambda i: probe_project(root, f"found{i}", trials, 'code = ["src/"]'),
            lambda i: probe_project(root, f"told{i}", trials, 'code_version = "v1"'),
            repeat, env, runs=2)
        beside, alone = pair(
            lambda i: local_project(root, f"big{i}", "", big=True),
            lambda i: local_project(root, f"small{i}", "", big=False),
            repeat, env, runs=2)
        local_found, local_told = pair(
            lambda i: local_project(root, f"lfound{i}", "", big=False),
            lambda i: local_project(root, f"ltold{i}",
                                    'code_version = "v1"\ndependencies = "env-1"', big=False),
            repeat, env, runs=1)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = statistics.median
    rows = [
        (f"probe {trials:,} trials, run", med(found[0]), med(told[0])),
        (f"probe {trials:,} trials, rerun (cache hits)", med(found[1]), med(told[1])),
        ("local 8 trials, first run", med(local_found[0]), med(local_told[0])),
    ]
    lines = [[name, f"{a:.2f}", f"{b:.2f}", f"{a / b:.3f}"] for name, a, b in rows]
    lines.append(["local rerun beside 300 MB / without it", f"{med(beside[1]):.2f}",
                  f"{med(alone[1]):.2f}", f"{med(beside[1]) / med(alone[1]):.3f}"])
    print(f"load average {os.getloadavg()[0]:.1f}, {repeat} repeats (median seconds)")
    print(table(["work", "dse finding (s)", "dse told (s)", "ratio"], lines))
    print(json.dumps({
        "probe_trials": trials,
        "probe_run_ratio": round(med(found[0]) / med(told[0]), 3),
        "probe_rerun_ratio": round(med(found[1]) / med(told[1]), 3),
        "local_first_run_ratio": round(med(local_found[0]) / med(local_told[0]), 3),
        "rerun_beside_300mb_ratio": round(med(beside[1]) / med(alone[1]), 3),
        "spread_probe_run_s": [round(min(found[0]), 2), round(max(found[0]), 2)],
        "spread_probe_rerun_s": [round(min(found[1]), 2), round(max(found[1]), 2)],
    }))


if __name__ == "__main__":
    main()
