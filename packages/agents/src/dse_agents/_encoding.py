"""A search space as the unit cube: what the Sobol draws and the Gaussian process work in.

Each parameter becomes columns in ``[0, 1]``: a float or integer range one column, on its log
scale when it is declared ``log``; a categorical one column per choice (one-hot). Decoding
snaps to the parameter's grid (integers rounded, stepped floats onto their step, the likeliest
choice of a categorical), so a decoded point is always a member of the space.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from dse import Categorical, FloatRange, IntRange

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import NDArray

    from dse import Parameter, Space

__all__ = ["Encoding"]


class _Column:
    """One numeric parameter as one column of the cube."""

    __slots__ = ("high", "log", "low", "param")

    def __init__(self, param: IntRange | FloatRange) -> None:
        self.param = param
        self.log = bool(param.log)
        low, high = float(param.low), float(param.high)
        self.low, self.high = (math.log(low), math.log(high)) if self.log else (low, high)

    def encode(self, value: Any) -> float:
        x = math.log(float(value)) if self.log else float(value)
        span = self.high - self.low
        return 0.0 if span <= 0 else min(max((x - self.low) / span, 0.0), 1.0)

    def decode(self, u: float) -> int | float:
        x = self.low + min(max(float(u), 0.0), 1.0) * (self.high - self.low)
        value = math.exp(x) if self.log else x
        param = self.param
        if isinstance(param, IntRange):
            index = round((value - param.low) / param.step)
            return int(param.low + min(max(index, 0), param.size - 1) * param.step)
        value = min(max(value, param.low), param.high)
        if param.step is not None:
            size = param.size or 1
            index = min(max(round((value - param.low) / param.step), 0), size - 1)
            return round(param.low + index * param.step, 12)
        return value


class Encoding:
    """Maps params to points of ``[0, 1]^width`` and back (see the module docstring)."""

    def __init__(self, space: Space) -> None:
        self.names = space.names
        self._parts: list[tuple[str, Parameter, int, int]] = []
        """(name, parameter, first column, column count)."""
        self._columns: dict[str, _Column] = {}
        width = 0
        for param in space.params:
            if isinstance(param, Categorical):
                self._parts.append((param.name, param, width, param.size))
                width += param.size
            else:
                self._parts.append((param.name, param, width, 1))
                self._columns[param.name] = _Column(param)
                width += 1
        self.width = width
        """Number of columns."""
        self.dims = len(self._parts)
        """Number of parameters (one Sobol dimension each)."""
        self.categorical = np.zeros(width, dtype=bool)
        """Which columns are one-hot columns of a categorical."""
        for _, param, first, count in self._parts:
            if isinstance(param, Categorical):
                self.categorical[first : first + count] = True

    def encode(self, params: Mapping[str, Any]) -> NDArray[np.float64]:
        """The point of *params* (coerced params of the space)."""
        x = np.zeros(self.width)
        for name, param, first, _ in self._parts:
            value = params[name]
            if isinstance(param, Categorical):
                x[first + _choice_index(param, value)] = 1.0
            else:
                x[first] = self._columns[name].encode(value)
        return x

    def decode(self, x: NDArray[np.float64]) -> dict[str, Any]:
        """The params nearest to point *x* (a categorical takes its largest column)."""
        out: dict[str, Any] = {}
        for name, param, first, count in self._parts:
            if isinstance(param, Categorical):
                out[name] = param.choices[int(np.argmax(x[first : first + count]))]
            else:
                out[name] = self._columns[name].decode(float(x[first]))
        return out

    def from_unit(self, u: NDArray[np.float64]) -> NDArray[np.float64]:
        """Points of the cube from points of ``[0, 1)^dims`` (one coordinate per parameter,
        as a Sobol sequence gives): a categorical's coordinate picks its choice."""
        u = np.atleast_2d(u)
        x = np.zeros((u.shape[0], self.width))
        for i, (_, param, first, count) in enumerate(self._parts):
            if isinstance(param, Categorical):
                pick = np.minimum((u[:, i] * count).astype(int), count - 1)
                x[np.arange(u.shape[0]), first + pick] = 1.0
            else:
                x[:, first] = u[:, i]
        return x

    def key(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """A hashable identity of *params* (to tell proposals apart)."""
        return tuple((type(params[n]).__name__, params[n]) for n in self.names)


def _choice_index(param: Categorical, value: Any) -> int:
    for i, choice in enumerate(param.choices):
        if choice == value and type(choice) is type(value):
            return i
    return param.choices.index(value)
