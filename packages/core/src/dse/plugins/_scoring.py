"""Scorers: what a complete run's metrics conclude, and by whose reckoning.

A scorer turns the metrics of a complete run (and, when the campaign names a baseline, the
baseline's metrics) into one number, the trial's score: what "best so far", rankings and the
agent's feedback use. Every score is recorded with the scorer's name and version and the
baseline trial it was compared against, so a result can be traced to the rule that judged it
and invalidated with it (``dse invalidate --scorer-version``).

* ``default`` (dse-core): the primary objective's metric, as the run reported it.
* ``ratio`` (dse-core): the primary objective's metric divided by the baseline's (needs a
  ``[baseline]``); in the objective's direction (0.8 of a minimised time is 20 % faster).
* a plugin's scorer class (:func:`dse.hookspecs.dse_register_scorers`), by its ``name``;
* ``module:function``: a function ``f(metrics, baseline) -> float`` found beside the campaign
  file or on ``sys.path``; its version is its distribution's, else a digest of its source.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dse._version import __version__
from dse.campaign._model import ScorerSpec
from dse.model._errors import ConfigError
from dse.model._types import Direction, Objective, finite_float

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from dse.campaign._model import Campaign


__all__ = [
    "DefaultScorer",
    "FunctionScorer",
    "RatioScorer",
    "ScoreVector",
    "Scorer",
    "ScorerSpec",
    "ScoringError",
    "build_score_vector",
    "compute_score",
    "source_version",
]


class ScoringError(Exception):
    """A scorer could not score a run (it raised, or answered no finite number)."""


@runtime_checkable
class Scorer(Protocol):
    """Scores the metrics of a complete run.

    Registered classes are built as ``cls(objective, **options)`` with the primary objective
    and the campaign's ``[scorer]`` options (``name`` and ``direction`` removed).
    """

    name: str
    """What the record calls this scorer."""
    version: str
    """Its version: recorded with every score it gives."""
    direction: Direction
    """Whether a higher or a lower score is better."""
    needs_baseline: bool
    """True when it compares against a baseline (the campaign must name one)."""

    def score(
        self, metrics: Mapping[str, float], baseline: Mapping[str, float] | None
    ) -> float:
        """The score of a run with *metrics*, compared against *baseline*'s metrics (``None``
        when the campaign names no baseline). Raise, or return a non-finite number, when the
        run cannot be scored: the trial then fails with ``scorer_error``."""
        ...


class _ObjectiveScorer:
    """A built-in scorer of the primary objective, in its direction."""

    name: str = ""
    version: str = __version__
    needs_baseline: bool = False

    def __init__(self, objective: Objective) -> None:
        self.objective = objective
        self.direction = objective.direction


class DefaultScorer(_ObjectiveScorer):
    """The primary objective's metric, as the run reported it."""

    name = "default"

    def score(
        self, metrics: Mapping[str, float], baseline: Mapping[str, float] | None
    ) -> float:
        return metrics[self.objective.metric]


class RatioScorer(_ObjectiveScorer):
    """The primary objective's metric relative to the baseline's (value / baseline value)."""

    name = "ratio"
    needs_baseline = True

    def score(
        self, metrics: Mapping[str, float], baseline: Mapping[str, float] | None
    ) -> float:
        metric = self.objective.metric
        if baseline is None or metric not in baseline:
            raise ScoringError(f"the baseline has no metric {metric!r}")
        if baseline[metric] == 0:
            raise ScoringError(f"the baseline's {metric} is 0: no ratio to it")
        return metrics[metric] / baseline[metric]


@dataclass(slots=True)
class FunctionScorer:
    """A ``module:function`` scorer: ``function(metrics, baseline) -> float``."""

    name: str
    version: str
    direction: Direction
    function: Callable[..., Any] = field(repr=False)
    needs_baseline: bool = False

    def score(
        self, metrics: Mapping[str, float], baseline: Mapping[str, float] | None
    ) -> float:
        value: float = self.function(dict(metrics), None if baseline is None else dict(baseline))
        return value


def compute_score(
    scorer: Scorer, metrics: Mapping[str, float], baseline: Mapping[str, float] | None
) -> float:
    """*scorer*'s score of *metrics*: a finite float, or :class:`ScoringError` saying why not."""
    try:
        value = scorer.score(metrics, baseline)
    except ScoringError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken scorer fails the trial it scores, alone
        raise ScoringError(f"scorer {scorer.name} raised {type(exc).__name__}: {exc}") from None
    number = finite_float(value)
    if number is None:
        shown = "NaN" if isinstance(value, float) and math.isnan(value) else repr(value)
        raise ScoringError(f"scorer {scorer.name} returned {shown}, not a finite number")
    return number


def source_version(function: Callable[..., Any]) -> str:
    """The version of *function*'s code: its distribution's version (``dist==1.2``) when an
    installed distribution ships its module, else ``sha256:<digest>`` of its module's source
    (so an edited scorer file gets a new version)."""
    import importlib.metadata  # lazily: the commands that only read the record skip it

    module_name = getattr(function, "__module__", None) or ""
    top = module_name.partition(".")[0]
    dists = importlib.metadata.packages_distributions().get(top, [])
    if dists:
        dist = dists[0]
        return f"{dist}=={importlib.metadata.version(dist)}"
    module = sys.modules.get(module_name)
    try:
        source = inspect.getsource(module) if module is not None else inspect.getsource(function)
    except (OSError, TypeError):
        source = getattr(function, "__qualname__", repr(function))
    return "sha256:" + hashlib.sha256(source.encode()).hexdigest()[:16]


def function_scorer(
    text: str, objective: Objective, spec: ScorerSpec, base_dir: Path | None, where: str
) -> FunctionScorer:
    """The scorer ``module:function`` names (imported beside the campaign file first)."""
    from dse.model._constraints import load_callable

    function = load_callable(text, base_dir, where)
    direction = spec.direction or getattr(function, "direction", None) or objective.direction
    if isinstance(direction, str):
        try:
            direction = Direction(direction)
        except ValueError:
            raise ConfigError(
                f"{where}: {text}.direction is {direction!r}, expected minimize or maximize"
            ) from None
    return FunctionScorer(
        name=text, version=source_version(function), direction=direction, function=function,
        needs_baseline=bool(getattr(function, "needs_baseline", False)),
    )


class ScoreVector:
    """A Pareto campaign's scores (``[campaign] objectives = "pareto"``): one per objective,
    in the campaign's order, the first also the trial's :attr:`score`.

    A registered scorer is built once per objective (``cls(objective, **options)``), each
    scoring its own; a ``module:function`` scorer is called once and returns a mapping of
    each objective's metric to its score.
    """

    def __init__(
        self, objectives: Sequence[Objective], scorers: Sequence[Scorer] = (),
        function: FunctionScorer | None = None,
    ) -> None:
        self.objectives = tuple(objectives)
        self._scorers = tuple(scorers)
        self._function = function

    def scores(
        self, metrics: Mapping[str, float], baseline: Mapping[str, float] | None
    ) -> tuple[float, ...]:
        """The score of each objective, or :class:`ScoringError` saying which could not be
        given."""
        if self._function is None:
            return tuple(compute_score(s, metrics, baseline) for s in self._scorers)
        name = self._function.name
        try:
            value = self._function.function(
                dict(metrics), None if baseline is None else dict(baseline))
        except Exception as exc:  # noqa: BLE001 - a broken scorer fails the trial it scores
            raise ScoringError(f"scorer {name} raised {type(exc).__name__}: {exc}") from None
        if not isinstance(value, Mapping):
            raise ScoringError(
                f"scorer {name} returned {value!r}; in a Pareto campaign it returns a score"
                " per objective, {metric: score}"
            )
        out = []
        for objective in self.objectives:
            if objective.metric not in value:
                raise ScoringError(f"scorer {name} gave no score for {objective.metric!r}")
            number = finite_float(value[objective.metric])
            if number is None:
                raise ScoringError(
                    f"scorer {name} gave {objective.metric!r} {value[objective.metric]!r},"
                    " not a finite number"
                )
            out.append(number)
        return tuple(out)


def build_score_vector(campaign: Campaign, primary: Scorer) -> ScoreVector | None:
    """The scorer of each objective of a Pareto campaign (*primary*, the campaign's scorer,
    scores the first), or ``None`` when the campaign optimises one objective."""
    if not campaign.pareto:
        return None
    objectives = campaign.objectives
    if isinstance(primary, FunctionScorer):
        return ScoreVector(objectives, function=primary)
    source = str(campaign.source or "<campaign>")
    cls: Any = type(primary)
    scorers: list[Scorer] = [primary]
    for objective in objectives[1:]:
        try:
            scorer = cls(objective, **campaign.scorer.options)
        except TypeError as exc:
            raise ConfigError(
                f"{source}: scorer.{primary.name}: cannot score objective"
                f" {objective.metric!r}: {exc}"
            ) from None
        if not isinstance(getattr(scorer, "version", None), str):
            scorer.version = primary.version
        scorers.append(scorer)
    return ScoreVector(objectives, scorers)
