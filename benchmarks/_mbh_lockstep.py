"""dse's ``bayesian`` agent and ``hyperband`` rule without the engine: the lockstep simulation
of ``model_based_hyperband.py``'s Optuna and Syne Tune runs, driven by dse's own objects, to
see what the model makes of stopped trials apart from the engine's latency (diagnostics,
never the headline: ``--diagnose``).

P workers in lockstep; a free worker takes a promotion the rule grants (``promotions``) before
it asks the agent for one new config (``propose(1, in_flight)``, the running trials' params
in flight, as a rolling campaign asks). A trial is told to the agent when it ends: stopped
(``status = stopped`` with its step and ``max_step``: the fidelity ``step / max_step``) or
completed; a promoted trial is told again when it ends again (the agent replaces its point).

The variants change only what the agent is told (the agent itself is dse's, unchanged):

* ``as is``: what the engine tells it;
* ``log fidelity``: a stopped trial's step told as ``max_step (1 + log_eta s) / (1 + log_eta
  max_step)``, so its fidelity is the rung's place on Hyperband's geometric ladder (1/5, 2/5,
  ... at steps 1, 3, 9, 27 of 81) instead of ``s / max_step`` (1/81, 3/81, ...): agent
  0.2.3's diagnosis; 0.3.0 puts every step on a log scale itself, so this variant's steps
  are logged twice;
* ``full runs only``: stopped trials are not told (the model learns from full runs alone);
* ``stopped as full``: a stopped trial's value is told as a full run's.
* ``model promotes`` (a proposal, told as ``as is``): when a worker is free and the rule
  grants no promotion, the stopped trial whose full run the agent's model predicts best
  (its posterior mean at fidelity 1, read from the agent's last fit) is resumed if that
  prediction beats the best full run observed so far, once per trial, before a new config
  is asked for.
* ``quantile as full`` (a proposal): a stopped trial's value is told as a full run's, mapped
  through its quantile among every value reported at its step to the same quantile of the
  full runs observed so far (not told before two full runs); no fidelity column.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from early_stopping import REDUCTION, Point, RunLog

import dse
from dse_agents import BayesianAgent

if TYPE_CHECKING:
    from collections.abc import Callable

    from early_stopping import Workload

Params = dict[str, Any]
VARIANTS = ("as is", "log fidelity", "full runs only", "stopped as full", "model promotes",
            "quantile as full")


def _told_step(variant: str, step: int, max_step: int) -> float | None:
    """The step a stopped trial's observation carries (``None``: not told at all; ``0``:
    told as a full run)."""
    if variant == "as is":
        return float(step)
    if variant == "log fidelity":
        rungs = math.log(max_step) / math.log(REDUCTION)
        return max_step * (1.0 + math.log(step) / math.log(REDUCTION)) / (1.0 + rungs)
    if variant == "full runs only":
        return None
    if variant == "stopped as full":
        return 0.0
    return float(step)


def run_agent_lockstep(workload: Workload, seed: int, variant: str,
                       stepper: Callable[[Params], Callable[[], float]], budget: int,
                       plugins: dse.PluginManager, min_step: int = 1,
                       agent_options: dict[str, Any] | None = None,
                       ) -> tuple[RunLog, dict[int, Params]]:
    """One run of dse's bayesian agent with dse's hyperband rule (promotion on, *min_step*)
    in lockstep, until *budget* steps have run."""
    space = dse.Space.from_dict(workload.space)
    agent = BayesianAgent(space, seed=seed, **(agent_options or {}))
    rule = plugins.stopping_rule_class("hyperband")(
        min_step=min_step, max_step=workload.max_step, reduction_factor=REDUCTION)
    running: list[list[Any]] = []  # [number, attempt, stepper, step]
    paused: dict[int, list[Any]] = {}
    params: dict[int, Params] = {}
    points: list[Point] = []
    stopped = promoted = compute = tick = 0
    by_model: set[int] = set()
    start = time.perf_counter()

    def model_pick() -> int | None:
        """The stopped trial the agent's model predicts the best full run of, if it beats
        every full run observed (``model promotes``)."""
        model = getattr(agent, "_model", None)
        if model is None or not hasattr(model, "full"):  # no fidelity model (yet)
            return None
        numbers = sorted(n for n in paused if n not in by_model)
        if not numbers:
            return None
        x = np.array([agent._enc.encode(params[n]) for n in numbers])
        mean, _ = model.predict(x)
        best = min((p.value for p in points if p.step == workload.max_step),
                   default=math.inf)
        i = int(np.argmin(mean))
        return numbers[i] if float(mean[i]) < best else None

    def quantile_mapped(step: int, value: float) -> float | None:
        fulls = sorted(p.value for p in points if p.step == workload.max_step)
        peers = [p.value for p in points if p.step == step]
        if len(fulls) < 2 or not peers:
            return None
        q = sum(v < value for v in peers) / len(peers)
        return float(np.quantile(fulls, q))

    def tell(number: int, step: int, value: float, done: bool) -> None:
        if variant == "quantile as full" and not done:
            mapped = quantile_mapped(step, value)
            if mapped is None:
                return
            value, done = mapped, True
        told = None if done else _told_step(variant, step, workload.max_step)
        if not done and told is None:
            return
        full = done or told == 0.0
        agent.observe([dse.Observation(
            params=params[number],
            status=dse.TrialStatus.COMPLETED if full else dse.TrialStatus.STOPPED,
            metrics={workload.metric: value}, score=value, trial_number=number,
            step=None if full else told,  # type: ignore[arg-type]
            max_step=None if full else workload.max_step, proposal=number)])

    while compute < budget:
        while len(running) < workload.parallelism and paused:
            chosen = [d.trial for d in rule.promotions(set(paused))]
            if not chosen:
                break
            for number in chosen[:workload.parallelism - len(running)]:
                item = paused.pop(number)
                item[1] += 1
                running.append(item)
                promoted += 1
        while variant == "model promotes" and len(running) < workload.parallelism:
            pick = model_pick()
            if pick is None:
                break
            by_model.add(pick)
            item = paused.pop(pick)
            item[1] += 1
            running.append(item)
            promoted += 1
        while len(running) < workload.parallelism:
            got = agent.propose(1, [params[item[0]] for item in running])
            if not got:
                break
            number = len(params) + 1
            params[number] = dict(space.coerce(got[0]))
            running.append([number, 1, stepper(params[number]), 0])
        if not running:
            break
        tick += 1
        for item in list(running):
            number, attempt, step_once, step = item
            item[3] = step = step + 1
            value = step_once()
            compute += 1
            points.append(Point(float(tick), number, attempt, step, value))
            if step >= workload.max_step:
                running.remove(item)
                tell(number, step, value, done=True)
            else:
                decision = rule.report(number, step, value)
                if decision is not None and decision.verdict is dse.Verdict.STOP:
                    stopped += 1
                    running.remove(item)
                    paused[number] = item
                    tell(number, step, value, done=False)
            if compute >= budget:
                break
    finals = {p.number: p.value for p in points if p.step == workload.max_step}
    log = RunLog(f"lockstep bayesian+hyperband, {variant}", points, finals,
                 time.perf_counter() - start, stopped=stopped, promoted=promoted)
    return log, params
