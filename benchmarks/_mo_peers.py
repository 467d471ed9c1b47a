"""The peers of multi_objective.py: Optuna's multi-objective samplers driven ask/tell in waves or
as rolling workers in the virtual time of the run's evaluations (as search_quality's peers, with
a vector of objective values told for each trial)."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, Protocol

from _mo_problems import Evaluated, Evaluator, Outcome, Params, Problem
from _peers import BenchmarkError
from _sq_peers import quiet_optuna

if TYPE_CHECKING:
    from collections.abc import Callable

OPTUNA_SAMPLERS = {
    "optuna NSGA-II": "NSGA-II",
    "optuna MOTPE": "TPE",
    "optuna GP": "GP",
    "optuna random": "random",
}


class AskTell(Protocol):
    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]: ...

    def tell(self, handle: Any, params: Params, outcome: Outcome) -> None: ...


class OptunaPeer:
    """One study with a direction per objective; params are suggested at ask time, so the
    next ask sees them running (TPE's constant liar, GPSampler's q-batch EHVI)."""

    def __init__(self, method: str, problem: Problem, seed: int, parallel: int) -> None:
        optuna = quiet_optuna()
        samplers = optuna.samplers
        kind = OPTUNA_SAMPLERS[method]
        if kind == "NSGA-II":
            sampler = samplers.NSGAIISampler(seed=seed)
        elif kind == "TPE":
            sampler = samplers.TPESampler(seed=seed, multivariate=True,
                                          constant_liar=parallel > 1)
        elif kind == "GP":
            sampler = samplers.GPSampler(seed=seed)
        else:
            sampler = samplers.RandomSampler(seed=seed)
        self._study = optuna.create_study(
            sampler=sampler, directions=["minimize"] * len(problem.metrics)
        )
        self._names = problem.names

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        out = []
        for _ in range(n):
            trial = self._study.ask()
            out.append((trial, {name: trial.suggest_float(name, 0.0, 1.0)
                                for name in self._names}))
        return out

    def tell(self, handle: Any, params: Params, outcome: Outcome) -> None:
        self._study.tell(handle, list(outcome.losses))


def drive(
    peer: AskTell, evaluate: Callable[[Params], Outcome], budget: int, parallel: int,
    rolling: bool,
) -> Evaluated:
    """Run *peer* for *budget* evaluations: waves of *parallel*, or *parallel* rolling workers
    in virtual time (trials ending together are told before anyone asks)."""
    evaluated: Evaluated = []

    def tell(handle: Any, params: dict[str, Any], outcome: Outcome) -> None:
        peer.tell(handle, params, outcome)
        evaluated.append((params, outcome.losses))

    if not rolling or parallel == 1:
        while len(evaluated) < budget:
            wave = peer.ask(min(parallel, budget - len(evaluated)))
            for handle, params, outcome in [(h, p, evaluate(p)) for h, p in wave]:
                tell(handle, params, outcome)
        return evaluated
    running: list[tuple[float, int, Any, dict[str, Any], Outcome]] = []
    asked = 0
    now = 0.0

    def launch(n: int) -> None:
        nonlocal asked
        for handle, params in peer.ask(n):
            outcome = evaluate(params)
            heapq.heappush(running, (now + outcome.seconds, asked, handle, params, outcome))
            asked += 1

    launch(min(parallel, budget))
    while running:
        now, _, handle, params, outcome = heapq.heappop(running)
        tell(handle, params, outcome)
        while running and running[0][0] == now:
            _, _, handle, params, outcome = heapq.heappop(running)
            tell(handle, params, outcome)
        for _ in range(min(parallel - len(running), budget - asked)):
            launch(1)
    if len(evaluated) != budget:
        raise BenchmarkError(f"{len(evaluated)} trials told, expected {budget}")
    return evaluated


def run_peer(
    method: str, problem: Problem, seed: int, budget: int, parallel: int, rolling: bool
) -> Evaluated:
    """One run of a peer: the points told and their objective values."""
    if method not in OPTUNA_SAMPLERS:
        raise BenchmarkError(f"unknown method {method!r}")
    peer = OptunaPeer(method, problem, seed, parallel)
    return drive(peer, Evaluator(problem, seed), budget, parallel, rolling)
