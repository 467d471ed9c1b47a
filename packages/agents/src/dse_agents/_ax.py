"""Ax's Bayesian optimisation as a dse agent (``agent = "ax"``): an Ax ``Client`` over the
campaign's space, asked for trials and told their results through Ax's own API, so it
chooses its generation strategy, handles a batch in flight and models the results as it does
in a study of its own.

Each proposal is a trial of ``Client.get_next_trials`` (running in Ax until it is told: a
batch's later picks and a rolling campaign's next ones see it pending); each observation is
told to the trial it answers: a completed trial ``complete_trial`` with its loss (the score
oriented so lower is better, or each objective's in a Pareto campaign), a trial stopped early
its loss at its step (``attach_data`` with that progression) and ``mark_trial_early_stopped``
(as Ax's own early stopping leaves it), every other outcome and a rejection
``mark_trial_failed`` with the reason. A promoted trial's later end is attached to the same
trial at its new step (a full run at the campaign's ``max_step``). Results are handed to Ax in
its trials' order at the next proposal, however they came in.

dse never runs one configuration twice, and this agent never proposes one again: Ax's repeat
of a point already told is completed with the same result (a failure's repeat, or one of a
point in flight, abandoned) and Ax is asked again (``DUPLICATE_TRIES`` times at most per call).
Deterministic for a seed (``Client(random_seed=seed)``, which seeds every call Ax makes, and
torch on one thread in them): a resumed run replays the same calls into a new client and gets
the same proposals. There is no snapshot: Ax's JSON snapshot leaves out the model its next
fit starts from, so a client restored from one proposes otherwise than the one it was taken
of.
"""

from __future__ import annotations

import importlib
import json
import logging
import random
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dse import Categorical, ConfigError, FloatRange, IntRange, TrialStatus
from dse_agents._losses import finite_losses

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from dse import Observation, Parameter, Space
    from dse.model._space import Value

DUPLICATE_TRIES = 10
"""Points per call Ax may repeat before the call gives up finding one not already taken (each
costs a model fit)."""
MAX_CHOICES = 1000
"""The most values Ax takes in a choice parameter: a stepped range with more is a range Ax
searches whose values are snapped to the step."""
METHODS = ("fast", "quality", "random_search")
"""Ax's generation strategies (``configure_generation_strategy(method=...)``)."""
INSTALL = ("pip install torch==2.13.0 && pip install 'dse-agents[ax]' (torch first: its"
           " CPU wheel, or the build you want; ax-platform alone pulls a CUDA build)")
QUIET = ("ax", "botorch", "gpytorch", "linear_operator", "pyro")
"""The loggers of Ax and what it runs on, kept to errors (they log every trial at INFO)."""
RESULTS = (TrialStatus.COMPLETED, TrialStatus.CACHED, TrialStatus.STOPPED)
"""Outcomes with a loss to tell (a cache hit is told as the trial it reuses ended; a
``cached`` status is taken as completed)."""


@dataclass(frozen=True, slots=True)
class _Ax:
    """The parts of Ax the agent uses (imported when an agent is built)."""

    client: Any
    """``ax.api.client.Client``."""
    configs: Any
    """``ax.api.configs``."""
    errors: Any
    """``ax.exceptions.core``."""
    generation: Any
    """``ax.exceptions.generation_strategy``."""
    torch: Any


def import_ax() -> _Ax:
    """Ax, quiet, or a :class:`dse.ConfigError` saying how to install it."""
    before = logging.root.manager.disable
    logging.disable(logging.INFO)  # Ax logs as it is imported, before its levels can be set
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecations of Ax's dependencies, not ours
            found = _Ax(*(importlib.import_module(m) for m in (
                "ax.api.client", "ax.api.configs", "ax.exceptions.core",
                "ax.exceptions.generation_strategy", "torch")))
            ax_logger: Any = importlib.import_module("ax.utils.common.logger")
    except ImportError as exc:
        msg = f"agent.ax: Ax is not installed ({exc}); {INSTALL}"
        raise ConfigError(msg) from None
    finally:
        logging.disable(before)
    ax_logger.set_stderr_log_level(logging.ERROR)
    ax_logger.set_ax_logger_levels(logging.ERROR)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.ERROR)
    return found


# -- the space as Ax sees it ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AxParameter:
    """One parameter of the space as Ax is given it, and the way back."""

    config: Any
    """Its Ax parameter config (``RangeParameterConfig``, ``ChoiceParameterConfig``)."""
    decode: Callable[[Any], Value]
    """Ax's value as the parameter's."""
    encode: Callable[[Value], Any]
    """The parameter's value as Ax's."""
    first: Value
    """Its first value (its lowest, or first choice)."""


def ax_parameter(configs: Any, param: Parameter) -> AxParameter:
    """How Ax is given *param*: a categorical an unordered choice of labels (its values'
    strings); an integer range, or a float range without a ``step``, a range (``log``
    scaled); a stepped range of at most :data:`MAX_CHOICES` values and no ``log`` an ordered
    choice of its values (what Ax makes of a range with a ``step_size``), with ``log`` or
    more values a range whose values are snapped to the step; a single value a fixed one."""
    name = param.name
    if isinstance(param, Categorical) or param.size == 1:
        values = param.choices if isinstance(param, Categorical) else (param.low,)
        labels = [str(v) for v in values]
        if len(set(labels)) < len(labels):  # 1 and "1": labels of their own
            labels = [f"{i}: {v}" for i, v in enumerate(values)]
        of_label = dict(zip(labels, values, strict=True))
        of_value = {json.dumps(v): label for label, v in of_label.items()}
        return AxParameter(
            configs.ChoiceParameterConfig(name=name, values=labels, parameter_type="str",
                                          is_ordered=False),
            lambda raw: of_label[str(raw)], lambda value: of_value[json.dumps(value)],
            values[0])
    kind = param.kind
    scaling = "log" if param.log else None
    if isinstance(param, FloatRange) and param.step is None:
        low, high = param.low, param.high
        return AxParameter(
            configs.RangeParameterConfig(name=name, bounds=(low, high), parameter_type=kind,
                                         scaling=scaling),
            lambda raw: min(max(float(raw), low), high), float, low)
    if isinstance(param, IntRange) and param.step == 1:
        return AxParameter(
            configs.RangeParameterConfig(name=name, bounds=(param.low, param.high),
                                         parameter_type=kind, scaling=scaling),
            lambda raw: param.coerce(round(float(raw))), int, param.low)
    grid: Sequence[Value] = param.values()
    if not param.log and len(grid) <= MAX_CHOICES:
        return AxParameter(
            configs.ChoiceParameterConfig(name=name, values=list(grid), parameter_type=kind,
                                          is_ordered=True),
            param.coerce, _same, grid[0])
    return AxParameter(
        configs.RangeParameterConfig(name=name, bounds=(grid[0], grid[-1]),
                                     parameter_type=kind, scaling=scaling),
        lambda raw: _snap(grid, float(raw)), _same, grid[0])


def _same(value: Value) -> Value:
    return value


def _snap(grid: Sequence[Value], raw: float) -> Value:
    """The value of the evenly spaced *grid* nearest *raw*."""
    low, high = float(grid[0]), float(grid[-1])
    index = round((raw - low) / (high - low) * (len(grid) - 1))
    return grid[min(max(index, 0), len(grid) - 1)]


# -- the agent --------------------------------------------------------------------------------


class AxAgent:
    """Proposes what an Ax ``Client`` generates (module docstring).

    :param objectives: how many losses each trial has: 1, or a Pareto campaign's objective
        count (Ax's objective ``"-loss_0, -loss_1"``: every loss minimised, as dse orients
        them; Ax then proposes by expected hypervolume improvement).
    :param method: Ax's generation strategy: ``"fast"`` (the default: a centre point and
        Sobol, then BoTorch's Gaussian process), ``"quality"``, or ``"random_search"``.
    :param initialization_budget: trials of the start (the centre point and Sobol) before
        the model; Ax's default (5) when not given.
    :param min_observed_initialization_trials: start trials completed before the model takes
        over; Ax's default (half the budget) when not given.
    :param initialize_with_center: the first trial is the centre of the space.
    :param allow_exceeding_initialization_budget: the start goes on while it waits for
        results, instead of waiting.
    """

    name: ClassVar[str] = "ax"
    version: ClassVar[str] = "1"

    def __init__(self, space: Space, seed: int = 0, *, objectives: int = 1,
                 method: str = "fast", initialization_budget: int | None = None,
                 min_observed_initialization_trials: int | None = None,
                 initialize_with_center: bool = True,
                 allow_exceeding_initialization_budget: bool = False) -> None:
        _check(objectives, method, initialization_budget,
               min_observed_initialization_trials, initialize_with_center,
               allow_exceeding_initialization_budget)
        ax = import_ax()
        self._ax = ax
        self.space = space
        self._seed = seed
        self._objectives = objectives
        self._metrics = ["loss"] if objectives == 1 else [f"loss_{i}" for i in range(objectives)]
        self._params = {p.name: ax_parameter(ax.configs, p) for p in space}
        self._client = ax.client.Client(random_seed=seed)
        with self._calling():
            try:
                self._client.configure_experiment(
                    parameters=[p.config for p in self._params.values()])
            except ax.errors.UserInputError as exc:
                msg = f"agent.ax: Ax refuses the campaign's space: {_line(exc)}"
                raise ConfigError(msg) from None
            self._client.configure_optimization(
                objective=", ".join(f"-{m}" for m in self._metrics))
            self._client.configure_generation_strategy(
                method=method, initialization_budget=initialization_budget,
                min_observed_initialization_trials=min_observed_initialization_trials,
                initialize_with_center=initialize_with_center,
                allow_exceeding_initialization_budget=allow_exceeding_initialization_budget)
        self._running: dict[str, int] = {}
        """The Ax trial of each point proposed and not told yet, by the point's key."""
        self._told: dict[str, list[float] | None] = {}
        """The points told (their losses; ``None``: no result), by key."""
        self._trial_of: dict[int, int] = {}
        """The Ax trial of each dse trial number told (a promoted one is told again)."""
        self._stopped: set[int] = set()
        """The Ax trials marked early stopped (a later end is attached to them)."""
        self._ended: set[int] = set()
        """The Ax trials told an end (completed, failed, abandoned or stopped)."""
        self._waiting: list[tuple[int, int, Observation, list[float] | None]] = []
        """Results to hand to Ax at the next proposal: (Ax trial, order told, ...)."""
        self._fillers = 0
        self._spent = False
        """Ax said no point of the space is left."""

    @property
    def client(self) -> Any:
        """The Ax ``Client`` it asks and tells (what Ax has learnt, as Ax sees it:
        ``agent.client.summarize()``, ``get_best_parameterization()``...). Results told are
        handed to it at the next proposal."""
        return self._client

    @property
    def exhausted(self) -> bool:
        """Every point of a finite space told, or Ax found none left."""
        size = self.space.cardinality
        return self._spent or (size is not None and len(self._told) >= size)

    def propose(self, n: int, in_flight: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self._hand_over()
        taken = {_key(p) for p in in_flight} | set(self._running)
        size = self.space.cardinality
        if size is not None:  # what a finite space has left (Ax would repeat itself)
            n = min(n, size - len(taken | set(self._told)))
        out: list[dict[str, Any]] = []
        repeats = 0
        # Ax may give fewer than asked (its start waits for results): asked again for the
        # rest, those just generated pending, until it gives nothing more.
        while len(out) < n and repeats < DUPLICATE_TRIES and not self.exhausted:
            got = self._generate(n - len(out))
            if not got and not out and not self._running and not self._spent:
                got = self._filler(taken)
            if not got:
                break
            for index, raw in sorted(got.items()):
                params = self._decode(raw)
                key = _key(params)
                if key in taken or key in self._told:
                    self._settle_repeat(index, key, key in taken)
                    repeats += 1
                else:
                    taken.add(key)
                    self._running[key] = index
                    out.append(params)
        return out

    def _generate(self, n: int) -> dict[int, Any]:
        """Up to *n* new trials of Ax; none while it waits for results, none (and spent)
        when it has no point left."""
        errors, generation = self._ax.errors, self._ax.generation
        with self._calling():
            try:
                got: dict[int, Any] = self._client.get_next_trials(max_trials=n)
            except (errors.DataRequiredError, generation.MaxParallelismReachedException):
                return {}
            except errors.OptimizationComplete:  # SearchSpaceExhausted and its kin
                self._spent = True
                return {}
        return got

    def _filler(self, taken: set[str]) -> dict[int, Any]:
        """A seeded random point attached as a trial of Ax's, when Ax waits for results and
        none are to come (its start's trials stopped early: Ax counts only completed ones)."""
        rng = random.Random(f"ax-filler:{self._seed}:{self._fillers}")
        self._fillers += 1
        for _ in range(DUPLICATE_TRIES):
            params = self.space.coerce(self.space.sample(rng))
            if _key(params) not in taken and _key(params) not in self._told:
                with self._calling():
                    index = self._client.attach_trial(parameters=self._encode(params))
                return {index: self._encode(params)}
        return {}

    def _settle_repeat(self, index: int, key: str, in_flight: bool) -> None:
        """Ax proposed a point already taken: its trial gets the point's result, or is
        abandoned (a failure's repeat, or a point in flight)."""
        losses = None if in_flight else self._told.get(key)
        with self._calling():
            if losses is None:
                self._client.mark_trial_abandoned(index)
            else:
                self._client.complete_trial(index, raw_data=self._data(losses))

    def observe(self, observations: Sequence[Observation]) -> None:
        for obs in observations:
            key = _key(obs.params)
            losses = self._losses(obs)
            index = self._running.pop(key, None)
            number = obs.trial_number
            if index is None and number is not None and number in self._trial_of:
                index = self._trial_of[number]  # told again (promoted after it stopped)
            elif index is None:
                index = self._attach(obs, losses)
            if index is not None:
                self._waiting.append((index, len(self._waiting), obs, losses))
                if number is not None:
                    self._trial_of[number] = index
            if obs.status is not TrialStatus.STOPPED:
                self._told[key] = losses
            else:
                self._told.setdefault(key, losses)

    def _attach(self, obs: Observation, losses: list[float] | None) -> int | None:
        """A result of a point Ax did not propose (none running for it): a trial of its own,
        when it is a full result; ``None`` otherwise (nothing to learn)."""
        if losses is None or obs.status is TrialStatus.STOPPED:
            return None
        try:
            params = self._encode(self.space.coerce(obs.params))
        except (ValueError, KeyError):
            return None
        with self._calling():
            index: int = self._client.attach_trial(parameters=params)
        return index

    def _hand_over(self) -> None:
        """Hand Ax the results told since the last proposal, in its trials' order (the
        order they came in, trials finishing in any order, never matters)."""
        waiting, self._waiting = sorted(self._waiting, key=lambda w: (w[0], w[1])), []
        with self._calling():
            for index, _, obs, losses in waiting:
                self._hand(index, obs, losses)

    def _hand(self, index: int, obs: Observation, losses: list[float] | None) -> None:
        client = self._client
        stopped = obs.status is TrialStatus.STOPPED
        if index in self._stopped:  # promoted, then stopped higher or ended
            step = obs.step if stopped else obs.max_step
            if losses is not None and step is not None:
                client.attach_data(index, raw_data=self._data(losses), progression=step)
            return
        if index in self._ended:  # told again after an end Ax keeps (nothing to add)
            return
        self._ended.add(index)
        if losses is None:
            if stopped:
                client.mark_trial_abandoned(index)  # stopped without a score: no data
            else:
                client.mark_trial_failed(index, failed_reason=_reason(obs))
        elif stopped:
            client.attach_data(index, raw_data=self._data(losses), progression=obs.step or 0)
            client.mark_trial_early_stopped(index)
            self._stopped.add(index)
        else:
            client.complete_trial(index, raw_data=self._data(losses))

    def _losses(self, obs: Observation) -> list[float] | None:
        """The losses *obs* tells (``None``: no result), or a :class:`dse.ConfigError` when
        the campaign has another number of objectives than the agent was given."""
        count = len(obs.objectives) or 1
        if (obs.objectives or obs.score is not None) and count != self._objectives:
            msg = (f"agent.ax.objectives: the campaign optimises {count} objective(s), the"
                   f" agent {self._objectives}; set objectives = {count} in [agent.ax]")
            raise ConfigError(msg)
        return finite_losses(obs, self._objectives, RESULTS)

    def _data(self, losses: list[float]) -> dict[str, float]:
        return dict(zip(self._metrics, losses, strict=True))

    def _decode(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self.space.coerce({name: p.decode(raw[name])
                                       for name, p in self._params.items()}))

    def _encode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """*params* as Ax's point; in a conditional space an inactive param at its first
        value (Ax's point has every param)."""
        return {name: p.encode(params.get(name, p.first))
                for name, p in self._params.items()}

    @contextmanager
    def _calling(self) -> Iterator[None]:
        """Around every call into Ax: torch on one thread (its results then do not depend
        on the machine's thread count) and Ax's warnings (numerical notes on its model fits,
        deprecations of its dependencies) not shown: they are Ax's, not the campaign's."""
        torch = self._ax.torch
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield
        finally:
            torch.set_num_threads(threads)


def _check(objectives: object, method: object, budget: object, observed: object,
           center: object, exceed: object) -> None:
    """The options as :class:`AxAgent` takes them, or a one-line :class:`dse.ConfigError`."""
    for key, value, low in (("objectives", objectives, 1),
                            ("initialization_budget", budget, 1),
                            ("min_observed_initialization_trials", observed, 0)):
        if (value is not None or key == "objectives") and (
                not isinstance(value, int) or isinstance(value, bool) or value < low):
            msg = f"agent.ax.{key}: expected an integer >= {low}, got {value!r}"
            raise ConfigError(msg)
    if method not in METHODS:
        msg = f"agent.ax.method: expected one of {list(METHODS)}, got {method!r}"
        raise ConfigError(msg)
    for key, value in (("initialize_with_center", center),
                       ("allow_exceeding_initialization_budget", exceed)):
        if not isinstance(value, bool):
            msg = f"agent.ax.{key}: expected true or false, got {value!r}"
            raise ConfigError(msg)


def _reason(obs: Observation) -> str:
    if obs.rejected is not None:
        return f"rejected: {obs.rejected}"
    if obs.failure is not None:
        return f"failed: {obs.failure.value}"
    return f"{obs.status.value if obs.status is not None else 'no result'}"


def _line(exc: BaseException) -> str:
    """*exc*'s message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)
