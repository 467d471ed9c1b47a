"""Syne Tune's model-based Hyperband (MOBSTER) and its BOHB on ``model_based_hyperband.py``'s
families: the peers of dse's ``bayesian`` agent under ``rule = "hyperband"``.

Syne Tune 0.13.0 is the last release with MOBSTER (0.14 dropped the Gaussian-process
searchers), and it needs numpy < 1.27, so it runs in a virtual environment of its own and this
script is started with that environment's Python by the benchmark (``--syne-python``)::

    python -m venv benchmarks/.work/syne-tune-venv
    benchmarks/.work/syne-tune-venv/bin/pip install \
        'syne-tune[gpsearchers,kde]==0.13.0' 'numpy<1.27'

It reads one request (JSON on standard input: the family, its space, ``max_step``, the
parallelism, the step budget, the seed, the scheduler) and prints one JSON object: every
learning-curve point, each trial's params, and how many trials were stopped, paused and
resumed. Only the standard library, numpy and the families' own modules (``_es_curve.py``,
``_es_mlp.py``, beside this file) are imported besides Syne Tune.

The scheduler is driven as Syne Tune's ``Tuner`` drives it (``suggest``, ``on_trial_add``,
``on_trial_result``, ``on_trial_remove`` after a stop or a pause, ``on_trial_complete``),
over the same lockstep simulation as the benchmark's Optuna runs: P workers, each running
trial advances one step per tick, a freed worker asks the scheduler at once (a resumed trial
goes on from the step it paused at, its state kept in memory: a checkpoint). The run ends the
moment the steps run reach the budget.

* ``mobster``: ``syne_tune.optimizer.baselines.MOBSTER`` (searcher ``bayesopt``: its default
  joint multi-task Gaussian process over configuration and resource, ``searcher_data =
  "rungs"``), ``type = "promotion"`` (a trial is paused at a rung and resumed when promoted,
  as dse's rule with ``promote = true``), ``brackets`` = Hyperband's ``s_max + 1``, ``grace_period =
  1``, ``reduction_factor = 3``, ``max_t = max_step``.
* ``bohb``: ``syne_tune.optimizer.baselines.BOHB`` (Syne Tune's BOHB: the same asynchronous
  Hyperband with the kernel-density searcher of Falkner et al.), the same options.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

RESOURCE = "step"


def _space(space: dict[str, Any]) -> dict[str, Any]:
    """dse's space table as Syne Tune's config space."""
    from syne_tune.config_space import choice, loguniform, randint, uniform

    out: dict[str, Any] = {}
    for name, spec in space.items():
        if isinstance(spec, list):
            out[name] = choice(spec)
        elif spec["type"] == "int":
            out[name] = randint(int(spec["low"]), int(spec["high"]))
        elif spec.get("log"):
            out[name] = loguniform(float(spec["low"]), float(spec["high"]))
        else:
            out[name] = uniform(float(spec["low"]), float(spec["high"]))
    return out


def _stepper(family: str, params: dict[str, Any], data: Any) -> Any:
    if family == "synthetic":
        from _es_curve import observed_loss

        u, v = float(params["u"]), float(params["v"])
        state = [0]

        def step_once() -> float:
            state[0] += 1
            return observed_loss(u, v, state[0])

        return step_once
    from _es_mlp import Trainer

    return Trainer(params, data).epoch


def run(request: dict[str, Any]) -> dict[str, Any]:
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    import syne_tune
    from syne_tune.backend.trial_status import Trial
    from syne_tune.optimizer.baselines import BOHB, MOBSTER
    from syne_tune.optimizer.scheduler import SchedulerDecision

    family, max_step = request["family"], int(request["max_step"])
    parallelism, budget = int(request["parallelism"]), int(request["budget"])
    seed, metric = int(request["seed"]), request["metric"]
    eta = int(request["reduction_factor"])
    brackets = math.floor(math.log(max_step) / math.log(eta) + 1e-9) + 1
    data = None
    if family == "mlp":
        from _es_mlp import load_digits_split

        data = load_digits_split(request["data"])
    options: dict[str, Any] = {
        "metric": metric, "mode": "min", "resource_attr": RESOURCE, "max_t": max_step,
        "grace_period": 1, "reduction_factor": eta, "brackets": brackets,
        "type": "promotion", "random_seed": seed,
    }
    make = {"mobster": MOBSTER, "bohb": BOHB}[request["scheduler"]]
    scheduler = make(_space(request["space"]), **options)
    names = list(request["space"])
    running: list[dict[str, Any]] = []
    paused: dict[int, dict[str, Any]] = {}
    points: list[list[Any]] = []
    params: dict[int, dict[str, Any]] = {}
    stopped = pauses = resumed = 0
    compute = tick = 0
    next_id = 0
    start = time.perf_counter()
    suggest_s = 0.0
    while compute < budget:
        while len(running) < parallelism:
            began = time.perf_counter()
            suggestion = scheduler.suggest(trial_id=next_id)
            suggest_s += time.perf_counter() - began
            if suggestion is None:
                break
            if suggestion.spawn_new_trial_id:
                config = dict(suggestion.config)
                trial = Trial(trial_id=next_id, config=config,
                              creation_time=_now())
                scheduler.on_trial_add(trial=trial)
                params[next_id] = {k: config[k] for k in names}
                running.append({"trial": trial, "step": 0, "attempt": 1,
                                "stepper": _stepper(family, params[next_id], data)})
                next_id += 1
            else:
                item = paused.pop(suggestion.checkpoint_trial_id)
                if suggestion.config is not None:
                    item["trial"].config = dict(suggestion.config)
                item["attempt"] += 1
                resumed += 1
                running.append(item)
        if not running:
            break
        tick += 1
        for item in list(running):
            trial = item["trial"]
            item["step"] += 1
            step = item["step"]
            value = float(item["stepper"]())
            compute += 1
            points.append([tick, trial.trial_id + 1, item["attempt"], step, value])
            result = {metric: value, RESOURCE: step}
            decision = scheduler.on_trial_result(trial=trial, result=result)
            if step >= max_step:
                running.remove(item)
                if decision == SchedulerDecision.CONTINUE:
                    scheduler.on_trial_complete(trial, result)
                else:
                    scheduler.on_trial_remove(trial=trial)
            elif decision == SchedulerDecision.STOP:
                running.remove(item)
                scheduler.on_trial_remove(trial=trial)
                stopped += 1
            elif decision == SchedulerDecision.PAUSE:
                running.remove(item)
                scheduler.on_trial_remove(trial=trial)
                paused[trial.trial_id] = item
                pauses += 1
            if compute >= budget:
                break
    return {"points": points, "params": {str(k): v for k, v in params.items()},
            "stopped": stopped, "paused": pauses, "resumed": resumed,
            "wall_s": time.perf_counter() - start, "suggest_s": suggest_s,
            "version": syne_tune.__version__, "brackets": brackets}


def _now() -> Any:
    from datetime import datetime

    return datetime.now()


def main() -> int:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    request = json.load(sys.stdin)
    out = run(request)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
