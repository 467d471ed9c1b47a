"""Resume: how soon a controller killed at N trials is working again, against Optuna.

What is measured (same machine, one run after the other, each repeat on a fresh copy):

* **dse**: a real ``dse run`` of a probe campaign (random agent, ``max_parallelism = 64``,
  rolling, SQLite record; with ``--agent bayesian`` the Bayesian agent, ``max_parallelism =
  4``) is killed with SIGKILL once its record holds N trials; then the same
  ``dse run`` is started again and timed from the moment it is spawned to the moment its record
  holds the first attempt of a trial newer than any before the kill (the first new dispatch).
  Each repeat starts from a copy of the killed workspace, written to disk (``sync``) before
  the rerun is spawned. The rerun must not pause dispatch (no
  ``systematic_interruptions`` event): the controller's own death is no infrastructure alarm.
* **Optuna** (``pip install optuna``): a study of the same N completed trials on the same space,
  in ``JournalStorage`` (Optuna's storage for large studies; built in ``/dev/shm`` when there is
  one, then copied beside dse's), is loaded by a fresh process with ``RandomSampler``
  (``TPESampler`` against the Bayesian agent) and asked for its next trial: timed from spawn
  to the ``ask()`` returning.

Both include the interpreter's start and imports; dse's with Python's bytecode cache (filled
by the killed run), as an installed dse has its modules compiled. Usage::

    python benchmarks/resume.py            # N = 50,000, 3 repeats (a few minutes)
    python benchmarks/resume.py --quick    # N = 5,000, 1 repeat (under a minute)
    python benchmarks/resume.py --trials 100000 --repeat 5
    python benchmarks/resume.py --agent bayesian    # N = 500 (--quick: 100), P = 4

The last line printed is one JSON object with the median times and their ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _peers import BenchmarkError, import_optuna, table

WORK_DIR = Path(__file__).resolve().parent / ".work" / "resume"
CAMPAIGN = """
[campaign]
name = "resume"
agent = "{agent}"
backend = "probe"
max_parallelism = {parallelism}
mode = "rolling"
max_trials = {max_trials}

[[objectives]]
metric = "value"

[space]
x = {{ type = "float", low = 0, high = 1 }}
passes = [1, 2, 3]
"""
OPTUNA_RESUME = """
import sys, time
import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
optuna.logging.set_verbosity(optuna.logging.ERROR)
study = optuna.load_study(study_name="resume", sampler=getattr(optuna.samplers, sys.argv[2])(),
                          storage=JournalStorage(JournalFileBackend(sys.argv[1])))
trial = study.ask()
print("asked", trial.number, flush=True)
"""


def _count(db: Path, sql: str) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute(sql).fetchone()[0] or 0)
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def _dse(project: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "dse", "run", "campaign.toml"], cwd=project,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


AGENTS = {"random": (64, "RandomSampler", 50_000, 5_000),
          "bayesian": (4, "TPESampler", 500, 100)}
"""Agent: (max_parallelism, Optuna's peer sampler, trials, trials with ``--quick``)."""


def bytecode_env(cache: Path) -> dict[str, str]:
    """This environment with Python's bytecode cache on, kept in *cache* (even where
    ``PYTHONDONTWRITEBYTECODE`` is set): an installed dse has its modules compiled, and a
    checkout run without a cache compiles every module of dse at every start (about half a
    CPU-second, which the timed rerun would otherwise count)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def killed_workspace(n: int, where: Path, agent: str, env: dict[str, str] | None = None
                     ) -> Path:
    """A workspace whose ``dse run`` (in *env*, default this one) was killed with SIGKILL once
    it recorded *n* trials."""
    project = where / "killed"
    project.mkdir(parents=True)
    (project / "campaign.toml").write_text(CAMPAIGN.format(
        max_trials=n * 10, agent=agent, parallelism=AGENTS[agent][0]))
    db = project / ".dse" / "dse.sqlite"
    proc = _dse(project, env)
    deadline = time.monotonic() + max(600.0, n / 20)
    while _count(db, "SELECT COUNT(*) FROM trials") < n:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise BenchmarkError(f"dse run stopped (or stalled) before {n} trials")
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    return project


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process *pid* has used so far (Linux; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dse_resume(killed: Path, where: Path, env: dict[str, str] | None = None
               ) -> tuple[float, float, bool]:
    """Seconds from spawning the rerun (in *env*, default this one's) to its first new
    dispatch, the CPU seconds the controller used by then (what load multiplies); whether it
    paused."""
    project = where / "rerun"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(killed, project)
    # The copy's dirty pages (a directory per trial: 100,000 at 100k trials) written out
    # now, not by the ext4 journal commit the rerun's first durable commit waits on: that
    # wait is the copy's, not the resume's (2.7 s of wall at 0.5 CPU-s was seen at 100k).
    os.sync()
    db = project / ".dse" / "dse.sqlite"
    newest = _count(db, "SELECT MAX(id) FROM trials")
    start = time.monotonic()
    proc = _dse(project, env)
    try:
        while not _count(db, f"SELECT COUNT(*) FROM attempts WHERE trial_id > {newest}"):
            if proc.poll() is not None:
                raise BenchmarkError(f"the rerun exited {proc.returncode} before dispatching")
            if time.monotonic() - start > 600:
                raise BenchmarkError("the rerun dispatched nothing in 600 s")
            time.sleep(0.02)
        took, cpu = time.monotonic() - start, _cpu_s(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
    paused = bool(_count(db, "SELECT COUNT(*) FROM events WHERE kind ="
                             " 'systematic_interruptions'"))
    return took, cpu, paused


def optuna_journal(n: int, where: Path) -> Path:
    """An Optuna journal of *n* completed trials on the campaign's space."""
    optuna = import_optuna()
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    shm = Path("/dev/shm")
    build = Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else where))
    try:
        path = build / "journal.log"
        study = optuna.create_study(study_name="resume",
                                    storage=JournalStorage(JournalFileBackend(str(path))))
        dists = {"x": FloatDistribution(0, 1), "passes": CategoricalDistribution([1, 2, 3])}
        study.add_trials([
            optuna.trial.create_trial(params={"x": i / n, "passes": 1 + i % 3},
                                      distributions=dists, value=float(i))
            for i in range(n)
        ])
        target = where / "journal.log"
        shutil.copy(path, target)
        return target
    finally:
        shutil.rmtree(build, ignore_errors=True)


def optuna_resume(journal: Path, where: Path, sampler: str) -> float:
    """Seconds from spawning a process that loads the study to its first ``ask()``."""
    copy = where / "journal-copy.log"
    shutil.copy(journal, copy)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", OPTUNA_RESUME, str(copy), sampler],
                          capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0 or "asked" not in proc.stdout:
        raise BenchmarkError(f"optuna resume failed: {proc.stderr.strip()[-300:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="5,000 trials (bayesian: 100), one repeat")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--agent", choices=sorted(AGENTS), default="random")
    args = parser.parse_args()
    _, sampler, full, quick = AGENTS[args.agent]
    n = args.trials or (quick if args.quick else full)
    repeat = args.repeat or (1 if args.quick else 3)
    shutil.rmtree(WORK_DIR, ignore_errors=True)
    WORK_DIR.mkdir(parents=True)
    load = os.getloadavg()[0]
    try:
        # The killed run (untimed) fills the bytecode cache the reruns start with.
        env = bytecode_env(WORK_DIR / "pycache")
        killed = killed_workspace(n, WORK_DIR, args.agent, env)
        runs = [dse_resume(killed, WORK_DIR, env) for _ in range(repeat)]
        journal = optuna_journal(n, WORK_DIR)
        peer = [optuna_resume(journal, WORK_DIR, sampler) for _ in range(repeat)]
    except BenchmarkError as exc:
        print(f"resume: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(WORK_DIR, ignore_errors=True)
    dse_s = [t for t, _, _ in runs]
    cpu_s = [c for _, c, _ in runs]
    paused = any(p for _, _, p in runs)
    load_end = os.getloadavg()[0]

    def cells(name: str, times: list[float]) -> list[str]:
        return [name, f"{n:,}", f"{statistics.median(times):.2f}", f"{min(times):.2f}",
                f"{max(times):.2f}"]

    print(f"resume after SIGKILL at {n:,} trials ({args.agent} agent), {repeat} repeat(s),"
          f" load {load:.1f} at start, {load_end:.1f} at the end")
    print(table(["system", "trials", "median s", "min s", "max s"],
                [cells(f"dse {args.agent} (first new dispatch)", dse_s),
                 cells(f"optuna journal {sampler} (first ask)", peer)]))
    print(f"dse controller CPU to its first new dispatch: median {statistics.median(cpu_s):.2f}"
          f" s (min {min(cpu_s):.2f}, max {max(cpu_s):.2f})")
    if paused:
        print("dse paused dispatch after the restart", file=sys.stderr)
    result = {
        "agent": args.agent, "trials": n, "repeats": repeat, "load": round(load, 1),
        "load_end": round(load_end, 1),
        "dse_first_dispatch_s": round(statistics.median(dse_s), 3),
        "dse_first_dispatch_cpu_s": round(statistics.median(cpu_s), 3),
        "dse_first_dispatch_max_s": round(max(dse_s), 3),
        "optuna_first_ask_s": round(statistics.median(peer), 3),
        "optuna_over_dse": round(statistics.median(peer) / statistics.median(dse_s), 2),
        "paused": paused,
    }
    print(json.dumps(result))
    return 1 if paused else 0


if __name__ == "__main__":
    sys.exit(main())
