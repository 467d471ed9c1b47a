"""The random agent: seeded draws, without repeats while the space is finite."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any, ClassVar

from dse import Categorical, ConfigError, FloatRange, IntRange
from dse_agents._options import reject_unknown
from dse_agents._points import PointIndex, TreeIndex, value_sequence

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from dse import Observation, Parameter, Space
    from dse_agents._points import Value

# How many times a finite draw tries a log-scaled point before taking any point left.
_PREFERRED_TRIES = 2


class RandomAgent:
    """Draws points at random from a seeded :class:`random.Random`.

    Every parameter is drawn uniformly, or log-uniformly when it is declared ``log``.

    * **Finite space** (every parameter discrete): points are drawn *without replacement*,
      so no point is proposed twice and the agent is :attr:`exhausted` right after the
      last of the space's points has been handed out. Points are numbered (see the grid
      order) and permuted by a lazy Fisher-Yates shuffle kept in a dict: O(1) per draw,
      memory proportional to the draws, whatever the size of the space. With log-scaled
      parameters a draw first tries a few log-distributed points and takes one that was
      not drawn yet, else any remaining point.
    * **Infinite space**: independent draws (a repeat is practically impossible).
    * **Conditional space** (:attr:`dse.Space.conditional`): the same draws of the points of
      its tree, each holding its active parameters only: on a finite space every point of
      the tree equally likely, without repeats; on an infinite one each active parameter
      drawn as above (a value is drawn for every parameter, and the inactive ones left out,
      so each point costs the generator the same).

    The sequence of proposals depends only on the seed, never on how the engine batches its
    calls (``propose(4)`` gives what four ``propose(1)`` give), so a campaign's trajectory
    does not depend on its parallelism. Observations are ignored and consume no randomness.

    ``sampler = "sobol"`` draws a scrambled Sobol sequence instead (quasi-random: the points
    cover the space more evenly than independent draws, a good start for a small budget),
    seeded the same way; on a finite space a point already drawn is skipped, and the agent
    is exhausted once every point was drawn.
    """

    name: ClassVar[str] = "random"
    version: ClassVar[str] = "0.1.0"
    proposes_ahead: ClassVar[bool] = True
    """It learns nothing from results: proposing before a slot frees loses nothing (a backend
    that queues trials itself is handed more than ``max_parallelism``)."""

    def __init__(self, space: Space, *, seed: int = 0, **options: Any) -> None:
        sampler = options.pop("sampler", "uniform")
        reject_unknown(self.name, options, ["sampler"])
        if sampler not in ("uniform", "sobol"):
            msg = f"agent.{self.name}.sampler: expected 'uniform' or 'sobol', got {sampler!r}"
            raise ConfigError(msg)
        self._sobol: _SobolDraws | None = (
            _SobolDraws(space, seed) if sampler == "sobol" else None
        )
        self._rng = random.Random(seed)
        self._space = space
        self._names = space.names
        cardinality = space.cardinality
        self._finite = cardinality is not None
        self._drawn = 0
        # Lazy Fisher-Yates state: positions [0, drawn) hold the drawn point numbers; ``_at``
        # maps a position >= drawn to the number it holds when that is not its own position,
        # ``_where`` maps a moved number to its position (kept only to find log-drawn points).
        self._at: dict[int, int] = {}
        self._where: dict[int, int] = {}
        self._index: PointIndex | TreeIndex | None = None
        self._size = 0
        self._preferred: Callable[[random.Random], int] | None = None
        """Draws the number of a point log-distributed (with log-scaled parameters)."""
        self._samplers: tuple[Callable[[random.Random], Value], ...] = ()
        if self._finite:
            index = TreeIndex(space, 0) if space.conditional else PointIndex(space, 0)
            self._index = index
            self._size = index.size
            if any(_is_log(p) for p in space.params):
                self._preferred = _log_draw(index, space)
        else:
            self._samplers = tuple(_value_sampler(p) for p in space.params)

    @property
    def exhausted(self) -> bool:
        if self._sobol is not None:
            return self._sobol.exhausted
        return self._finite and self._drawn >= self._size

    def propose(self, n: int, in_flight: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
        if self._sobol is not None:
            return self._sobol.take(max(n, 0))
        rng = self._rng
        index = self._index
        if index is None:
            names, samplers = self._names, self._samplers
            drawn = [
                dict(zip(names, [s(rng) for s in samplers]))  # noqa: B905 - equal lengths
                for _ in range(max(n, 0))
            ]
            if self._space.conditional:
                active = self._space.active
                return [{name: params[name] for name in active(params)} for params in drawn]
            return drawn
        point, draw = index.point, self._draw
        return [point(draw(rng)) for _ in range(min(max(n, 0), self._size - self._drawn))]

    def observe(self, observations: Sequence[Observation]) -> None:
        """Ignored: random search does not learn."""

    def snapshot(self) -> dict[str, Any] | None:
        """The generator's state and, on a finite space, the draws so far (a resume restores
        them instead of drawing every proposal again); ``None`` with the Sobol sampler."""
        if self._sobol is not None:
            return None
        version, internal, gauss = self._rng.getstate()
        return {"rng": [version, list(internal), gauss], "drawn": self._drawn,
                "at": list(self._at.items()), "where": list(self._where.items())}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`snapshot`."""
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
        self._drawn = int(state["drawn"])
        self._at = {int(k): int(v) for k, v in state["at"]}
        self._where = {int(k): int(v) for k, v in state["where"]}

    def _draw(self, rng: random.Random) -> int:
        """Draw the number of one point not drawn yet (there is at least one)."""
        drawn = self._drawn
        preferred = self._preferred
        if preferred is not None:
            where = self._where
            for _ in range(_PREFERRED_TRIES):
                number = preferred(rng)
                position = where.get(number, number)
                if position >= drawn:
                    return self._take(position)
        return self._take(drawn + rng.randrange(self._size - drawn))

    def _take(self, position: int) -> int:
        """Swap *position* with the first undrawn position and return the number there."""
        first = self._drawn
        at, where, track = self._at, self._where, self._preferred is not None
        number = at.get(position, position)
        if position != first:
            displaced = at.pop(first, first)
            if displaced == position:
                at.pop(position, None)
                if track:
                    where.pop(displaced, None)
            else:
                at[position] = displaced
                if track:
                    where[displaced] = position
        else:
            at.pop(first, None)
        if track:
            if number == first:
                where.pop(number, None)
            else:
                where[number] = first
        self._drawn = first + 1
        return number


def _is_log(param: Parameter) -> bool:
    return not isinstance(param, Categorical) and param.log


def _log_draw(index: PointIndex | TreeIndex, space: Space) -> Callable[[random.Random], int]:
    """Draws the number of a point, each parameter's value log-uniformly on a log scale
    (uniformly on another): mixed radix over the grid, or a tree's number of the point."""
    samplers = tuple(_index_sampler(p) for p in space.params)
    if isinstance(index, TreeIndex):
        number = index.number

        def draw_tree(rng: random.Random) -> int:
            return number([sample(rng) for sample in samplers])

        return draw_tree
    radix = tuple(zip(index.sizes, samplers, strict=True))

    def draw(rng: random.Random) -> int:
        point = 0
        for size, sample in radix:
            point = point * size + sample(rng)
        return point

    return draw


def _index_sampler(param: Parameter) -> Callable[[random.Random], int]:
    """Draws the index of one of *param*'s values (log-uniformly on a log scale)."""
    size = param.size or 0  # only called for discrete parameters
    if isinstance(param, IntRange | FloatRange) and param.log:
        # Value v stands for [v, v + step): a log-uniform draw lands there in proportion to
        # log((v + step) / v), the discrete analogue of a log-uniform density.
        step = float(param.step or 1)
        origin = param.low
        low = math.log(origin)
        high = math.log(origin + size * step)

        def sample_log(rng: random.Random) -> int:
            raw = math.exp(rng.uniform(low, high))
            return max(0, min(int((raw - origin) // step), size - 1))

        return sample_log

    def sample_uniform(rng: random.Random) -> int:
        return rng.randrange(size)

    return sample_uniform


def _value_sampler(param: Parameter) -> Callable[[random.Random], Value]:
    """Draws one value of *param*, continuous or not."""
    if isinstance(param, FloatRange) and param.step is None:
        low, high = param.low, param.high
        if param.log:
            log_low, log_high = math.log(low), math.log(high)

            def sample_log(rng: random.Random) -> float:
                # Clamped: exp(log(x)) may round a hair outside [low, high].
                return min(max(math.exp(rng.uniform(log_low, log_high)), low), high)

            return sample_log

        def sample_linear(rng: random.Random) -> float:
            return rng.uniform(low, high)

        return sample_linear
    values = value_sequence(param, 0)
    sample_index = _index_sampler(param)

    def sample_value(rng: random.Random) -> Value:
        return values[sample_index(rng)]

    return sample_value


class _SobolDraws:
    """A scrambled Sobol sequence over the space, decoded onto its grid."""

    def __init__(self, space: Space, seed: int) -> None:
        from scipy.stats import qmc  # only this sampler needs scipy

        from dse_agents._encoding import Encoding

        self._enc = Encoding(space)
        self._sobol = qmc.Sobol(d=max(self._enc.dims, 1), scramble=True, seed=seed)
        self._buffer: list[Any] = []
        self._size = space.cardinality
        self._index: PointIndex | TreeIndex | None = None
        if self._size is not None:
            self._index = TreeIndex(space, 0) if space.conditional else PointIndex(space, 0)
        self._drawn: set[tuple[Any, ...]] = set()
        self._scan = 0

    @property
    def exhausted(self) -> bool:
        return self._size is not None and len(self._drawn) >= self._size

    def take(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < n and not self.exhausted:
            params = self._next()
            self._drawn.add(self._enc.key(params))
            out.append(params)
        return out

    def _next(self) -> dict[str, Any]:
        enc = self._enc
        for _ in range(64):
            if not self._buffer:
                # random(64), not random_base2(6): the same points, and past 128 of them
                # random_base2 refuses (the total is no longer a power of 2).
                self._buffer = list(self._sobol.random(64))
            params = enc.decode(enc.from_unit(self._buffer.pop(0))[0])
            if self._size is None or enc.key(params) not in self._drawn:
                return params
        # A small finite space the sequence keeps missing: the next undrawn point in order.
        assert self._index is not None
        while True:
            params = self._index.point(self._scan % self._index.size)
            self._scan += 1
            if enc.key(params) not in self._drawn:
                return params
