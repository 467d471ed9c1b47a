"""The local-search agent: random points first, then neighbours of the best point seen.

What a third-party agent must get right, and how this one does (``dse.testing``'s
``AgentContract`` checks each):

* **never a point twice**: every point proposed, in flight (``in_flight``) or observed is kept
  in ``_seen`` by its canonical key, and a candidate already there is drawn again. A point
  proposed twice is a cache hit of its own trial: a step spent, nothing learnt.
* **deterministic for a seed, in every process**: one ``random.Random(seed)``, parameters
  visited in declared order, no iteration over sets or dicts of strings (their order follows
  ``PYTHONHASHSEED``, so a resume or a replay in another process would diverge).
* **the same results, the same proposals, whatever order they come in**: dse tells results
  as trials finish (or as the record answers them), so the results are kept in the order of
  their proposals and the radius is replayed from them at each ``propose``; a rerun of a
  campaign then proposes what the first run did, and every configuration is a cache hit.
* **exhausted** once a finite space has no point left.
"""

from __future__ import annotations

import bisect
import json
import math
import random
from typing import TYPE_CHECKING, Any, ClassVar

from dse import Categorical, ConfigError, IntRange, TrialStatus

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse import Observation, Parameter, Space

_TRIES = 200
"""Candidates drawn before giving up on finding an unseen point near the best one."""


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True)


class LocalSearchAgent:
    """Proposes ``initial`` random points, then neighbours of the best point observed: each
    parameter moved a fraction ``radius`` of the way towards a random value (on its log
    scale when declared ``log``; a categorical changed with that probability). The radius
    halves after ``patience`` results without an improvement (at least 0.02) and is back to
    its start after one, the results counted in the order of their proposals.

    Options (``[agent.local-search]``): ``initial`` (int >= 1, default 8), ``radius``
    (0 < float <= 1, default 0.5), ``patience`` (int >= 1, default 4).
    """

    name: ClassVar[str] = "local-search"
    version: ClassVar[str] = "0.1.0"

    def __init__(self, space: Space, *, seed: int = 0, **options: Any) -> None:
        unknown = sorted(set(options) - {"initial", "radius", "patience"})
        if unknown:
            msg = (f"agent.{self.name}: unknown option {unknown[0]!r}"
                   " (known: initial, patience, radius)")
            raise ConfigError(msg)
        self._space = space
        self._rng = random.Random(seed)
        self._initial = _number(options, "initial", 8, int, 1, None)
        self._start = _number(options, "radius", 0.5, float, 1e-9, 1.0)
        self._patience = _number(options, "patience", 4, int, 1, None)
        self._seen: set[str] = set()
        self._results: list[tuple[int, int, float]] = []
        """(proposal, arrival, loss) of each result, in proposal order."""
        self._best: tuple[float, dict[str, Any], tuple[int, int]] | None = None
        """The best result: its loss, params and place (a tie goes to the earlier proposal)."""
        self._proposed = 0

    @property
    def exhausted(self) -> bool:
        size = self._space.cardinality
        return size is not None and len(self._seen) >= size

    def propose(
        self, n: int, in_flight: Sequence[Mapping[str, Any]] = ()
    ) -> list[dict[str, Any]]:
        for params in in_flight:
            self._seen.add(_key(params))
        out: list[dict[str, Any]] = []
        radius = self._radius()
        while len(out) < n and not self.exhausted:
            params = self._candidate(radius)
            if params is None:
                break
            self._seen.add(_key(params))
            self._proposed += 1
            out.append(params)
        return out

    def observe(self, observations: Sequence[Observation]) -> None:
        for obs in observations:
            self._seen.add(_key(obs.params))  # a rejected proposal too: never again
            loss = obs.loss
            if obs.status not in (TrialStatus.COMPLETED, TrialStatus.CACHED) or loss is None:
                continue
            place = (obs.proposal or 0, len(self._results))
            bisect.insort(self._results, (*place, loss))
            if self._best is None or (loss, place) < (self._best[0], self._best[2]):
                self._best = (loss, dict(obs.params), place)

    # -- candidates -----------------------------------------------------------------------

    def _radius(self) -> float:
        """The radius after the results so far, replayed in proposal order: halved after
        ``patience`` results without an improvement (at least 0.02), back to its start
        after one."""
        radius, misses, best = self._start, 0, math.inf
        for _, _, loss in self._results:
            if loss < best:
                best, radius, misses = loss, self._start, 0
                continue
            misses += 1
            if misses >= self._patience:
                radius, misses = max(radius / 2.0, 0.02), 0
        return radius

    def _candidate(self, radius: float) -> dict[str, Any] | None:
        space, rng = self._space, self._rng
        local = self._best is not None and self._proposed >= self._initial
        for attempt in range(_TRIES * 2):
            if local and attempt < _TRIES and self._best is not None:
                params = {p.name: _toward(p, self._best[1][p.name], p.sample(rng),
                                          radius, rng) for p in space.params}
            else:
                params = space.sample(rng)
            params = dict(space.coerce(params))
            if _key(params) not in self._seen:
                return params
        return None


def _toward(param: Parameter, value: Any, target: Any, radius: float,
            rng: random.Random) -> Any:
    """*value* moved the fraction *radius* of the way to *target*, on *param*'s grid."""
    if isinstance(param, Categorical):
        return target if rng.random() < radius else value
    log = param.log and param.low > 0
    here, there = (math.log(value), math.log(target)) if log else (value, target)
    moved = here + radius * (there - here)
    x = math.exp(moved) if log else moved
    step = param.step
    if step is not None:
        x = param.low + round((x - param.low) / step) * step
    x = min(max(x, param.low), param.high)
    return round(x) if isinstance(param, IntRange) else round(x, 12) if step else x


def _number(options: Mapping[str, Any], key: str, default: Any, kind: type,
            low: float, high: float | None) -> Any:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            kind is int and not isinstance(value, int)):
        msg = f"agent.local-search.{key}: expected {kind.__name__}, got {value!r}"
        raise ConfigError(msg)
    if value < low or (high is not None and value > high):
        bounds = f">= {low:g}" if high is None else f"in [{low:g}, {high:g}]"
        msg = f"agent.local-search.{key}: expected {bounds}, got {value!r}"
        raise ConfigError(msg)
    return kind(value)
