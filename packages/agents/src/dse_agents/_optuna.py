"""Any Optuna sampler as a dse agent (``agent = "optuna"``): TPE, CMA-ES, GP, NSGA-II, QMC or
a sampler class of another package, driven through Optuna's own ask-and-tell, so it sees the
campaign's trials as it would a study's and handles a batch in flight its own way.

Each proposal is an Optuna trial asked of an in-memory study over the campaign's space (an
``IntRange`` an ``IntDistribution``, a ``FloatRange`` a ``FloatDistribution``, a
``Categorical`` a ``CategoricalDistribution``; in a conditional space the trial is asked
define-by-run, each active param suggested in declared order, the inactive ones never);
each observation is told to the trial of its
params: a completed trial its loss (the score oriented so lower is better, or each objective's
in a Pareto campaign), a trial stopped early ``PRUNED`` after its loss at its step, every other
outcome and a rejection ``FAIL`` (which samplers leave out). A result told without a trial of
its own (a promoted trial's second end) is added as a finished trial.

dse never runs one configuration twice, and this agent never proposes one again: a sampler's
repeat of a point already told is told the same result and asked again, a repeat of a point in
flight is told ``FAIL`` (``DUPLICATE_TRIES`` times at most per proposal, then the call answers
fewer). Deterministic for a seed (the sampler's own ``seed``): a resumed run replays the same
calls into a new study and gets the same proposals.
"""

from __future__ import annotations

import importlib
import inspect
import json
import warnings
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar

from dse import Categorical, ConfigError, FloatRange, IntRange, TrialStatus
from dse_agents._hub import PREFIX, hub_sampler_class
from dse_agents._losses import finite_losses

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse import Observation, Parameter, Space

DUPLICATE_TRIES = 50
"""Samplings per proposal before a call gives up finding a point not already taken."""


def distributions(space: Space) -> dict[str, Any]:
    """The Optuna distribution of each param of *space*."""
    dist: Any = importlib.import_module("optuna.distributions")
    out: dict[str, Any] = {}
    for p in space:
        if isinstance(p, Categorical):
            out[p.name] = dist.CategoricalDistribution(list(p.choices))
        elif isinstance(p, IntRange):
            out[p.name] = dist.IntDistribution(p.low, p.high, step=p.step, log=p.log)
        elif isinstance(p, FloatRange):
            out[p.name] = dist.FloatDistribution(p.low, p.high, log=p.log, step=p.step)
    return out


def sampler_class(name: str, hub: Mapping[str, Any] | None = None) -> type:
    """``TPESampler`` (any of ``optuna.samplers``), ``package.module:Class``, or
    ``hub:samplers/<package>`` (a package of OptunaHub, loaded as *hub* says: ``_hub.py``)."""
    if name.startswith(PREFIX):
        return hub_sampler_class(name.removeprefix(PREFIX), hub or {})
    if hub is not None:
        msg = f"agent.optuna.hub: only for a sampler of OptunaHub ('hub:...'), not {name!r}"
        raise ConfigError(msg)
    if ":" in name:
        module, _, attr = name.partition(":")
        found = getattr(importlib.import_module(module), attr, None)
    else:
        found = getattr(importlib.import_module("optuna.samplers"), name, None)
    if not isinstance(found, type):
        msg = (f"sampler {name!r} is not a sampler class (one of optuna.samplers, such as"
               " 'TPESampler', or 'package.module:Class')")
        raise ValueError(msg)
    return found


class OptunaAgent:
    """Proposes what an Optuna sampler asks (module docstring).

    :param sampler: the sampler: a name of ``optuna.samplers`` (``"TPESampler"``, the default;
        ``"CmaEsSampler"``, ``"GPSampler"``, ``"NSGAIISampler"``, ``"QMCSampler"``...),
        ``"package.module:Class"``, or ``"hub:samplers/<package>"`` (OptunaHub's registry).
    :param options: keyword arguments of the sampler (``{multivariate = true}``); its
        ``seed``, when it takes one, is the campaign's.
    :param objectives: how many losses each trial has: 1, or a Pareto campaign's objective
        count (the study's directions, all minimised: dse orients every loss so).
    :param hub: where a sampler of OptunaHub (``sampler = "hub:samplers/<package>"``) is
        loaded from: ``optunahub.load_module``'s keywords (``ref``, ``repo_owner``,
        ``repo_name``, ``base_url``, ``force_reload``), or ``registry_root``, a registry on
        this machine (``optunahub.load_local_module``).
    """

    name: ClassVar[str] = "optuna"
    version: ClassVar[str] = "1"

    def __init__(self, space: Space, seed: int = 0, *, sampler: str = "TPESampler",
                 options: Mapping[str, Any] | None = None, objectives: int = 1,
                 hub: Mapping[str, Any] | None = None) -> None:
        optuna: Any = importlib.import_module("optuna")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        cls = sampler_class(sampler, hub)
        kwargs = dict(options or {})
        if "seed" in inspect.signature(cls).parameters:
            kwargs.setdefault("seed", seed)
        self._optuna = optuna
        self.space = space
        self._dists = distributions(space)
        with warnings.catch_warnings():  # a sampler (or option) Optuna calls experimental:
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # chosen
            built = cls(**kwargs)
        self._study = optuna.create_study(sampler=built, directions=["minimize"] * objectives)
        self._objectives = objectives
        self._flying: dict[str, deque[Any]] = {}
        """The Optuna trials asked and not told yet, by their params' key."""
        self._told: dict[str, list[float] | None] = {}
        """The points told (their losses; ``None``: no result), by key."""
        self._trial_of: dict[int, Any] = {}
        """The Optuna trial of each dse trial number, once told (a promoted one is told again)."""

    @property
    def study(self) -> Any:
        """The Optuna study it asks and tells (what the sampler has learnt, as Optuna sees
        it: ``agent.study.trials``, ``best_value``...)."""
        return self._study

    @property
    def exhausted(self) -> bool:
        """Every point of a finite space told."""
        size = self.space.cardinality
        return size is not None and len(self._told) >= size

    def propose(self, n: int, in_flight: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        taken = {_key(p) for p in in_flight} | {k for k, q in self._flying.items() if q}
        out: list[dict[str, Any]] = []
        for _ in range(n):
            found = self._ask(taken)
            if found is None:
                break
            taken.add(_key(found))
            out.append(found)
        return out

    def _ask(self, taken: set[str]) -> dict[str, Any] | None:
        """A point asked of the sampler that is neither told nor in flight, or ``None``."""
        states: Any = self._optuna.trial.TrialState
        for _ in range(DUPLICATE_TRIES):
            if self.exhausted:
                return None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
                trial = self._asked()
            params = dict(self.space.coerce(trial.params))
            key = _key(params)
            if key in taken:
                self._study.tell(trial, state=states.FAIL)
            elif key in self._told:
                losses = self._told[key]
                if losses is None:
                    self._study.tell(trial, state=states.FAIL)
                else:
                    self._study.tell(trial, losses if self._objectives > 1 else losses[0])
            else:
                self._flying.setdefault(key, deque()).append(trial)
                return params
        return None

    def _asked(self) -> Any:
        """A new trial of the study with the space's params suggested: all at once (fixed
        distributions), or in a conditional space define-by-run, each active param in
        declared order once its parents are (the sampler sees the tree, as in a study whose
        objective asks only for the params a branch uses)."""
        if not self.space.conditional:
            return self._study.ask(self._dists)
        trial = self._study.ask()
        values: dict[str, Any] = {}
        for param in self.space:
            if param.name in self.space.active(values):
                values[param.name] = _suggest(trial, param)
        return trial

    def observe(self, observations: Sequence[Observation]) -> None:
        for obs in observations:
            key = _key(obs.params)
            queue = self._flying.get(key)
            trial = queue.popleft() if queue else None
            losses = self._losses(obs)
            if trial is None:
                self._add_finished(obs, losses)
            else:
                self._tell(trial, obs, losses)
                if obs.trial_number is not None:
                    self._trial_of[obs.trial_number] = trial
            if obs.status is not TrialStatus.STOPPED:
                self._told[key] = losses
            else:
                self._told.setdefault(key, losses)

    def _losses(self, obs: Observation) -> list[float] | None:
        return finite_losses(obs, self._objectives, (TrialStatus.COMPLETED, TrialStatus.STOPPED))

    def _tell(self, trial: Any, obs: Observation, losses: list[float] | None) -> None:
        states: Any = self._optuna.trial.TrialState
        if losses is None:
            self._study.tell(trial, state=states.FAIL)
        elif obs.status is TrialStatus.STOPPED:
            if self._objectives == 1:
                trial.report(losses[0], obs.step or 0)
            self._study.tell(trial, state=states.PRUNED)
        else:
            self._study.tell(trial, losses if self._objectives > 1 else losses[0])

    def _add_finished(self, obs: Observation, losses: list[float] | None) -> None:
        """A result with no trial asked for it (a promoted trial's end): a finished trial."""
        if losses is None or obs.status is not TrialStatus.COMPLETED:
            return
        dists = {k: v for k, v in self._dists.items() if k in obs.params}
        if set(dists) != set(self.space.active(obs.params)):
            return
        values = losses if self._objectives > 1 else None
        value = None if self._objectives > 1 else losses[0]
        self._study.add_trial(self._optuna.trial.create_trial(
            params=dict(obs.params), distributions=dists, value=value, values=values))


def _suggest(trial: Any, param: Parameter) -> Any:
    """*param*'s value suggested by Optuna *trial* (its distribution as :func:`distributions`
    makes it)."""
    if isinstance(param, Categorical):
        return trial.suggest_categorical(param.name, list(param.choices))
    if isinstance(param, IntRange):
        return trial.suggest_int(param.name, param.low, param.high, step=param.step,
                                 log=param.log)
    return trial.suggest_float(param.name, param.low, param.high, step=param.step,
                               log=param.log)


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)
