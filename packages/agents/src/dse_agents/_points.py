"""Finite spaces as numbered points, shared by the grid and the random agent.

Point number ``k`` of a space decodes by mixed radix over each parameter's values, the last
parameter varying fastest, so numbering the points ``0, 1, 2, ...`` walks the grid in its
declared order. Value sequences stay lazy where a parameter is huge (an integer range is a
``range``), so a space of 10^12 points costs nothing to number.
"""

from __future__ import annotations

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
