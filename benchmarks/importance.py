"""Parameter importance: dse's PED-ANOVA (``dse.report.ped_anova``, the importance figure of
``dse report --html``) against Optuna's importance evaluators on the same trials, in the same
run.

Two test functions whose active params are known, each sampled at random (seeded, the space's
own ``sample``):

* **continuous**: five floats in [0, 1], ``y = (x0 - 0.3)² + 2·|x1 - 0.7|``: x0 and x1 active,
  x2, x3 and x4 inert;
* **mixed**: a categorical of four levels (``col`` best), a log float (best at 0.01) and a log
  integer (best at 32) active; an integer, a categorical of six levels, a boolean and a float
  inert.

Each seed's trials go to dse's ``ped_anova`` and, as completed trials of an Optuna study, to
``optuna.importance.get_param_importances`` with ``PedAnovaImportanceEvaluator`` and with
``FanovaImportanceEvaluator`` (when it imports: it needs scikit-learn). The figures, per
function and evaluator: how often the params ranked first are exactly the active ones
(*recovered*), how often the top two agree with dse's, the mean Spearman correlation of the
whole ranking with dse's, and the time per call.

Usage::

    python benchmarks/importance.py          # 20 seeds of 200 and of 1,000 trials
    python benchmarks/importance.py --quick  # 5 seeds of 200 trials, under a minute

fANOVA takes seconds a call where PED-ANOVA takes milliseconds: the full run is about twenty
minutes with it, one without scikit-learn well under one.

The last line printed is one JSON object: ``seeds``, ``trials``, ``fanova`` (whether it ran)
and, per function, ``<evaluator>_recovered`` (a share of the runs), ``<evaluator>_top2_match``
and ``<evaluator>_spearman`` (against dse), ``<evaluator>_ms``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from typing import Any

from _peers import BenchmarkError, import_optuna, table

import dse
from dse.report import ped_anova

CONTINUOUS = dse.Space.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0}
                                  for i in range(5)})
MIXED = dse.Space.from_dict({
    "layout": ["row", "col", "tile", "strip"],
    "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
    "batch": {"type": "int", "low": 1, "high": 1024, "log": True},
    "n": {"type": "int", "low": 1, "high": 64},
    "kernel": ["k0", "k1", "k2", "k3", "k4", "k5"],
    "flag": [True, False],
    "z": {"type": "float", "low": -1.0, "high": 1.0},
})


def continuous(p: dict[str, Any]) -> float:
    return (p["x0"] - 0.3) ** 2 + 2 * abs(p["x1"] - 0.7)


def mixed(p: dict[str, Any]) -> float:
    return ((0.0 if p["layout"] == "col" else 1.0) + 0.5 * abs(math.log10(p["lr"]) + 2)
            + 0.3 * abs(math.log2(p["batch"]) - 5))


PROBLEMS = {
    "continuous": (CONTINUOUS, continuous, {"x0", "x1"}),
    "mixed": (MIXED, mixed, {"layout", "lr", "batch"}),
}


def distributions(space: dse.Space) -> dict[str, Any]:
    """Optuna's distribution of each param of *space*."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    found: dict[str, Any] = {}
    for p in space:
        if isinstance(p, dse.Categorical):
            found[p.name] = CategoricalDistribution(list(p.choices))
        elif isinstance(p, dse.IntRange):
            found[p.name] = IntDistribution(p.low, p.high, log=p.log, step=p.step)
        else:
            found[p.name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
    return found


def study_of(optuna: Any, space: dse.Space, trials: list[tuple[dict[str, Any], float]]) -> Any:
    """An Optuna study holding *trials* as completed trials."""
    study = optuna.create_study(direction="minimize")
    dists = distributions(space)
    study.add_trials([optuna.trial.create_trial(params=p, distributions=dists, value=v)
                      for p, v in trials])
    return study


def evaluators(optuna: Any) -> dict[str, Any]:
    """Optuna's evaluators that import here, by the name the figures use."""
    found = {"optuna_ped": optuna.importance.PedAnovaImportanceEvaluator}
    try:
        optuna.importance.FanovaImportanceEvaluator(seed=0)
    except ImportError:
        return found
    found["fanova"] = lambda: optuna.importance.FanovaImportanceEvaluator(seed=0)
    return found


def spearman(a: list[str], b: list[str]) -> float:
    """Spearman's correlation of two rankings of the same names."""
    n = len(a)
    where = {name: i for i, name in enumerate(b)}
    squares = sum((i - where[name]) ** 2 for i, name in enumerate(a))
    return 1.0 - 6.0 * squares / (n * (n * n - 1))


def one_run(optuna: Any, problem: str, seed: int, count: int
            ) -> dict[str, tuple[dict[str, float], float]]:
    """Each evaluator's importances of one seed's trials, and its seconds."""
    space, f, _ = PROBLEMS[problem]
    rng = random.Random(seed)
    trials = [(p, f(p)) for p in (space.sample(rng) for _ in range(count))]
    began = time.perf_counter()
    ours = ped_anova(space, trials)
    found = {"dse": (ours.importance, time.perf_counter() - began)}
    if ours.reason:
        raise BenchmarkError(f"{problem}, seed {seed}: dse computed no importance: {ours.reason}")
    study = study_of(optuna, space, trials)
    for name, make in evaluators(optuna).items():
        began = time.perf_counter()
        shares = optuna.importance.get_param_importances(study, evaluator=make())
        found[name] = (dict(shares), time.perf_counter() - began)
    return found


def summarise(runs: list[dict[str, tuple[dict[str, float], float]]], active: set[str]
              ) -> dict[str, float]:
    """The figures of one function over its runs."""
    figures: dict[str, float] = {}
    for name in runs[0]:
        ranked = [list(r[name][0]) for r in runs]
        ours = [list(r["dse"][0]) for r in runs]
        figures[f"{name}_recovered"] = round(sum(
            set(order[:len(active)]) == active for order in ranked) / len(runs), 3)
        if name != "dse":
            figures[f"{name}_top2_match"] = round(sum(
                set(a[:2]) == set(b[:2]) for a, b in zip(ranked, ours, strict=True))
                / len(runs), 3)
            figures[f"{name}_spearman"] = round(sum(
                spearman(a, b) for a, b in zip(ranked, ours, strict=True)) / len(runs), 3)
        figures[f"{name}_ms"] = round(1000 * sum(r[name][1] for r in runs) / len(runs), 2)
    return figures


def rankings(run: dict[str, tuple[dict[str, float], float]]) -> list[tuple[str, ...]]:
    """Rows of a table of each param's share by each evaluator (dse's order)."""
    names = list(run)
    return [(param, *(f"{run[n][0].get(param, math.nan):.3f}" for n in names))
            for param in run["dse"][0]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 seeds of 200 trials")
    args = parser.parse_args(argv)
    seeds = 5 if args.quick else 20
    counts = [200] if args.quick else [200, 1000]
    try:
        optuna = import_optuna()
        results: dict[str, Any] = {"seeds": seeds, "trials": counts,
                                   "fanova": "fanova" in evaluators(optuna)}
        rows = []
        for problem, (_, _, active) in PROBLEMS.items():
            runs = [one_run(optuna, problem, seed, count)
                    for count in counts for seed in range(seeds)]
            figures = summarise(runs, active)
            results[problem] = figures
            print(f"{problem}: seed 0, {counts[0]} trials; active: {', '.join(sorted(active))}")
            print(table(("param", *runs[0]), rankings(runs[0])))
            print()
            for name in runs[0]:
                rows.append((f"{problem} / {name}", f"{figures[f'{name}_recovered']:.2f}",
                             f"{figures.get(f'{name}_top2_match', 1.0):.2f}",
                             f"{figures.get(f'{name}_spearman', 1.0):.2f}",
                             f"{figures[f'{name}_ms']:.1f}"))
    except BenchmarkError as exc:
        print(f"importance: {exc}", file=sys.stderr)
        return 1
    runs_each = seeds * len(counts)
    print(f"over {runs_each} runs per function ({seeds} seeds x {counts} trials);"
          f" fANOVA {'ran' if results['fanova'] else 'skipped: scikit-learn does not import'}")
    print(table(("function / evaluator", "recovered", "top-2 = dse", "spearman vs dse",
                 "ms per call"), rows))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
