"""Warm start: does the bayesian agent exploit the results of an earlier campaign at once?

For each seed and function: a *source* campaign of 30 trials is run first (the bayesian agent
with another seed — a campaign continued with a new seed — or random search); then, in the
same record, a *cold* bayesian campaign of 30 trials and a *warm* one of 10 trials with
``[agent] warm_start = ["source"]``. The figure is each run's regret (best value of its
own trials minus the optimum): the acceptance asks the warm run's after 10 trials to be at
most the cold run's after 30 (median over 10 seeds). Optuna's TPE is run the same way beside
it (``study.add_trials`` of the source's trials — TPE's or random search's — then 10
trials; cold: 30 trials) as the peer's figure. Every dse campaign runs through the real
engine on the probe backend in virtual time (``_bench.py``), P = 1.

    python benchmarks/warm_start.py            # branin and hartmann6, 10 seeds
    python benchmarks/warm_start.py --quick    # branin, 3 seeds (under a minute)

The acceptance figure is ``<function>.dse.bayesian``: a campaign warm started from another
run of its agent.

The last line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import POLL_INTERVAL_S, WORK_DIR
from _peers import import_optuna, plugins
from _sq_problems import PROBLEMS, Problem

import dse
from dse.testing import FakeClock, ProbeBackend, ProbeScript

SOURCE_TRIALS = 30
COLD_TRIALS = 30
WARM_TRIALS = 10
SOURCES = ("bayesian", "random")
"""The source campaign's agent: the same agent (another seed), or random search."""


def _campaign(name: str, agent: str, trials: int, seed: int, problem: Problem,
              workspace: Path, warm: list[str] | None = None) -> dse.Campaign:
    table: dict[str, Any] = {
        "campaign": {"name": name, "agent": agent, "max_trials": trials, "seed": seed,
                     "poll_interval": POLL_INTERVAL_S},
        "space": dict(problem.space),
        "objectives": [{"metric": "value", "direction": "minimize"}],
    }
    if warm:
        table["agent"] = {"warm_start": warm}
    return dse.campaign_from_dict(table, workspace=workspace)


def _run(store: dse.Store, campaign: dse.Campaign, problem: Problem) -> list[float]:
    """The values of *campaign*'s trials, in trial order (the engine on the probe)."""
    clock = FakeClock()

    def script(params: dict[str, Any]) -> ProbeScript:
        return ProbeScript(metrics={"value": problem.f(params)}, seconds=1.0)

    engine = dse.build_engine(campaign, store=store, plugins=plugins(), clock=clock,
                              backend=ProbeBackend(script, clock=clock))
    result = engine.run()
    rows = store.reads.trials(result.campaign_id)
    return [float((row.metrics or {})["value"]) for row in rows]


def dse_seed(problem: Problem, seed: int, source_agent: str) -> dict[str, float]:
    WORK_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="warm-", dir=WORK_DIR) as tmp:
        workspace = Path(tmp)
        store = dse.Store(workspace / "dse.sqlite")
        try:
            source = _run(store, _campaign("source", source_agent, SOURCE_TRIALS, 1000 + seed,
                                           problem, workspace), problem)
            cold = _run(store, _campaign("cold", "bayesian", COLD_TRIALS, seed, problem,
                                         workspace), problem)
            warm = _run(store, _campaign("warm", "bayesian", WARM_TRIALS, seed, problem,
                                         workspace, warm=["source"]), problem)
        finally:
            store.close()
    return {"source": min(source) - problem.optimum,
            "cold10": min(cold[:WARM_TRIALS]) - problem.optimum,
            "cold30": min(cold) - problem.optimum,
            "warm10": min(warm) - problem.optimum}


def optuna_seed(optuna: Any, problem: Problem, seed: int, source_agent: str
                ) -> dict[str, float]:
    """Optuna's TPE, cold for 30 trials and warm (the source's trials added) for 10."""
    dists = _distributions(optuna, problem)
    sampler = (optuna.samplers.TPESampler if source_agent == "bayesian"
               else optuna.samplers.RandomSampler)
    source = optuna.create_study(sampler=sampler(seed=1000 + seed))
    source.optimize(lambda t: problem.f({k: _suggest(t, k, d) for k, d in dists.items()}),
                    n_trials=SOURCE_TRIALS)
    cold = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    cold.optimize(lambda t: problem.f({k: _suggest(t, k, d) for k, d in dists.items()}),
                  n_trials=COLD_TRIALS)
    warm = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    warm.add_trials(source.trials)
    warm.optimize(lambda t: problem.f({k: _suggest(t, k, d) for k, d in dists.items()}),
                  n_trials=WARM_TRIALS)
    own = [t.value for t in warm.trials[SOURCE_TRIALS:]]
    values = [t.value for t in cold.trials]
    return {"cold10": min(values[:WARM_TRIALS]) - problem.optimum,
            "cold30": min(values) - problem.optimum, "warm10": min(own) - problem.optimum}


def _distributions(optuna: Any, problem: Problem) -> dict[str, Any]:
    out = {}
    for name, spec in problem.space.items():
        assert spec["type"] == "float", "the benchmark's functions are continuous"
        out[name] = optuna.distributions.FloatDistribution(spec["low"], spec["high"])
    return out


def _suggest(trial: Any, name: str, dist: Any) -> float:
    return float(trial.suggest_float(name, dist.low, dist.high))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="branin, 3 seeds")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per function")
    args = parser.parse_args(argv)
    names = ["branin"] if args.quick else ["branin", "hartmann6"]
    seeds = args.seeds or (3 if args.quick else 10)
    optuna = import_optuna()
    began = time.monotonic()
    figures: dict[str, Any] = {"seeds": seeds}
    print(f"{'function':<10} {'method':<12} {'source':<9} {'cold@10':>9} {'cold@30':>9}"
          f" {'warm@10':>9} {'warm@10<=cold@30':>17}")
    for name in names:
        problem = PROBLEMS[name]
        for source in SOURCES:
            for method, run in (
                ("dse bayesian", lambda s, p=problem, a=source: dse_seed(p, s, a)),
                ("optuna TPE", lambda s, p=problem, a=source: optuna_seed(optuna, p, s, a)),
            ):
                runs = [run(seed) for seed in range(seeds)]
                med = {k: statistics.median(r[k] for r in runs)
                       for k in ("cold10", "cold30", "warm10")}
                wins = sum(r["warm10"] <= r["cold30"] for r in runs)
                print(f"{name:<10} {method:<12} {source:<9} {med['cold10']:>9.4f}"
                      f" {med['cold30']:>9.4f} {med['warm10']:>9.4f} {wins:>14}/{seeds}",
                      flush=True)
                figures[f"{name}.{method.split()[0]}.{source}"] = {
                    **{k: round(v, 6) for k, v in med.items()}, "wins": wins,
                    "warm10_over_cold30": round(med["warm10"] / med["cold30"], 4)
                    if med["cold30"] > 0 else None}
    figures["wall_s"] = round(time.monotonic() - began, 1)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
