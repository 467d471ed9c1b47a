"""Finite spaces as numbered points, shared by the grid and the random agent.

Point number ``k`` of a space decodes by mixed radix over each parameter's values, the last
parameter varying fastest, so numbering the points ``0, 1, 2, ...`` walks the grid in its
declared order. Value sequences stay lazy where a parameter is huge (an integer range is a
``range``), so a space of 10^12 points costs nothing to number.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, overload

from dse import FloatRange, IntRange

if TYPE_CHECKING:
    from dse import Parameter, Space

Value: TypeAlias = "int | float | str | bool"

# Stepped float parameters up to this many values are kept as a tuple (fastest to index);
# beyond it their values are computed on demand.
_MATERIALISE_LIMIT = 1 << 16


class SteppedFloats(Sequence[float]):
    """The values ``low + i * step`` of a stepped float parameter, computed on demand.

    Each value is rounded exactly as :meth:`dse.FloatRange.values` rounds it.
    """

    __slots__ = ("_low", "_size", "_step")

    def __init__(self, low: float, step: float, size: int) -> None:
        self._low = low
        self._step = step
        self._size = size

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[float]: ...

    def __getitem__(self, index: int | slice) -> float | Sequence[float]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._size)))
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(index)
        return round(self._low + index * self._step, 12)


def value_sequence(param: Parameter, points: int) -> Sequence[Value]:
    """The values a grid visits for *param*, as a sequence that is cheap to build and index.

    :param points: grid points for a float parameter declared without a ``step``.
    """
    if isinstance(param, IntRange):
        return range(param.low, param.high + 1, param.step)
    if isinstance(param, FloatRange) and param.step is not None:
        size = param.size or 0
        if size > _MATERIALISE_LIMIT:
            return SteppedFloats(param.low, param.step, size)
    return tuple(param.values(points))


class PointIndex:
    """Numbers the points of a (discretised) space and decodes a number into params."""

    __slots__ = ("_digits", "size", "sizes", "values")

    def __init__(self, space: Space, points: int) -> None:
        self.values: tuple[Sequence[Value], ...] = tuple(
            value_sequence(p, points) for p in space.params
        )
        """Each parameter's values, in declared order."""
        # ``len()`` of a range overflows past sys.maxsize; the parameter's size does not.
        self.sizes: tuple[int, ...] = tuple(
            p.size if p.size is not None else len(v)
            for p, v in zip(space.params, self.values, strict=True)
        )
        """Number of values of each parameter."""
        self.size: int = math.prod(self.sizes)
        """Number of points."""
        # (name, values, stride, size) per parameter: its digit of point k is k // stride % size.
        strides = [1] * len(self.sizes)
        for i in range(len(self.sizes) - 2, -1, -1):
            strides[i] = strides[i + 1] * self.sizes[i + 1]
        self._digits = tuple(zip(space.names, self.values, strides, self.sizes, strict=True))

    def point(self, number: int) -> dict[str, Any]:
        """The params of point *number* (``0 <= number < size``)."""
        return {name: vals[number // stride % size] for name, vals, stride, size in self._digits}


class TreeIndex:
    """Numbers the points of a conditional space (:attr:`dse.Space.conditional`: each point
    holds its active parameters only) in grid order — declared order, the last active
    parameter varying fastest, no point twice — and decodes a number into params.

    A parent's values fall in runs: consecutive values under which the same of its
    children's conditions hold (a value some condition names, or a stretch of values none
    names). The points below a run are counted once per state of the parents above (and
    remembered), so a number decodes in one pass over the parameters, whatever the size.
    """

    __slots__ = ("_conditions", "_counts", "_names", "_runs", "size", "sizes", "values")

    def __init__(self, space: Space, points: int) -> None:
        params = space.params
        self.values: tuple[Sequence[Value], ...] = tuple(
            value_sequence(p, points) for p in params)
        """Each parameter's values, in declared order."""
        self.sizes: tuple[int, ...] = tuple(
            p.size if p.size is not None else len(v)
            for p, v in zip(params, self.values, strict=True))
        """Number of values of each parameter."""
        self._names = space.names
        at = {name: i for i, name in enumerate(self._names)}
        allowed: dict[int, list[frozenset[int]]] = {}
        conditions: list[tuple[tuple[int, int], ...]] = []
        for param in params:
            own = []
            for parent, values in param.when:
                tests = allowed.setdefault(at[parent], [])
                own.append((at[parent], len(tests)))
                tests.append(frozenset(_value_index(space[parent], v) for v in values))
            conditions.append(tuple(own))
        self._conditions = tuple(conditions)
        """Each parameter's conditions: (its parent's position, the condition's place among
        the parent's)."""
        self._runs: tuple[tuple[tuple[int, int, tuple[bool, ...]], ...] | None, ...] = tuple(
            _runs(allowed[i], self.sizes[i]) if i in allowed else None
            for i in range(len(params)))
        """A parent's runs of values: (start, stop, which of its conditions hold there)."""
        self._counts: dict[tuple[int, tuple[Any, ...]], int] = {}
        self.size: int = self._count(0, (None,) * len(params))
        """Number of points."""

    def _on(self, i: int, state: tuple[Any, ...]) -> bool:
        """Whether parameter *i* is active under *state* (the run each active parent above
        it is in: the conditions that hold there; ``None`` for an inactive one)."""
        for parent, place in self._conditions[i]:
            run = state[parent]
            if run is None or not run[place]:
                return False
        return True

    def _count(self, start: int, state: tuple[Any, ...]) -> int:
        """The points of the parameters from *start* on, under *state*."""
        key = (start, state)
        known = self._counts.get(key)
        if known is not None:
            return known
        product = 1
        for i in range(start, len(self.sizes)):
            if not self._on(i, state):
                continue
            runs = self._runs[i]
            if runs is not None:
                product *= sum((stop - first) * self._count(i + 1, _set(state, i, holds))
                               for first, stop, holds in runs)
                break
            product *= self.sizes[i]
        self._counts[key] = product
        return product

    def point(self, number: int) -> dict[str, Any]:
        """The params of point *number* (``0 <= number < size``): its active ones."""
        out: dict[str, Any] = {}
        state: tuple[Any, ...] = (None,) * len(self.sizes)
        for i, name in enumerate(self._names):
            if not self._on(i, state):
                continue
            runs = self._runs[i]
            index = 0
            if runs is None:
                index, number = divmod(number, self._count(i + 1, state))
            else:
                for first, stop, holds in runs:
                    below = _set(state, i, holds)
                    each = self._count(i + 1, below)
                    if number < (stop - first) * each:
                        offset, number = divmod(number, each)
                        index, state = first + offset, below
                        break
                    number -= (stop - first) * each
            out[name] = self.values[i][index]
        return out

    def number(self, indices: Sequence[int]) -> int:
        """The number of the point whose parameters take value *indices* (one per parameter,
        in declared order; those of inactive parameters ignored)."""
        number = 0
        state: tuple[Any, ...] = (None,) * len(self.sizes)
        for i, index in enumerate(indices):
            if not self._on(i, state):
                continue
            runs = self._runs[i]
            if runs is None:
                number += index * self._count(i + 1, state)
                continue
            for first, stop, holds in runs:
                below = _set(state, i, holds)
                each = self._count(i + 1, below)
                if first <= index < stop:
                    number += (index - first) * each
                    state = below
                    break
                number += (stop - first) * each
        return number


def _set(state: tuple[Any, ...], i: int, value: Any) -> tuple[Any, ...]:
    return (*state[:i], value, *state[i + 1:])


def _value_index(param: Parameter, value: Value) -> int:
    """The position of *value* (coerced) among a categorical's choices or an int range's
    values."""
    if isinstance(param, IntRange):
        return (int(value) - param.low) // param.step
    choices = param.values()
    return next(i for i, c in enumerate(choices) if c == value and type(c) is type(value))


def _runs(tests: Sequence[frozenset[int]], size: int
          ) -> tuple[tuple[int, int, tuple[bool, ...]], ...]:
    """The runs of a parent of *size* values whose conditions allow the value indices of
    *tests*: consecutive values under which the same conditions hold, in order."""
    named = sorted(set().union(*tests))
    cuts = sorted({0, size, *named, *(i + 1 for i in named)})
    runs: list[tuple[int, int, tuple[bool, ...]]] = []
    for first, stop in itertools.pairwise(cuts):
        holds = tuple(first in allowed for allowed in tests)
        if runs and runs[-1][2] == holds:
            runs[-1] = (runs[-1][0], stop, holds)
        else:
            runs.append((first, stop, holds))
    return tuple(runs)
