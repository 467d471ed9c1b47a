"""A synthetic family of learning curves, and a rolling campaign on it simulated step by step
with a real stopping rule (dse's ``asha``, from the plugin manager) and a real agent.

Instance *seed* of the family is a loss over three parameters ``x, y, r`` in ``[0, 1]``: its
final value (at ``MAX_STEP``) is a bowl with ripples around a seeded optimum, and ``r`` also
sets how fast a run gets there (``r`` high converges fast: a learning rate), so the curves
cross: a configuration that is ahead at the first rungs is not always ahead at the end. Each
reported point carries a little seeded noise; the final value is noiseless.

Run as a script it measures what the Bayesian agent reaches for a fixed total of steps when it
models stopped trials at their fidelity, when it is told them as failures, when it is not told
them at all, and when it is told them as if they had run to the end::

    python tests/support/curves.py --seeds 10
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import dse

if TYPE_CHECKING:
    from collections.abc import Callable

MAX_STEP = 27
MIN_STEP = 3
SPACE = dse.Space((dse.FloatRange("x", 0.0, 1.0), dse.FloatRange("y", 0.0, 1.0),
                   dse.FloatRange("r", 0.0, 1.0)))


class Curves:
    """Instance *seed* of the family (see the module docstring)."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.centre = rng.uniform(0.2, 0.8, 2)
        self.best_r = float(rng.uniform(0.15, 0.35))
        self.phase = rng.uniform(0.0, 2 * math.pi, 2)
        self.seed = seed

    def final(self, p: dict[str, Any]) -> float:
        """The loss of a full run (noiseless)."""
        dx, dy = p["x"] - self.centre[0], p["y"] - self.centre[1]
        ripple = 0.15 * (math.sin(9 * p["x"] + self.phase[0]) * math.sin(9 * p["y"] + self.phase[1])
                         + 1.0)
        return 2.0 * (dx * dx + dy * dy) + ripple + 1.5 * (p["r"] - self.best_r) ** 2

    def minimum(self) -> float:
        """The least final loss (on a grid of 1,001 x 1,001, at the best ``r``)."""
        axis = np.linspace(0.0, 1.0, 1001)
        x, y = np.meshgrid(axis, axis)
        values = (2.0 * ((x - self.centre[0]) ** 2 + (y - self.centre[1]) ** 2)
                  + 0.15 * (np.sin(9 * x + self.phase[0]) * np.sin(9 * y + self.phase[1]) + 1.0))
        return float(values.min())

    def loss(self, p: dict[str, Any], trial: int, step: int) -> float:
        """The loss reported at *step* of trial *trial* (noise seeded by both)."""
        rate = 0.3 + 3.0 * p["r"]
        gap = math.exp(-5.0 * rate * step / MAX_STEP) - math.exp(-5.0 * rate)
        noise = np.random.default_rng((self.seed, trial, step)).normal(0.0, 0.01)
        return self.final(p) + gap + float(noise)


def as_failure(obs: dse.Observation) -> dse.Observation | None:
    return dse.Observation(params=obs.params, status=dse.TrialStatus.FAILED,
                           trial_number=obs.trial_number, failure=dse.FailureClass.NONZERO_EXIT)


def ignored(obs: dse.Observation) -> dse.Observation | None:
    return None


def as_full_run(obs: dse.Observation) -> dse.Observation | None:
    return dse.Observation(params=obs.params, status=dse.TrialStatus.COMPLETED,
                           score=obs.score, metrics=obs.metrics, trial_number=obs.trial_number)


def as_told(obs: dse.Observation) -> dse.Observation | None:
    return obs


TELLS: dict[str, Callable[[dse.Observation], dse.Observation | None]] = {
    "fidelity": as_told, "failure": as_failure, "ignore": ignored, "full": as_full_run}
"""How a stopped trial is told to the agent: as it is (the agent models its fidelity), as a
failure, not at all, or as if it had run to the end."""


@dataclass
class Run:
    """What a simulated campaign did."""

    finals: list[float] = field(default_factory=list)
    """The final loss of every trial that ran to its end, in the order they ended."""
    trials: int = 0
    stopped: int = 0
    promoted: int = 0
    steps: int = 0

    @property
    def best(self) -> float:
        return min(self.finals, default=math.inf)


def simulate(agent: dse.Agent, curves: Curves, *, budget: int, workers: int = 4,
             stopping: bool = True,
             tell: Callable[[dse.Observation], dse.Observation | None] = as_told) -> Run:
    """A rolling campaign of *workers* slots: every tick each running trial runs one step; a
    trial reports its loss at every rung and at its end to ``asha`` (reduction factor 3,
    rungs from ``MIN_STEP``), which may stop it; a free slot takes a promotion first, else a
    new proposal. It ends when *budget* steps have been run. The agent is told each trial's
    end through *tell* (a stopped one with its ``step`` and ``max_step``)."""
    rule: Any = dse.PluginManager().stopping_rule_class("asha")(
        min_step=MIN_STEP, max_step=MAX_STEP, reduction_factor=3)
    rungs = set(rule.rungs) | {MAX_STEP}
    params: dict[int, dict[str, Any]] = {}
    at: dict[int, int] = {}  # running trial -> steps done
    stopped: dict[int, int] = {}  # stopped trial -> the step it stopped at
    run = Run()

    def end(number: int, step: int, status: dse.TrialStatus, value: float) -> None:
        full = status is dse.TrialStatus.COMPLETED
        obs = dse.Observation(params=params[number], status=status, score=value,
                              metrics={"loss": value}, trial_number=number,
                              step=None if full else step, max_step=MAX_STEP)
        told = obs if full else tell(obs)
        if told is not None:
            agent.observe([told])

    while run.steps < budget:
        free = workers - len(at)
        if free and stopping:
            for decision in rule.promotions(sorted(stopped))[:free]:
                at[decision.trial] = stopped.pop(decision.trial)  # from its checkpoint
                run.promoted += 1
        free = workers - len(at)
        if free:
            for p in agent.propose(free, [params[n] for n in sorted(at)]):
                run.trials += 1
                params[run.trials] = SPACE.coerce(p)
                at[run.trials] = 0
        for number in sorted(at):
            at[number] += 1
            run.steps += 1
            step = at[number]
            if step not in rungs:
                continue
            value = curves.loss(params[number], number, step)
            decision = rule.report(number, step, value) if stopping else None
            if step == MAX_STEP:
                del at[number]
                run.finals.append(curves.final(params[number]))
                end(number, step, dse.TrialStatus.COMPLETED, value)
            elif decision is not None and decision.verdict is dse.Verdict.STOP:
                del at[number]
                stopped[number] = step
                run.stopped += 1
                end(number, step, dse.TrialStatus.STOPPED, value)
    return run


def _one(job: tuple[str, int, int]) -> tuple[str, int, float, int]:
    from dse_agents import BayesianAgent

    variant, seed, budget = job
    agent = BayesianAgent(SPACE, seed=seed)
    curves = Curves(seed)
    if variant == "no stopping":
        run = simulate(agent, curves, budget=budget, stopping=False)
    else:
        run = simulate(agent, curves, budget=budget, tell=TELLS[variant])
    return variant, seed, run.best - curves.minimum(), run.trials


def main(argv: list[str]) -> None:
    import argparse
    from concurrent.futures import ProcessPoolExecutor

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=30, help="in full runs' steps")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--variants", default="fidelity,failure,ignore,full,no stopping")
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    jobs = [(v, s, args.budget * MAX_STEP) for s in range(args.seeds) for v in variants]
    results: dict[str, list[tuple[int, float, int]]] = {v: [] for v in variants}
    with ProcessPoolExecutor(args.jobs) as pool:
        for variant, seed, best, trials in pool.map(_one, jobs):
            results[variant].append((seed, best, trials))
            print(f"{variant:12} seed {seed:2}: regret {best:.4f} ({trials} trials)",
                  flush=True)
    # The least regret of any variant, per seed.
    floor = {s: min(best for rows in results.values() for seed, best, _ in rows if seed == s)
             for s in range(args.seeds)}
    for variant, rows in results.items():
        bests = sorted(best for _, best, _ in rows)
        wins = sum(best <= floor[seed] + 1e-12 for seed, best, _ in rows)
        print(f"{variant:12} median regret {statistics.median(bests):.4f}"
              f"  quartiles {np.quantile(bests, 0.25):.4f}..{np.quantile(bests, 0.75):.4f}"
              f"  best of the variants on {wins}/{len(rows)} seeds"
              f"  median trials {statistics.median(t for _, _, t in rows):.0f}")
    if "fidelity" in results:
        mine = {seed: best for seed, best, _ in results["fidelity"]}
        for variant, rows in results.items():
            if variant != "fidelity":
                better = sum(mine[seed] < best for seed, best, _ in rows)
                worse = sum(mine[seed] > best for seed, best, _ in rows)
                print(f"fidelity against {variant}: better on {better} seeds, worse on {worse}"
                      f" of {len(rows)}")


if __name__ == "__main__":
    main(sys.argv[1:])
