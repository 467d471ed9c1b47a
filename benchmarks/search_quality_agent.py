"""The bayesian agent alone on search_quality's functions, against the peers' log: many seeds
in minutes, for trying a change to the agent (issue 44).

``search_quality.py`` is the verdict: dse's side there runs through the real engine. This
program drives :class:`dse_agents.BayesianAgent` directly, ask/tell, through the same
:func:`_sq_peers.drive` the peers run in (waves, or rolling workers in virtual time) and the
same :class:`_sq_problems.Evaluator` (the k-th evaluation of a run gets the k-th duration and
noise draw). A run proposes the very points the engine's run of the same task does (a test
checks it, regret and failures, seed for seed) at a fraction of the cost: about 5-15 s of CPU
per run. The peers are not run; their runs are read from the committed peers' log
(``benchmarks/peers/search_quality``).

For each function and setting the table gives dse's median regret (and, on a function with
failures, the mean failed trials per run and the runs that ended far from the optimum: regret
above 0.1, the ``edge4`` decoy), the best logged peer's median on the same seeds, and the
paired per-seed geometric mean of dse over it above the solved floor (``_sq_report``). With
``--against LOG`` (this program's log of another version of the agent: run it, change the
agent, run it again with another ``--log``) the paired geometric mean of the two as well.

    python benchmarks/search_quality_agent.py --functions edge4 --seeds 40 --log a.jsonl
    python benchmarks/search_quality_agent.py --functions edge4 --seeds 40 --log b.jsonl \\
        --against a.jsonl

The cost column is issue 44's "cheaper per batch than Ax": the agent's mean CPU seconds per
``propose`` in these runs (of a batch of 4 in waves, of one trial rolling) beside Ax's mean
seconds per ask of the same kind in the peers' log, on the same seeds (Ax's are wall seconds,
recorded one run at a time), and their ratio.

The last line printed is one JSON object: per cell, dse's median, the best peer's, their
paired geometric mean, and the seconds per ask.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _bench import SETTINGS, Task
from _sq_log import PeerLog
from _sq_peers import AX_METHOD, drive
from _sq_problems import PROBLEMS, Evaluator, Outcome, Params, found_regret, simple_regret
from _sq_report import PEER_METHODS, fmt, paired_geomean, solved_floor

import dse

FAR = 0.1
"""A regret above this counts as a run that ended far from the optimum (a decoy's basin)."""


class AgentAskTell:
    """A :class:`dse.Agent` as an ask/tell peer: the trials asked and not yet told are in
    flight at its next ``propose``."""

    def __init__(self, agent: Any, space: dse.Space) -> None:
        self.agent = agent
        self.space = space
        self.asked = 0
        self.in_flight: dict[int, Params] = {}
        self.cpu: dict[bool, list[float]] = {True: [], False: []}
        """CPU seconds of each ``propose``: of a batch (True) and of one trial (False)."""

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        out: list[tuple[Any, dict[str, Any]]] = []
        start = time.process_time()
        proposed = self.agent.propose(n, list(self.in_flight.values()))
        self.cpu[n > 1].append(time.process_time() - start)
        for params in proposed:
            self.asked += 1
            coerced = self.space.coerce(params)
            self.in_flight[self.asked] = coerced
            out.append((self.asked, coerced))
        return out

    def tell(self, handle: Any, params: Params, outcome: Outcome) -> None:
        del self.in_flight[handle]
        if outcome.observed is None:
            obs = dse.Observation(params=params, status=dse.TrialStatus.FAILED,
                                  trial_number=handle, proposal=handle,
                                  failure=dse.FailureClass.NONZERO_EXIT)
        else:
            obs = dse.Observation(params=params, status=dse.TrialStatus.COMPLETED,
                                  metrics={"value": outcome.observed},
                                  score=outcome.observed, trial_number=handle,
                                  proposal=handle)
        self.agent.observe([obs])


def run_one(key: tuple[str, str, int]) -> dict[str, Any]:
    """One run of the bayesian agent: function, setting, seed -> its figures."""
    from dse_agents import BayesianAgent

    function, setting, seed = key
    problem = PROBLEMS[function]
    space = dse.Space.from_dict(dict(problem.space))
    peer = AgentAskTell(BayesianAgent(space, seed=seed), space)
    parallel = SETTINGS[setting].parallelism
    evaluated = drive(peer, Evaluator(problem, seed), problem.budget, parallel,
                      SETTINGS[setting].mode == "rolling")
    return {"function": function, "setting": setting, "seed": seed,
            "regret": simple_regret(problem, evaluated),
            "found": found_regret(problem, evaluated),
            "failed": sum(value is None for _, value in evaluated),
            **{key: round(statistics.fmean(peer.cpu[batch]), 4)
               for key, batch in (("batch_cpu_s", True), ("single_cpu_s", False))
               if peer.cpu[batch]}}


def load(path: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    runs: dict[tuple[str, str, int], dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                run = json.loads(line)
                runs[run["function"], run["setting"], run["seed"]] = run
            except (ValueError, KeyError, TypeError):
                continue  # the line being written when a run was interrupted
    return runs


def cell(function: str, setting: str, runs: dict[int, dict[str, Any]], peers: PeerLog,
         against: dict[int, dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """One row of the table and its figures."""
    floor = solved_floor(function)
    mine = {seed: run["regret"] for seed, run in runs.items()}
    median = statistics.median(mine.values())
    row = [function, setting, str(len(mine)), fmt(median)]
    failures = PROBLEMS[function].fails
    row.append(f"{statistics.fmean(r['failed'] for r in runs.values()):.1f}" if failures
               else "-")
    row.append(str(sum(v > FAR for v in mine.values())) if failures else "-")
    best: tuple[float, str, dict[int, float]] | None = None
    for method in PEER_METHODS:
        logged = {}
        for seed in mine:
            entry = peers.get(Task(method, function, setting, PROBLEMS[function].budget, seed))
            if entry is not None:
                logged[seed] = entry.regret
        if len(logged) == len(mine):
            theirs = statistics.median(logged.values())
            if best is None or theirs < best[0]:
                best = (theirs, method, logged)
    figures: dict[str, Any] = {"median": median}
    if best is None:
        row += ["-", "-"]
    else:
        figures.update(best_peer=best[1], peer_median=best[0],
                       paired=paired_geomean(mine, best[2], floor))
        row += [f"{best[1]} {fmt(best[0])}", fmt(figures["paired"])]
    row.append(_cost(function, setting, runs, peers, figures))
    if against:
        other = {seed: run["regret"] for seed, run in against.items()}
        figures["against"] = paired_geomean(mine, other, floor)
        row.append(fmt(figures["against"]))
    return row, figures


def _cost(function: str, setting: str, runs: dict[int, dict[str, Any]], peers: PeerLog,
          figures: dict[str, Any]) -> str:
    """dse's mean CPU seconds per ask (a batch in waves, one trial rolling) and Ax's logged
    seconds per ask of the same kind on the same seeds, over dse's: the cell's cost column
    (``-`` where either is missing); the figures join *figures*."""
    kind = "batch" if SETTINGS[setting].mode == "waves" else "single"
    mine = [run[f"{kind}_cpu_s"] for run in runs.values() if f"{kind}_cpu_s" in run]
    theirs = []
    for seed in runs:
        entry = peers.get(Task(AX_METHOD, function, setting, PROBLEMS[function].budget, seed))
        value = None if entry is None else getattr(entry, f"{kind}_ask_s")
        if value is not None:
            theirs.append(value)
    if not mine:
        return "-"
    figures["cpu_per_ask_s"] = statistics.fmean(mine)
    if not theirs:
        return fmt(figures["cpu_per_ask_s"])
    figures["ax_per_ask_s"] = statistics.fmean(theirs)
    figures["ax_over_dse"] = figures["ax_per_ask_s"] / max(figures["cpu_per_ask_s"], 1e-9)
    return (f"{fmt(figures['cpu_per_ask_s'])} / Ax {fmt(figures['ax_per_ask_s'])}"
            f" = {figures['ax_over_dse']:.0f}x")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="edge4 and branin, 2 seeds, P=4 waves (under a minute)")
    parser.add_argument("--functions", nargs="+", choices=sorted(PROBLEMS),
                        default=sorted(PROBLEMS))
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS),
                        default=["P=4 waves", "P=4 rolling"])
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0 .. N-1 (default 20)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--log", type=Path, default=None,
                        help="JSON lines of the runs: resumed, appended to (default: none)")
    parser.add_argument("--against", type=Path, default=None,
                        help="another log of this program: paired geometric mean against it")
    args = parser.parse_args(argv)
    if args.quick:
        args.functions, args.settings, args.seeds = ["edge4", "branin"], ["P=4 waves"], 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    runs = load(args.log) if args.log is not None else {}
    keys = [(f, s, seed) for f in args.functions for s in args.settings
            for seed in range(args.seeds)]
    todo = [key for key in keys if key not in runs]
    if todo:  # no worker processes for a report of a log that has every run
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            log = args.log.open("a", encoding="utf-8") if args.log is not None else None
            try:
                for run in pool.map(run_one, todo):
                    runs[run["function"], run["setting"], run["seed"]] = run
                    if log is not None:
                        log.write(json.dumps(run) + "\n")
                        log.flush()
            finally:
                if log is not None:
                    log.close()
    against = load(args.against) if args.against is not None else {}
    peers = PeerLog()
    header = (["function", "setting", "seeds", "median", "failed", f">{FAR}",
               "best logged peer", "paired", "s per ask: dse CPU / Ax (log)"]
              + (["vs --against"] if against else []))
    rows, summary = [header], {}
    for function in args.functions:
        for setting in args.settings:
            mine = {k[2]: runs[k] for k in keys if k[:2] == (function, setting)}
            theirs = {k[2]: r for k, r in against.items()
                      if k[:2] == (function, setting) and k[2] in mine}
            row, figures = cell(function, setting, mine, peers, theirs)
            rows.append(row)
            summary[f"{function} {setting}"] = figures
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
