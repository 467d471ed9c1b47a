"""Scale: what a probe campaign of 1k to 1M trials costs the controller and the CLI.

What is measured (same machine, one run after the other):

* **dse run**: a real ``dse run`` (a child process) of a probe campaign — random agent,
  ``max_parallelism = 64``, rolling, SQLite record — of N trials: durable trials/s (N over its
  wall clock, interpreter start included), its peak RSS (``ru_maxrss`` of the child, read with
  ``os.wait4``), and the record's bytes per trial (the SQLite file and its WAL).
* **the CLI on that record**: ``dse status``, ``dse report``, ``dse show`` of one trial (the
  middle one) and ``dse export --format json`` / ``jsonl`` to a file, each a child process:
  its CPU seconds (user + system, interpreter start included) and peak RSS; status, report
  and show the median of three runs after an untimed first one. The children keep Python's
  bytecode cache (in the work directory, even where ``PYTHONDONTWRITEBYTECODE`` is set), as
  an installed dse has its modules compiled: the figures are not those of compiling dse's
  sources at every start. Targets on the 100k and 1M records: at most 0.3 CPU-s for status,
  report and show; at most 200 MB for export.
* **resume** (``benchmarks/resume.py``'s code): seconds from spawning a ``dse run`` killed with
  SIGKILL at 100k trials (random; ``--quick``: 10k) and at 1,000 trials (Bayesian; ``--quick``:
  100) to its first new dispatch, with the bytecode cache of the CLI children (filled first
  by an untimed two-trial run of the same agent). Target: at most 2 s each.
* **Optuna** (``pip install optuna``), the peer: ``study.optimize``-style ``ask``/``tell`` of
  the same space in ``JournalStorage`` on a file, in a child process: trials/s, peak RSS and
  journal bytes per trial, at ``min(N, --optuna-cap)`` trials (a durable journal is slow).

Load matters on a shared machine: the load average is printed at the start and the end, and
ratios against the peer are what to compare. Usage::

    python benchmarks/scale.py            # 1k, 10k, 100k, 1M (about an hour on 2 busy cores)
    python benchmarks/scale.py --quick    # 1k and 10k, quick resumes (about two minutes)
    python benchmarks/scale.py --sizes 1000 100000 --no-resume

The last line printed is one JSON object about the largest size run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import resume
from _peers import BenchmarkError, import_optuna, table

WORK_DIR = Path(__file__).resolve().parent / ".work" / "scale"
CAMPAIGN = """
[campaign]
name = "scale"
agent = "random"
backend = "probe"
max_parallelism = 64
mode = "rolling"
max_trials = {trials}

[[objectives]]
metric = "value"

[space]
x = {{ type = "float", low = 0, high = 1 }}
passes = [1, 2, 3]
"""
OPTUNA = textwrap.dedent("""
    import sys, time
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    n = int(sys.argv[2])
    start = time.perf_counter()
    study = optuna.create_study(study_name="scale", sampler=optuna.samplers.RandomSampler(0),
                                storage=JournalStorage(JournalFileBackend(sys.argv[1])))
    for _ in range(n):
        trial = study.ask()
        x = trial.suggest_float("x", 0, 1)
        trial.suggest_categorical("passes", [1, 2, 3])
        study.tell(trial, x)
    print(time.perf_counter() - start)
""")
STATUS_CPU_TARGET = 0.3
EXPORT_RSS_TARGET_MB = 200.0
RSS_TARGET_MB = 200.0
RESUME_TARGET_S = 2.0
JSONL_UP_TO = 100_000
CLI_RUNS = 3
"""Timed runs of status, report and show on each record (their median is reported)."""


@dataclass
class Child:
    """How one child process went: wall and CPU seconds, peak RSS, what it printed."""

    wall_s: float
    cpu_s: float
    rss_mb: float
    out: str


LAUNCHER = """
import json, os, sys, time
start = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"code": os.waitstatus_to_exitcode(status), "wall": time.monotonic() - start,
               "cpu": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss}, out)
"""
"""Runs a child and writes its rusage. A process's peak RSS (``ru_maxrss``) starts from that
of the process it was forked from, so each child is forked by this small, freshly started
interpreter, never by this program (whose own peak would show in every child's figure)."""


def child(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> Child:
    """Run *argv* in *cwd* to its end; its rusage (``os.wait4``: this child's alone, through
    :data:`LAUNCHER`). Its output goes to files (``dse run`` prints a line per trial when not
    on a terminal)."""
    out_path, err_path = cwd / ".child-out", cwd / ".child-err"
    usage_path = cwd / ".child-usage"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(usage_path), *argv],
                       cwd=cwd, stdout=out, stderr=err, env=env, check=False)
    usage = json.loads(usage_path.read_text())
    usage_path.unlink()
    text = out_path.read_text(errors="replace")
    if usage["code"] != 0:
        tail = err_path.read_text(errors="replace").strip()[-300:]
        raise BenchmarkError(f"{' '.join(argv[2:5])} exited {usage['code']}: {tail}")
    out_path.unlink()
    err_path.unlink()
    return Child(usage["wall"], usage["cpu"], usage["maxrss_kb"] / 1024, text)


def dse(*args: str) -> list[str]:
    return [sys.executable, "-m", "dse", *args]


def cli_env() -> dict[str, str]:
    """The environment of a CLI child: Python's bytecode cache on, kept in the work
    directory (see the module's docstring)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(WORK_DIR / "pycache")
    return env


def warmed(agent: str, where: Path) -> None:
    """The bytecode cache of the CLI children filled with what a ``dse run`` of *agent*
    imports (the standard library's and numpy's too: the cache's own directory is the only one
    read), by an untimed run of a two-trial campaign of it."""
    project = where / "warm"
    project.mkdir(parents=True, exist_ok=True)
    (project / "campaign.toml").write_text(resume.CAMPAIGN.format(
        max_trials=2, agent=agent, parallelism=resume.AGENTS[agent][0]))
    subprocess.run(dse("run", "campaign.toml"), cwd=project, env=cli_env(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cli(argv: list[str], cwd: Path) -> Child:
    """The median run, by CPU seconds, of :data:`CLI_RUNS` of *argv*, after an untimed first
    run (which compiles what the command imports)."""
    child(argv, cwd, cli_env())
    runs = sorted((child(argv, cwd, cli_env()) for _ in range(CLI_RUNS)), key=lambda c: c.cpu_s)
    return runs[len(runs) // 2]


@dataclass
class Size:
    """The figures of one campaign size."""

    trials: int
    run: Child
    record_bytes: int
    cli: dict[str, Child] = field(default_factory=dict)

    @property
    def trials_per_s(self) -> float:
        return self.trials / self.run.wall_s


def campaign(n: int, where: Path) -> Size:
    """Run a probe campaign of *n* trials in a fresh directory under *where*; then the CLI."""
    project = where / f"n{n}"
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    (project / "campaign.toml").write_text(CAMPAIGN.format(trials=n))
    ran = child(dse("run", "campaign.toml"), project)
    db = project / ".dse" / "dse.sqlite"
    size = sum(p.stat().st_size for p in db.parent.glob("dse.sqlite*"))
    out = Size(n, ran, size)
    middle = f"scale:{max(n // 2, 1)}"
    out.cli["status"] = cli(dse("status", "--workspace", ".dse"), project)
    out.cli["report"] = cli(dse("report", "campaign.toml"), project)
    out.cli["show"] = cli(dse("show", middle, "--workspace", ".dse"), project)
    # JSON lines too where it takes minutes, not tens of minutes (both stream the same way).
    for fmt in ("json", "jsonl") if n <= JSONL_UP_TO else ("json",):
        target = project / f"export.{fmt}"
        out.cli[f"export {fmt}"] = child(
            dse("export", "campaign.toml", "--format", fmt, "-o", str(target)), project,
            cli_env())
        target.unlink()
    return out


def optuna_peer(n: int, where: Path) -> tuple[int, Child, float, int]:
    """Optuna's journal of *n* trials: (n, the child, its loop's seconds, journal bytes)."""
    import_optuna()  # a clear error when it is missing
    journal = where / "optuna-journal.log"
    journal.unlink(missing_ok=True)
    proc = child([sys.executable, "-c", OPTUNA, str(journal), str(n)], where)
    seconds = float(proc.out.strip().splitlines()[-1])
    size = journal.stat().st_size
    journal.unlink()
    return n, proc, seconds, size


def resumes(quick: bool, where: Path) -> dict[str, float]:
    """Seconds to the first new dispatch after SIGKILL: random at 100k (quick: 10k) trials,
    Bayesian at 1,000 (quick: 100)."""
    out = {}
    for agent, full, short in (("random", 100_000, 10_000), ("bayesian", 1_000, 100)):
        n = short if quick else full
        place = where / f"resume-{agent}"
        shutil.rmtree(place, ignore_errors=True)
        place.mkdir(parents=True)
        killed = resume.killed_workspace(n, place, agent)
        warmed(agent, place)
        took, cpu, paused = resume.dse_resume(killed, place, cli_env())
        if paused:
            raise BenchmarkError(f"the resumed {agent} run paused dispatch")
        out[agent], out[f"{agent}_cpu"] = took, cpu
        out[f"{agent}_trials"] = n
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k; quick resumes")
    parser.add_argument("--sizes", type=int, nargs="+", help="campaign sizes (trials)")
    parser.add_argument("--no-resume", action="store_true", help="skip the resume timings")
    parser.add_argument("--keep", action="store_true",
                        help="leave the records in benchmarks/.work/scale (to time other"
                        " commands on them)")
    parser.add_argument("--optuna-cap", type=int, default=None,
                        help="most trials Optuna's journal runs (default 2,000; quick 500)")
    args = parser.parse_args()
    sizes = args.sizes or ([1_000, 10_000] if args.quick else
                           [1_000, 10_000, 100_000, 1_000_000])
    if any(n < 1 for n in sizes):
        print("scale: --sizes: every size must be a positive number of trials",
              file=sys.stderr)
        return 2
    cap = args.optuna_cap or (500 if args.quick else 2_000)
    shutil.rmtree(WORK_DIR, ignore_errors=True)
    WORK_DIR.mkdir(parents=True)
    load = os.getloadavg()[0]
    started = time.monotonic()
    try:
        runs = []
        for n in sizes:
            runs.append(campaign(n, WORK_DIR))
            print(f"  {n:,} trials: {runs[-1].trials_per_s:,.0f}/s,"
                  f" {runs[-1].run.rss_mb:.0f} MB, load {os.getloadavg()[0]:.1f}", flush=True)
        peer = optuna_peer(min(max(sizes), cap), WORK_DIR)
        timed = {} if args.no_resume else resumes(args.quick, WORK_DIR)
    except BenchmarkError as exc:
        print(f"scale: {exc}", file=sys.stderr)
        shutil.rmtree(WORK_DIR, ignore_errors=True)
        return 1
    report(runs, peer, timed, load, time.monotonic() - started)
    if not args.keep:
        shutil.rmtree(WORK_DIR, ignore_errors=True)
    return 0


def report(runs: list[Size], peer: tuple[int, Child, float, int], timed: dict[str, float],
           load: float, took: float) -> None:
    load_end = os.getloadavg()[0]
    print(f"scale: probe campaigns (random, P=64, rolling), load {load:.1f} at start,"
          f" {load_end:.1f} at the end, {took / 60:.1f} min in all; status, report, show:"
          f" CPU-s, median of {CLI_RUNS} runs, bytecode cached")
    body = [[f"dse {r.trials:,}", f"{r.trials_per_s:,.0f}", f"{r.run.rss_mb:.0f}",
             f"{r.record_bytes / r.trials:,.0f}",
             *(f"{r.cli[c].cpu_s:.2f}" for c in ("status", "report", "show")),
             f"{r.cli['export json'].cpu_s:.1f}", f"{r.cli['export json'].rss_mb:.0f}",
             f"{r.cli['export jsonl'].rss_mb:.0f}" if "export jsonl" in r.cli else "-"]
            for r in runs]
    n, proc, seconds, size = peer
    body.append([f"optuna journal {n:,}", f"{n / seconds:,.0f}", f"{proc.rss_mb:.0f}",
                 f"{size / n:,.0f}", "-", "-", "-", "-", "-", "-"])
    print(table(["run", "trials/s", "peak MB", "B/trial", "status s", "report s", "show s",
                 "export s", "export MB", "jsonl MB"], body))
    if timed:
        print(f"resume to the first new dispatch after SIGKILL: random at"
              f" {timed['random_trials']:,.0f} trials {timed['random']:.2f} s"
              f" ({timed['random_cpu']:.2f} CPU-s), Bayesian at"
              f" {timed['bayesian_trials']:,.0f} trials {timed['bayesian']:.2f} s"
              f" ({timed['bayesian_cpu']:.2f} CPU-s)")
    big = runs[-1]
    result: dict[str, Any] = {
        "trials": big.trials,
        "trials_per_s": round(big.trials_per_s, 1),
        "peak_rss_mb": round(big.run.rss_mb, 1),
        "record_bytes_per_trial": round(big.record_bytes / big.trials),
        "status_cpu_s": round(big.cli["status"].cpu_s, 3),
        "report_cpu_s": round(big.cli["report"].cpu_s, 3),
        "show_cpu_s": round(big.cli["show"].cpu_s, 3),
        "export_cpu_s": round(big.cli["export json"].cpu_s, 2),
        "export_rss_mb": round(max(c.rss_mb for k, c in big.cli.items()
                                   if k.startswith("export")), 1),
        "resume_random_s": round(timed["random"], 3) if timed else None,
        "resume_bayesian_s": round(timed["bayesian"], 3) if timed else None,
        "resume_random_cpu_s": round(timed["random_cpu"], 3) if timed else None,
        "resume_bayesian_cpu_s": round(timed["bayesian_cpu"], 3) if timed else None,
        "optuna_trials": n,
        "optuna_trials_per_s": round(n / seconds, 1),
        "optuna_peak_rss_mb": round(proc.rss_mb, 1),
        "optuna_bytes_per_trial": round(size / n),
        "load": round(load, 1),
        "load_end": round(load_end, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
