"""dse dashboard beside optuna-dashboard: the first page of a large run, the server's memory,
and what a dashboard open costs a running campaign.

What is measured (one run, one machine, one after the other):

* **first page**: the requests a browser makes to show a run's trials — dse: ``/``,
  ``app.js``, ``/api/runs``, ``/api/runs/1/trials`` (the first 50); optuna-dashboard 0.21:
  ``/dashboard``, ``/api/studies``, ``/api/studies/0`` (its study page reads every trial).
  Both on N trials of the same space (dse: a real ``dse run`` of the probe into SQLite;
  Optuna: the same number of finished trials in its in-memory storage, the fastest it has),
  the median of five loads after one untimed; the server's peak RSS after them (dse: its own
  process; optuna-dashboard runs in this process beside its study: its RSS is this
  process's, less what it was before the server started).
* **figures**: the run's figures' data (``/api/runs/1/figures``; a run over 20,000 trials
  is drawn from a sample), its time and the server's peak RSS after it.
* **throughput with a dashboard open**: a probe campaign of M trials alone, then again with
  ``dse dashboard`` serving its record and a page's worth of reads (the runs and a page of
  trials) each time the record changes (the event stream), as an open page does: three of
  each, alternating, and the ratio of the medians (target: within 5%).

Targets (issue 41, on a 1,000,000-trial record from ``benchmarks/scale.py --keep``, pass
``--workspace``): first page at most 1 s, memory at most 200 MB. Usage::

    python benchmarks/dashboard.py --quick          # 5,000 trials (about a minute)
    python benchmarks/dashboard.py                  # 100,000 trials
    python benchmarks/dashboard.py --workspace W    # an existing workspace's run 1

The last line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _peers import BenchmarkError, import_optuna, table

WORK_DIR = Path(__file__).resolve().parent / ".work"
URL = re.compile(r"dse dashboard: (http://\S+)")
FIRST_PAGE_TARGET_S = 1.0
MEMORY_TARGET_MB = 200.0
SLOWDOWN_TARGET = 0.05

CAMPAIGN = """
[campaign]
name = "board"
agent = "random"
backend = "probe"
mode = "rolling"
max_parallelism = 64
max_trials = {trials}
seed = 0

[[objectives]]
metric = "value"

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}
y = {{ type = "int", low = 0, high = 100 }}
kind = {{ type = "categorical", choices = ["a", "b", "c"] }}
"""


def run_campaign(workspace: Path, trials: int) -> float:
    """A real ``dse run`` of *trials* probe trials into *workspace*: its trials/s."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "campaign.toml").write_text(CAMPAIGN.format(trials=trials))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dse", "run", "campaign.toml", "--json"],
                          cwd=workspace, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise BenchmarkError(f"dse run failed: {done.stderr[-500:]}")
    return trials / seconds


def start_dashboard(workspace: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "dse", "dashboard", str(workspace / ".dse"),
                             "--port", "0"], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        found = URL.search(line)
        if found:
            return proc, found[1].rstrip("/")
    raise BenchmarkError("dse dashboard printed no address")


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as resp:  # the benchmark's own server
        return bytes(resp.read())


def first_page(base: str, paths: list[str], repeat: int = 5) -> float:
    """The median seconds to fetch *paths* one after the other, after one untimed load."""
    times = []
    for k in range(repeat + 1):
        start = time.perf_counter()
        for path in paths:
            fetch(base + path)
        if k:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


DSE_PAGE = ["/", "/app.js", "/api/runs", "/api/runs/1/trials?sort=number&limit=50"]


def bench_dse(workspace: Path) -> dict[str, float]:
    board, base = start_dashboard(workspace)
    try:
        seconds = first_page(base, DSE_PAGE)
        rss = peak_rss_mb(board.pid)
        figures = first_page(base, ["/api/runs/1/figures"], repeat=1)
        return {"first_page_s": seconds, "rss_mb": rss, "figures_s": figures,
                "figures_rss_mb": peak_rss_mb(board.pid)}
    finally:
        board.terminate()
        board.wait(timeout=30)


def bench_optuna_dashboard(trials: int) -> dict[str, float] | None:
    """optuna-dashboard on *trials* finished trials in Optuna's in-memory storage (``None``:
    not installed)."""
    optuna = import_optuna()
    try:
        import optuna_dashboard
    except ImportError:
        return None
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    before = peak_rss_mb(os.getpid())
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="board")
    dists = {"x": FloatDistribution(0, 1), "y": IntDistribution(0, 100),
             "kind": CategoricalDistribution(["a", "b", "c"])}
    study.add_trials([optuna.trial.create_trial(
        params={"x": (k % 997) / 997, "y": k % 101, "kind": "abc"[k % 3]}, distributions=dists,
        value=float(k % 1009)) for k in range(trials)])
    port = 18000 + os.getpid() % 1000
    threading.Thread(target=optuna_dashboard.run_server, args=(storage,),
                     kwargs={"host": "127.0.0.1", "port": port}, daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            fetch(base + "/api/meta")
            break
        except OSError:
            if time.monotonic() > deadline:
                raise BenchmarkError("optuna-dashboard did not start") from None
            time.sleep(0.1)
    seconds = first_page(base, ["/dashboard", "/api/studies", "/api/studies/0"])
    return {"first_page_s": seconds, "rss_mb": peak_rss_mb(os.getpid()) - before}


def reader_loop(base: str, stop: threading.Event, reads: list[int]) -> None:
    """An open page: on each change event, the runs and the first page of trials."""
    with urllib.request.urlopen(base + "/api/events", timeout=600) as events:
        for line in events:
            if stop.is_set():
                return
            if line.startswith(b"event: change"):
                for path in DSE_PAGE[2:]:
                    fetch(base + path)
                reads[0] += 1


def bench_open_page(work: Path, trials: int, repeat: int = 3) -> tuple[float, float, int]:
    """Trials/s of a campaign alone, and of one with a dashboard open on its record: each
    *repeat* times, alternating, the medians (a run of a few seconds on a shared machine
    varies by several per cent)."""
    alone, beside, reads = [], [], 0
    for k in range(repeat):
        alone.append(run_campaign(work / f"alone{k}", trials))
        open_ws = work / f"open{k}"
        run_campaign(open_ws, 1)  # the record the dashboard serves exists before it starts
        board, base = start_dashboard(open_ws)
        stop, count = threading.Event(), [0]
        page = threading.Thread(target=reader_loop, args=(base, stop, count), daemon=True)
        page.start()
        try:
            (open_ws / "campaign.toml").write_text(CAMPAIGN.format(trials=trials).replace(
                'name = "board"', 'name = "board2"'))
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "dse", "run", "campaign.toml",
                                   "--json"], cwd=open_ws, capture_output=True, text=True,
                                  check=False)
            beside.append(trials / (time.perf_counter() - start))
            if done.returncode != 0:
                raise BenchmarkError(f"dse run failed: {done.stderr[-500:]}")
        finally:
            stop.set()
            board.terminate()
            board.wait(timeout=30)
        reads += count[0]
    print(f"trials/s alone {[round(a) for a in alone]}, with a page open"
          f" {[round(b) for b in beside]}", file=sys.stderr)
    return statistics.median(alone), statistics.median(beside), reads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 trials (under a minute)")
    parser.add_argument("--trials", type=int, help="the run's size (default 100,000)")
    parser.add_argument("--workspace", type=Path, help="read run 1 of this workspace instead")
    parser.add_argument("--peer-cap", type=int, default=100_000,
                        help="optuna-dashboard's study at most this many trials (default"
                             " 100,000: at a million it needs about 8 GB)")
    args = parser.parse_args(argv)
    trials = args.trials or (5_000 if args.quick else 100_000)
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr)
    WORK_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dse-dashboard-", dir=WORK_DIR) as tmp:
        work = Path(tmp)
        workspace = args.workspace
        if workspace is None:
            print(f"recording {trials:,} trials ...", file=sys.stderr, flush=True)
            workspace = work / "big"
            run_campaign(workspace, trials)
        else:
            workspace = workspace.resolve().parent if workspace.name == ".dse" else workspace
        dse = bench_dse(workspace)
        print("optuna-dashboard ...", file=sys.stderr, flush=True)
        peer_trials = min(trials, args.peer_cap)
        peer = bench_optuna_dashboard(peer_trials)
        each = 2_000 if args.quick else 10_000
        print(f"a campaign of {each:,} trials alone, then with a page open ...",
              file=sys.stderr, flush=True)
        alone, beside, reads = bench_open_page(work, each)
    rows = [["dse dashboard", f"{dse['first_page_s'] * 1000:,.0f}", f"{dse['rss_mb']:.0f}"]]
    if peer is not None:
        rows.append([f"optuna-dashboard ({peer_trials:,} trials)",
                     f"{peer['first_page_s'] * 1000:,.0f}", f"{peer['rss_mb']:.0f}"])
    print(f"first page of a run of {trials:,} trials")
    print(table(["server", "first page ms", "peak RSS MB"], rows))
    print(f"dse dashboard's figures of that run: {dse['figures_s'] * 1000:,.0f} ms, peak RSS"
          f" then {dse['figures_rss_mb']:.0f} MB")
    slowdown = 1 - beside / alone
    print(f"a campaign of {each:,} trials: {alone:,.0f} trials/s alone, {beside:,.0f} with a"
          f" page open ({reads} page reads): {100 * slowdown:+.1f}% (target at most"
          f" {100 * SLOWDOWN_TARGET:.0f}%)")
    print(f"load average at end: {os.getloadavg()}", file=sys.stderr)
    print(json.dumps({
        "trials": trials, "first_page_s": round(dse["first_page_s"], 4),
        "rss_mb": round(dse["rss_mb"], 1), "figures_s": round(dse["figures_s"], 3),
        "figures_rss_mb": round(dse["figures_rss_mb"], 1),
        "optuna_dashboard_trials": peer_trials,
        "optuna_dashboard_first_page_s": None if peer is None else round(peer["first_page_s"], 4),
        "optuna_dashboard_rss_mb": None if peer is None else round(peer["rss_mb"], 1),
        "first_page_ratio": None if peer is None else round(peer["first_page_s"]
                                                            / dse["first_page_s"], 2),
        "campaign_alone_trials_per_s": round(alone, 1),
        "campaign_with_page_trials_per_s": round(beside, 1),
        "slowdown": round(slowdown, 4), "page_reads": reads,
        "first_page_target_s": FIRST_PAGE_TARGET_S, "memory_target_mb": MEMORY_TARGET_MB,
        "slowdown_target": SLOWDOWN_TARGET, "load": os.getloadavg()[0],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
