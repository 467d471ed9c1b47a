"""Scheduling: dse's pool scheduler against waves, rolling first-come-first-served and greedy
packing, through the engine on the probe backend in virtual time.

Every method runs the same trials as real dse campaigns (``dse.Engine`` in a
``dse.Pool``, a ``ProbeBackend`` whose jobs last their scripted seconds on a
``FakeClock``); starts and ends are read back from each run's SQLite record.

Scenarios (seeded; every method sees the same trials):

* **(a) makespan**: one campaign, 500 trials, 8 slots. Each trial's params hold its ``work``
  (log-normal), and it runs ``60 s x work x noise`` (log-normal noise, sigma 0.4; overall
  sigma about 1). Waves (start 8, wait for all), rolling first come first served (the
  default), and dse's scheduler with ``lookahead = 500``: the whole sweep is prepared ahead
  (the agent proposes what it proposes whatever the results: a sweep) and the scheduler starts
  the longest expected first, expected from the 5 nearest ended trials (before three have
  ended, every trial expects the same and they start in order). With ``lookahead = 128`` the
  worst of the 5 seeds was 1.051. Against
  the lower bound max(total work / 8, longest trial).
* **(b) starvation**: an 8-GPU pool. Campaign ``wide`` runs 24 trials one after the other, of
  1, 2, 4 or 8 GPUs (``environment.gpus = "{gpus}"``), log-normal around 120 s, one in twenty
  20 times longer; campaign ``short`` keeps the pool oversubscribed with 1-GPU trials of
  about 30 s (a stream of 3,000). Every trial's time limit is twice its median, and that is
  what the scheduler expects until history says otherwise; the pool's ``wait_factor`` is 0.5.
  Greedy packing (the same engine,
  the plan replaced by: start every queued trial that fits, oldest first) against dse. The
  figure is the longest wait (queued to started) over its own duration of an 8-GPU trial,
  and of any multi-GPU trial of ``wide``: under greedy packing the campaign stalls at its
  first multi-GPU trial, which waits for the stream to dry up, so its 8-GPU trials are
  queued only afterwards and wait for nothing. The headline figure of each method is the
  larger of the two. ``wide`` runs one trial at a time: with two, an 8-GPU trial could queue
  behind its own campaign's very long 1-GPU trial, which no scheduler that does not preempt
  can shorten.
* **(c) fair share**: campaigns weighted 2:1 (half-life 10 min), each with 2,000 (quick: 800)
  1-GPU trials (log-normal, median 60 s) on the 8-GPU pool. The share of GPU-seconds each
  campaign used in each 10-minute window while both ran (the first window left out); the
  figure is the largest relative deviation of the heavier campaign's share from 2/3.
* **(d) node counts**: a pool of 16 nodes (``[pool] nodes = 16``), one campaign of 200 trials
  whose ``environment.nodes = "{nodes}"`` asks 1, 2, 4, 8 or 16 nodes (half of them 1, 3 in a
  hundred the full pool), each running ``60 s x work x noise`` as in (a) whatever its width
  (the scheduler learns durations from ``work`` and ``nodes``, a category: the nearest ended
  trials of the same width count first); the whole sweep prepared ahead (``lookahead = 200``).
  Greedy packing and first come first served (start trials in order until one does not fit,
  then wait) against dse, whose lookahead starts the largest expected area first (share of the
  pool x expected duration), so wide and long trials start first and small ones fill the gaps
  behind the reservation. Figures: the largest trial's (most node-seconds) wait over its own
  duration, and makespan over the bound max(total node-seconds / 16, longest trial). The table
  also shows the worst wait of any 16-node trial: those run one at a time, so the last started
  waits for all the others, and the floor column is that figure in the best order knowing every
  duration (shortest first); before any has ended dse cannot tell them apart.

Usage::

    python benchmarks/scheduling.py          # 5 seeds, about 4 minutes of CPU time
    python benchmarks/scheduling.py --quick  # 1 seed, under a minute

The last line printed is one JSON object: ``makespan_ratio_to_bound``,
``long_wait_ratio_to_duration``, ``greedy_long_wait_ratio_to_duration``, ``share_deviation``,
``node_largest_wait_ratio_to_duration``, ``node_makespan_ratio_to_bound`` (each the worst over
seeds) and the figures of every method.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _peers import table

import dse
from dse import EnvironmentConfig, Plan, Pool, PoolConfig, PoolScheduler, drive
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse import Request


START = 1_000_000.0
NODES = 16
"""(d): the pool's nodes."""
NODE_MIX = {1: 0.5, 2: 0.25, 4: 0.14, 8: 0.08, 16: 0.03}
"""(d): how often a trial asks each node count: mostly small, a few of the full width."""
WAIT_FACTOR = 0.5
"""(b): the pool's ``wait_factor``: a trial that waited half its expected duration (its time
limit, twice its median) goes ahead of the fair share. Without it, ``wide`` (over its share
after a very long trial) waits for its usage to decay while the stream takes each freed GPU."""
SPACE = dse.Space.from_dict({
    "kind": {"type": "categorical", "choices": ["a", "b", "wide", "short"]},
    "work": {"type": "float", "low": 1e-4, "high": 1e4, "log": True},
    "seconds": {"type": "float", "low": 0.0, "high": 1e9},
    "limit": {"type": "float", "low": 0.0, "high": 1e9},
    "gpus": {"type": "int", "low": 1, "high": 8},
    "nodes": {"type": "categorical", "choices": list(NODE_MIX)},
})
"""Every scenario's trials: ``work`` is what the scheduler may learn durations from;
``seconds`` (how long it really runs) and ``limit`` are hidden from its similarity (they are
scaled over a range so wide they weigh nothing next to ``work``)."""


def script(params: Mapping[str, Any]) -> ProbeScript:
    return ProbeScript(seconds=float(params["seconds"]), metrics={"value": 1.0})


class Greedy(PoolScheduler):
    """Greedy packing: start every queued trial that fits, oldest first, no reservation."""

    stop_at_misfit = False
    """Stop at the first trial that does not fit (first come first served) instead of
    skipping it."""

    def plan(self, queue: Sequence[Request], running: Sequence[Any], now: float) -> Plan:
        free = dict(self.capacity)
        for job in running:
            _take(free, job.size)
        out = []
        for r in sorted(queue, key=lambda r: (r.since, r.key)):
            if all(free.get(k, 0) >= v for k, v in r.size.items() if v > 0):
                _take(free, r.size)
                out.append(r)
            elif self.stop_at_misfit:
                break
        return Plan(tuple(out), None)


class Fcfs(Greedy):
    """First come first served: start queued trials oldest first until one does not fit."""

    stop_at_misfit = True


def _take(free: dict[str, int], size: Mapping[str, int]) -> None:
    for k, v in size.items():
        free[k] = free.get(k, 0) - v


@dataclasses.dataclass
class Spec:
    name: str
    trials: list[dict[str, Any]]
    mode: str = "rolling"
    parallelism: int = 8
    lookahead: int = 0


def run(specs: Sequence[Spec], capacity: dict[str, int], *, weights: Mapping[str, float] = {},
        half_life: float = 3600.0, wait_factor: float | None = None,
        policy: type[PoolScheduler] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Run *specs* as campaigns of one pool (planned by dse, or by *policy*); each campaign's
    attempts (params, queued, start, end, expected), times relative to the start. A trial's
    nodes come from its params when the pool counts nodes, else its GPUs do."""
    clock = FakeClock(START)
    backend = ProbeBackend(script, clock=clock)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pool = Pool(PoolConfig(capacity, dict(weights), half_life=half_life,
                               wait_factor=wait_factor))
        engines = []
        for spec in specs:
            # A trial's GPUs or nodes, and its time limit where it has one, come from its
            # params; the campaign's resources are the largest a trial asks.
            limited = any(t["limit"] for t in spec.trials)
            sized = "nodes" if "nodes" in capacity else "gpus"
            env = EnvironmentConfig(resource_params={sized: sized},
                                    time_limit_param="limit" if limited else None,
                                    resources=dse.Resources(cpus=1, gpus=8) if sized == "gpus"
                                    else dse.Resources(nodes=max(NODE_MIX)))
            campaign = dse.Campaign(
                name=spec.name, space=SPACE, objectives=(dse.Objective("value"),),
                mode=spec.mode,  # type: ignore[arg-type]
                max_parallelism=spec.parallelism, lookahead=spec.lookahead,
                max_trials=len(spec.trials), environment=env, workspace=root / spec.name,
            )
            store = dse.Store(root / spec.name / "dse.sqlite")
            engine = dse.Engine(
                campaign, agent=ScriptedAgent(spec.trials), backend=backend, store=store,
                clock=clock,
            )
            pool.join(engine)
            engines.append(engine)
        pool.start()
        if policy is not None:
            assert pool.scheduler is not None
            pool.scheduler = policy(pool.scheduler.capacity, pool.scheduler.weights)
        for engine in engines:
            engine.open()
        results = drive(pool)
        out: dict[str, list[dict[str, Any]]] = {}
        for engine, result in zip(engines, results, strict=True):
            if result.status != "completed" or result.stats.completed != len(
                    next(s for s in specs if s.name == engine.campaign.name).trials):
                raise RuntimeError(f"{engine.campaign.name}: {result}")
            params = {t.id: t.params for t in engine.store.reads.trials(result.campaign_id)}
            out[engine.campaign.name] = [
                {"params": params[a.trial_id], "queued": a.submitted_at - START,
                 "start": a.started_at - START, "end": a.ended_at - START,
                 "expected": a.expected_s}
                for a in engine.store.reads.attempts(result.campaign_id)
            ]
            engine.store.close()
    return out


def trial(kind: str, seconds: float, *, work: float = 1.0, gpus: int = 1, nodes: int = 1,
          limit: float = 0.0) -> dict[str, Any]:
    return {"kind": kind, "work": work, "seconds": seconds, "limit": limit, "gpus": gpus,
            "nodes": nodes}


# -- (a) makespan -----------------------------------------------------------------------------


def makespan(seed: int) -> dict[str, float]:
    rng = random.Random(f"a:{seed}")
    trials = []
    for _ in range(500):
        work = rng.lognormvariate(0.0, 0.9)
        trials.append(trial("a", 60.0 * work * rng.lognormvariate(0.0, 0.4), work=work))
    durations = [t["seconds"] for t in trials]
    bound = max(sum(durations) / 8, max(durations))

    def span(**kw: Any) -> float:
        out = run([Spec("a", trials, **kw)], {"slots": 8})["a"]
        return max(r["end"] for r in out) / bound

    return {
        "bound_s": bound,
        "waves": span(mode="waves"),
        "rolling": span(),
        "dse": span(lookahead=500),
    }


# -- (b) starvation ---------------------------------------------------------------------------


def starvation(seed: int) -> dict[str, float]:
    rng = random.Random(f"b:{seed}")
    wide = []
    for _ in range(24):
        gpus = rng.choice([1, 2, 4, 8])
        median = 120.0 * (20 if rng.random() < 0.05 else 1)
        # Distinct params (a repeat would be a cache hit, not a trial): clipped to just
        # under the limit, differently each time.
        seconds = min(median * rng.lognormvariate(0.0, 0.3), (2 - 0.01 * rng.random()) * median)
        wide.append(trial("wide", seconds, gpus=gpus, limit=2 * median))
    short = [trial("short", min(30.0 * rng.lognormvariate(0.0, 0.3), 59.0 + rng.random()),
                   limit=60.0) for _ in range(3000)]
    specs = [Spec("wide", wide, parallelism=1), Spec("short", short, parallelism=8)]

    def worst(out: dict[str, list[dict[str, Any]]], least: int) -> float:
        rows = [r for r in out["wide"] if r["params"]["gpus"] >= least]
        return max((r["start"] - r["queued"]) / (r["end"] - r["start"]) for r in rows)

    figures = {"wide_8gpu_trials": float(sum(1 for t in wide if t["gpus"] == 8))}
    for method, policy in (("dse", None), ("greedy", Greedy)):
        out = run(specs, {"gpus": 8}, wait_factor=WAIT_FACTOR, policy=policy)
        figures[f"{method}_8gpu"] = worst(out, 8)
        figures[f"{method}_multi"] = worst(out, 2)
        figures[method] = max(figures[f"{method}_8gpu"], figures[f"{method}_multi"])
    return figures


# -- (d) node counts --------------------------------------------------------------------------


def node_counts(seed: int, count: int = 200) -> dict[str, float]:
    rng = random.Random(f"d:{seed}")
    trials = []
    for _ in range(count):
        nodes = rng.choices(list(NODE_MIX), weights=list(NODE_MIX.values()))[0]
        work = rng.lognormvariate(0.0, 0.9)
        trials.append(trial("a", 60.0 * work * rng.lognormvariate(0.0, 0.4), work=work,
                            nodes=nodes))
    area = sum(t["nodes"] * t["seconds"] for t in trials)
    bound = max(area / NODES, max(t["seconds"] for t in trials))
    figures = {"bound_s": bound,
               "widest": float(sum(1 for t in trials if t["nodes"] == NODES))}
    for method, policy in (("dse", None), ("greedy", Greedy), ("fcfs", Fcfs)):
        out = run([Spec("d", trials, parallelism=NODES, lookahead=count)], {"nodes": NODES},
                  policy=policy)["d"]
        largest = max(out, key=lambda r: (r["params"]["nodes"] * r["params"]["seconds"],
                                          r["params"]["nodes"]))
        figures[f"{method}_wait"] = _wait(largest)
        figures[f"{method}_widest"] = max(
            (_wait(r) for r in out if r["params"]["nodes"] == NODES), default=0.0)
        figures[f"{method}_span"] = max(r["end"] for r in out) / bound
    # Trials of the full width run one at a time: the one started last waits for all the
    # others. Even knowing every duration, the best order (shortest first) leaves this.
    chain = sorted(t["seconds"] for t in trials if t["nodes"] == NODES)
    figures["floor_widest"] = max((sum(chain[:i]) / s for i, s in enumerate(chain)),
                                  default=0.0)
    return figures


def _wait(row: Mapping[str, Any]) -> float:
    """How long *row* waited (queued to started) over how long it ran."""
    return float((row["start"] - row["queued"]) / (row["end"] - row["start"]))


# -- (c) fair share ---------------------------------------------------------------------------


def fair_share(seed: int, per_campaign: int = 2000, window: float = 600.0) -> dict[str, float]:
    rng = random.Random(f"c:{seed}")
    trials = {c: [trial(c, 60.0 * rng.lognormvariate(0.0, 0.5)) for _ in range(per_campaign)]
              for c in ("a", "b")}
    out = run([Spec("a", trials["a"]), Spec("b", trials["b"])], {"gpus": 8},
              weights={"a": 2.0, "b": 1.0}, half_life=600.0)
    until = min(max(r["end"] for r in out[c]) for c in "ab")  # both compete until then
    deviations = []
    start = window  # the first window fills the pool: left out
    while start + window <= until:
        used = {"a": 0.0, "b": 0.0}
        for c in "ab":
            for r in out[c]:
                overlap = min(r["end"], start + window) - max(r["start"], start)
                if overlap > 0:
                    used[c] += overlap
        share = used["a"] / (used["a"] + used["b"])
        deviations.append(abs(share - 2 / 3) / (2 / 3))
        start += window
    return {"windows": float(len(deviations)), "dse": max(deviations)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one seed")
    parser.add_argument("--seeds", type=int, help="seeds (default 5, quick 1)")
    args = parser.parse_args(argv)
    seeds = range(args.seeds or (1 if args.quick else 5))
    a = [makespan(s) for s in seeds]
    b = [starvation(s) for s in seeds]
    c = [fair_share(s, 800 if args.quick else 2000) for s in seeds]
    d = [node_counts(s) for s in seeds]
    print("scheduling: the engine on the probe backend in virtual time")
    print()
    print("(a) makespan / lower bound, 500 log-normal trials on 8 slots")
    print(table(("seed", "bound s", "waves", "rolling FCFS", "dse (lookahead 500)"), [
        (str(s), f"{r['bound_s']:.0f}", f"{r['waves']:.2f}", f"{r['rolling']:.3f}",
         f"{r['dse']:.3f}")
        for s, r in zip(seeds, a, strict=True)
    ]))
    print()
    print("(b) longest wait / own duration, 8-GPU pool, short 1-GPU stream:"
          " of an 8-GPU trial, of any multi-GPU trial")
    print(table(("seed", "8-GPU trials", "greedy 8-GPU", "greedy multi", "dse 8-GPU",
                 "dse multi"), [
        (str(s), f"{r['wide_8gpu_trials']:.0f}", f"{r['greedy_8gpu']:.2f}",
         f"{r['greedy_multi']:.2f}", f"{r['dse_8gpu']:.2f}", f"{r['dse_multi']:.2f}")
        for s, r in zip(seeds, b, strict=True)
    ]))
    print()
    print("(c) campaigns weighted 2:1: largest relative deviation from 2/3 per 10-min window")
    print(table(("seed", "windows", "dse"), [
        (str(s), f"{r['windows']:.0f}", f"{r['dse']:.4f}") for s, r in zip(seeds, c, strict=True)
    ]))
    print()
    print(f"(d) {NODES} nodes, 200 trials of 1 to {NODES} nodes: the largest trial's wait / its"
          " duration, and makespan / bound")
    print(table(("seed", "bound s", f"{NODES}-node trials", "wait: greedy", "fcfs", "dse",
                 f"worst {NODES}-node: floor", "dse", "makespan: greedy", "fcfs", "dse"), [
        (str(s), f"{r['bound_s']:.0f}", f"{r['widest']:.0f}", f"{r['greedy_wait']:.2f}",
         f"{r['fcfs_wait']:.2f}", f"{r['dse_wait']:.2f}", f"{r['floor_widest']:.2f}",
         f"{r['dse_widest']:.2f}", f"{r['greedy_span']:.3f}", f"{r['fcfs_span']:.3f}",
         f"{r['dse_span']:.3f}")
        for s, r in zip(seeds, d, strict=True)
    ]))
    summary = {
        "makespan_ratio_to_bound": round(max(r["dse"] for r in a), 4),
        "waves_makespan_ratio_to_bound": round(max(r["waves"] for r in a), 4),
        "rolling_makespan_ratio_to_bound": round(max(r["rolling"] for r in a), 4),
        "long_wait_ratio_to_duration": round(max(r["dse"] for r in b), 4),
        "greedy_long_wait_ratio_to_duration": round(max(r["greedy"] for r in b), 4),
        "share_deviation": round(max(r["dse"] for r in c), 4),
        **{f"{prefix}node_{name}": round(max(r[f"{method}_{key}"] for r in d), 4)
           for method, prefix in (("dse", ""), ("greedy", "greedy_"), ("fcfs", "fcfs_"))
           for name, key in (("largest_wait_ratio_to_duration", "wait"),
                             ("makespan_ratio_to_bound", "span"))},
        "seeds": len(seeds),
        "through_engine": True,
        "targets_met": max(r["dse"] for r in a) <= 1.05 and max(r["dse"] for r in b) <= 2.0
        and max(r["dse"] for r in c) <= 0.05 and max(r["dse_wait"] for r in d) <= 2.0
        and max(r["dse_span"] for r in d) <= 1.05,
    }
    print()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
