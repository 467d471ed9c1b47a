"""The peers of search_quality.py: Optuna's samplers and Ax/BoTorch, driven ask/tell in waves
or as rolling workers in the virtual time of the run's evaluations.

A peer is an :class:`AskTell`: ``ask(n)`` returns up to *n* new trials (each a handle and its
params), ``tell`` reports one's outcome. :func:`drive` runs one in waves (ask P, evaluate, tell
P) or rolling (an event simulation: a worker asks as soon as its trial ends, the trials still
running pending in the peer).
"""

from __future__ import annotations

import heapq
import logging
import time
import warnings
from typing import TYPE_CHECKING, Any, Protocol

from _peers import BenchmarkError, import_optuna
from _sq_problems import Evaluated, Evaluator, Outcome, Params, Problem

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

OPTUNA_SAMPLERS = {
    "optuna GP": "GP",
    "optuna TPE": "TPE",
    "optuna TPE indep": "TPE independent",
    "optuna random": "random",
}
AX_METHOD = "ax botorch"
AX_INSTALL = "ax-platform torch==2.13.0"
"""torch pinned first: a plain install of ax-platform pulls a CUDA build of torch."""
OPTUNA_INSTALL = "optuna scipy torch==2.13.0"


class AskTell(Protocol):
    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]: ...

    def tell(self, handle: Any, params: Params, outcome: Outcome) -> None: ...


class Timed:
    """Wraps a peer and adds up the seconds its ``ask`` calls take."""

    def __init__(self, peer: AskTell) -> None:
        self.peer = peer
        self.ask_s: list[float] = []
        """Seconds of each ``ask`` call that asked for more than one trial (a batch)."""
        self.ask1_s: list[float] = []
        """Seconds of each ``ask`` call for one trial."""

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        start = time.perf_counter()
        got = self.peer.ask(n)
        (self.ask_s if n > 1 else self.ask1_s).append(time.perf_counter() - start)
        return got

    def tell(self, handle: Any, params: Params, outcome: Outcome) -> None:
        self.peer.tell(handle, params, outcome)


# -- Optuna --------------------------------------------------------------------------------


def quiet_optuna() -> Any:
    return import_optuna(OPTUNA_INSTALL)


def _suggest(trial: Any, space: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in space.items():
        if isinstance(spec, list):
            out[name] = trial.suggest_categorical(name, spec)
        elif spec["type"] == "int":
            out[name] = trial.suggest_int(
                name, spec["low"], spec["high"], step=spec.get("step", 1),
                log=spec.get("log", False),
            )
        else:
            out[name] = trial.suggest_float(
                name, spec["low"], spec["high"], log=spec.get("log", False)
            )
    return out


def sampler_settings(method: str, parallel: int) -> tuple[str, dict[str, Any]]:
    """The Optuna sampler class of *method* and its options (besides the seed) at
    parallelism *parallel*: TPE with ``constant_liar`` at P > 1, the others as they come."""
    kind = OPTUNA_SAMPLERS[method]
    if kind in ("TPE", "TPE independent"):
        return "TPESampler", {"multivariate": kind == "TPE", "constant_liar": parallel > 1}
    return ("GPSampler" if kind == "GP" else "RandomSampler"), {}


class OptunaPeer:
    """One study; params are suggested at ask time, so the next ask sees them (constant
    liar, GPSampler's pending trials)."""

    def __init__(self, method: str, problem: Problem, seed: int, parallel: int) -> None:
        optuna = quiet_optuna()
        name, options = sampler_settings(method, parallel)
        sampler = getattr(optuna.samplers, name)(seed=seed, **options)
        self._study = optuna.create_study(sampler=sampler, direction="minimize")
        self._fail = optuna.trial.TrialState.FAIL
        self._space = problem.space

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        out = []
        for _ in range(n):
            trial = self._study.ask()
            out.append((trial, _suggest(trial, self._space)))
        return out

    def tell(self, handle: Any, params: Params, outcome: Outcome) -> None:
        if outcome.observed is None:
            self._study.tell(handle, state=self._fail)
        else:
            self._study.tell(handle, outcome.observed)


# -- Ax ------------------------------------------------------------------------------------


def import_ax() -> Any:
    """Ax's ``ax.api`` with its logging and warnings silenced, or a :class:`BenchmarkError`
    naming what to install."""
    # Ax logs at INFO as it is imported (its storage layer), before its levels can be set.
    logging.disable(logging.INFO)
    try:
        import ax.api.client as client
        import ax.api.configs as configs
        from ax.utils.common import logger as ax_logger
    except ImportError:
        raise BenchmarkError(
            "ax-platform is not installed; the full run needs it:"
            f" `.venv/bin/pip install {AX_INSTALL}` (or --no-ax)"
        ) from None
    finally:
        logging.disable(logging.NOTSET)
    ax_logger.set_stderr_log_level(logging.ERROR)
    ax_logger.set_ax_logger_levels(logging.ERROR)
    for name in ("ax", "botorch", "gpytorch", "linear_operator", "pyro"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for module in ("ax", "botorch", "gpytorch", "linear_operator", "torch"):
        warnings.filterwarnings("ignore", module=module)
    return client, configs


def _ax_parameters(configs: Any, space: Mapping[str, Any]) -> list[Any]:
    out: list[Any] = []
    for name, spec in space.items():
        if isinstance(spec, list):
            out.append(configs.ChoiceParameterConfig(
                name=name, values=[str(v) for v in spec], parameter_type="str", is_ordered=False
            ))
            continue
        step = spec.get("step")
        out.append(configs.RangeParameterConfig(
            name=name,
            parameter_type=spec["type"],
            bounds=(spec["low"], spec["high"]),
            scaling="log" if spec.get("log") else None,
            step_size=step if step not in (None, 1) else None,
        ))
    return out


class AxPeer:
    """An Ax ``Client`` with its default generation strategy (a centre point and Sobol, then
    BoTorch's modular GP with qLogNEI); trials running are pending in Ax."""

    def __init__(self, problem: Problem, seed: int) -> None:
        client, configs = import_ax()
        self._client = client.Client(random_seed=seed)
        self._client.configure_experiment(parameters=_ax_parameters(configs, problem.space))
        self._client.configure_optimization(objective="-value")
        self._space = problem.space

    def _params(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, spec in self._space.items():
            value = raw[name]
            if isinstance(spec, list):
                out[name] = str(value)
            else:
                out[name] = round(float(value)) if spec["type"] == "int" else float(value)
        return out

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        # Ax may give fewer than asked (the Sobol start pauses for data); ask again for the
        # rest, with those just generated pending, until it gives nothing more.
        out: list[tuple[Any, dict[str, Any]]] = []
        while len(out) < n:
            got = self._client.get_next_trials(max_trials=n - len(out))
            if not got:
                break
            out.extend((index, self._params(raw)) for index, raw in got.items())
        return out

    def tell(self, handle: Any, params: Params, outcome: Outcome) -> None:
        if outcome.observed is None:
            self._client.mark_trial_failed(handle)
        else:
            self._client.complete_trial(handle, raw_data={"value": outcome.observed})


def make_peer(method: str, problem: Problem, seed: int, parallel: int) -> AskTell:
    if method == AX_METHOD:
        return AxPeer(problem, seed)
    if method in OPTUNA_SAMPLERS:
        return OptunaPeer(method, problem, seed, parallel)
    raise BenchmarkError(f"unknown method {method!r}")


# -- driving a peer ------------------------------------------------------------------------


def drive(
    peer: AskTell, evaluate: Evaluator, budget: int, parallel: int, rolling: bool
) -> Evaluated:
    """Run *peer* for *budget* evaluations: waves of *parallel*, or *parallel* rolling workers
    in virtual time (trials ending together are told before anyone asks)."""
    evaluated: Evaluated = []

    def tell(handle: Any, params: dict[str, Any], outcome: Outcome) -> None:
        peer.tell(handle, params, outcome)
        evaluated.append((params, outcome.observed))

    if not rolling or parallel == 1:
        while len(evaluated) < budget:
            wave = peer.ask(min(parallel, budget - len(evaluated)))
            if not wave:
                raise BenchmarkError("the peer proposed nothing with no trial running")
            outcomes = [(h, p, evaluate(p)) for h, p in wave]
            for handle, params, outcome in outcomes:
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
        free = min(parallel - len(running), budget - asked)
        for _ in range(free):
            launch(1)
        if not running and asked < budget:
            raise BenchmarkError("the peer proposed nothing with no trial running")
    return evaluated


def run_peer(
    method: str, problem: Problem, seed: int, budget: int, parallel: int, rolling: bool,
    on_timing: Callable[[list[float], list[float]], None] | None = None,
) -> Evaluated:
    """One run of a peer; *on_timing* gets the seconds of its batch and single asks."""
    timed = Timed(make_peer(method, problem, seed, parallel))
    evaluated = drive(timed, Evaluator(problem, seed), budget, parallel, rolling)
    if on_timing is not None:
        on_timing(timed.ask_s, timed.ask1_s)
    return evaluated
