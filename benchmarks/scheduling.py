"""Scheduling: dse's pool scheduler against waves, rolling first-come-first-served and greedy
packing, in virtual time.

**This version drives ``dse._scheduler.PoolScheduler`` alone**, through its discrete-event
:func:`dse._scheduler.simulate`; the engine does not use the scheduler yet (issue 9). When it
does, the same scenarios run through the engine on the probe backend.

Scenarios (seeded; every method sees the same trials):

* **(a) makespan**: one campaign, 500 trials of log-normal duration (median 60 s, sigma 1), 8
  slots. Waves (start 8, wait for all), rolling first come first served, and the scheduler
  (one campaign: first come first served, since every trial expects the same duration).
  Against the lower bound max(total work / 8, longest trial).
* **(b) starvation**: an 8-GPU pool. Campaign ``wide`` submits a trial every 5 minutes for
  two hours, of 1, 2, 4 or 8 GPUs, log-normal around 120 s, one in twenty 20 times longer; campaign
  ``short`` keeps the pool oversubscribed with 1-GPU trials of about 30 s, one every 3 s, for
  two hours. Every trial's expected duration is its time limit (twice its median, the very
  long ones included); no trial overruns it. Greedy packing starts whatever fits, oldest
  first. The figure is the longest wait of an 8-GPU trial over its own duration.
* **(c) fair share**: campaigns weighted 2:1, each with 2,000 (quick: 800) queued 1-GPU
  trials (log-normal, median 60 s) on the 8-GPU pool. The share of GPU-seconds used by each
  campaign in each 10-minute window (the first one left out, the last partial one too); the
  figure is the largest relative deviation of the heavier campaign's share from 2/3.

Usage::

    python benchmarks/scheduling.py          # 5 seeds, about 4 minutes
    python benchmarks/scheduling.py --quick  # 1 seed, about 20 seconds

The last line printed is one JSON object: ``makespan_ratio_to_bound``,
``long_wait_ratio_to_duration``, ``greedy_long_wait_ratio_to_duration``, ``share_deviation``
(each the worst over seeds) and the figures of every method.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence

from _peers import table

from dse._scheduler import PoolScheduler, Request, Running, fits, simulate, take

Planner = Callable[[Sequence[Request], Sequence[Running], float], Sequence[Request]]
GPUS = {"gpus": 8}
WIDE_TRIALS = 24
WIDE_EVERY = 300.0
"""(b): the wide campaign submits one trial every 5 minutes for two hours (on average 3.75
GPUs of about 240 s with the long ones: a third of the pool), the short stream the rest."""


def lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * rng.lognormvariate(0.0, sigma)


# -- planners --------------------------------------------------------------------------------


def greedy(capacity: dict[str, int]) -> Planner:
    """Start every queued request that fits, oldest first (no reservation)."""

    def plan(queue: Sequence[Request], running: Sequence[Running], now: float) -> list[Request]:
        free = dict(capacity)
        for job in running:
            take(free, job.size)
        out = []
        for r in sorted(queue, key=lambda r: (r.since, r.key)):
            if fits(free, r.size):
                take(free, r.size)
                out.append(r)
        return out

    return plan


def scheduler(sched: PoolScheduler) -> tuple[Planner, Callable[[Request, float, float], None]]:
    """The pool scheduler's plan, charging each start its expected duration (the engine
    charges the expectation and corrects it at the end)."""

    def plan(queue: Sequence[Request], running: Sequence[Running], now: float) -> Sequence[Request]:
        return sched.plan(queue, running, now).start

    def charge(r: Request, now: float, _real: float) -> None:
        sched.charge(r.campaign, r.size, r.duration, now)

    return plan, charge


# -- (a) makespan -----------------------------------------------------------------------------


def makespan(seed: int) -> dict[str, float]:
    rng = random.Random(f"a:{seed}")
    durations = [lognormal(rng, 60.0, 1.0) for _ in range(500)]
    slots = {"cpus": 8}
    bound = max(sum(durations) / 8, max(durations))
    trials = [Request(f"t{i}", "a", {"cpus": 1}, d, 0.0) for i, d in enumerate(durations)]
    waves = 0.0
    for i in range(0, len(durations), 8):
        waves += max(durations[i : i + 8])
    rolling = max(end for _, end in simulate(greedy(slots), trials).values())
    plan, charge = scheduler(PoolScheduler(slots, {"a": 1.0}))
    dse = max(end for _, end in simulate(plan, trials, on_start=charge).values())
    return {"bound_s": bound, "waves": waves / bound, "rolling": rolling / bound,
            "dse": dse / bound}


# -- (b) starvation ---------------------------------------------------------------------------


def starvation_trials(seed: int) -> tuple[list[Request], dict[str, float]]:
    rng = random.Random(f"b:{seed}")
    trials: list[Request] = []
    actual: dict[str, float] = {}
    for i in range(WIDE_TRIALS):
        gpus = rng.choice([1, 2, 4, 8])
        long = rng.random() < 0.05
        median = 120.0 * (20 if long else 1)
        limit = 2 * median
        key = f"w{i}-{gpus}g"
        trials.append(Request(key, "wide", {"gpus": gpus}, limit, WIDE_EVERY * i + 1.0))
        actual[key] = min(lognormal(rng, median, 0.3), limit)
    t = 0.0
    i = 0
    while t < 7200.0:
        key = f"s{i}"
        trials.append(Request(key, "short", {"gpus": 1}, 60.0, t))
        actual[key] = min(lognormal(rng, 30.0, 0.3), 60.0)
        t += 3.0
        i += 1
    return trials, actual


def starvation(seed: int) -> dict[str, float]:
    trials, actual = starvation_trials(seed)
    wide = [r for r in trials if r.size["gpus"] == 8]

    def worst(out: dict[str, tuple[float, float]]) -> float:
        return max((out[r.key][0] - r.since) / actual[r.key] for r in wide)

    plan, charge = scheduler(PoolScheduler(GPUS, {"wide": 1.0, "short": 1.0}))
    return {
        "wide_8gpu_trials": float(len(wide)),
        "greedy": worst(simulate(greedy(GPUS), trials, actual)),
        "dse": worst(simulate(plan, trials, actual, on_start=charge)),
    }


# -- (c) fair share ---------------------------------------------------------------------------


def fair_share(seed: int, per_campaign: int = 2000, window: float = 600.0) -> dict[str, float]:
    rng = random.Random(f"c:{seed}")
    trials = [
        Request(f"{c}{i}", c, {"gpus": 1}, lognormal(rng, 60.0, 0.5), 0.0)
        for i in range(per_campaign)
        for c in ("a", "b")
    ]
    sched = PoolScheduler(GPUS, {"a": 2.0, "b": 1.0}, half_life=600.0)
    plan, charge = scheduler(sched)
    out = simulate(plan, trials, on_start=charge)
    campaign = {r.key: r.campaign for r in trials}
    # Both campaigns compete until the first runs out of trials.
    until = min(max(end for k, (_, end) in out.items() if campaign[k] == c) for c in "ab")
    deviations = []
    start = window  # the first window fills the pool: left out
    while start + window <= until:
        used = {"a": 0.0, "b": 0.0}
        for key, (s, e) in out.items():
            overlap = min(e, start + window) - max(s, start)
            if overlap > 0:
                used[campaign[key]] += overlap
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
    print("scheduling: dse._scheduler alone, in virtual time (not yet through the engine)")
    print()
    print("(a) makespan / lower bound, 500 log-normal trials on 8 slots")
    print(table(("seed", "bound s", "waves", "rolling FCFS", "dse"), [
        (str(s), f"{r['bound_s']:.0f}", f"{r['waves']:.2f}", f"{r['rolling']:.3f}",
         f"{r['dse']:.3f}")
        for s, r in zip(seeds, a, strict=True)
    ]))
    print()
    print("(b) longest wait of an 8-GPU trial / its duration, 8-GPU pool, short 1-GPU stream")
    print(table(("seed", "8-GPU trials", "greedy packing", "dse"), [
        (str(s), f"{r['wide_8gpu_trials']:.0f}", f"{r['greedy']:.2f}", f"{r['dse']:.2f}")
        for s, r in zip(seeds, b, strict=True)
    ]))
    print()
    print("(c) campaigns weighted 2:1: largest relative deviation from 2/3 per 10-min window")
    print(table(("seed", "windows", "dse"), [
        (str(s), f"{r['windows']:.0f}", f"{r['dse']:.4f}") for s, r in zip(seeds, c, strict=True)
    ]))
    summary = {
        "makespan_ratio_to_bound": round(max(r["dse"] for r in a), 4),
        "waves_makespan_ratio_to_bound": round(max(r["waves"] for r in a), 4),
        "rolling_makespan_ratio_to_bound": round(max(r["rolling"] for r in a), 4),
        "long_wait_ratio_to_duration": round(max(r["dse"] for r in b), 4),
        "greedy_long_wait_ratio_to_duration": round(max(r["greedy"] for r in b), 4),
        "share_deviation": round(max(r["dse"] for r in c), 4),
        "seeds": len(seeds),
        "through_engine": False,
    }
    print()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
