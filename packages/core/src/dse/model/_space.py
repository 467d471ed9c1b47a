"""Search spaces: named parameters, each categorical, an integer range or a float range.

Values are coerced to the parameter's declared type before anything else sees them, so
``4``, ``4.0`` and ``"4"`` proposed for an integer parameter are one and the same point.

An agent is built with the campaign's :class:`Space` (``cls(space, seed=seed, **options)``):
its :attr:`Space.params` are :class:`Categorical`, :class:`IntRange` and :class:`FloatRange`
values (together, :data:`Parameter`), each with a ``name``, a ``kind``, a ``size``,
``coerce(value)``, ``values(points)`` and ``sample(rng)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

from dse.model._conditions import (
    checked_when,
    holds,
    parse_when,
    tests_of,
    tree_size,
)
from dse.model._errors import ConfigError, DseError, did_you_mean
from dse.model._numbers import finite_float, is_int64, out_of_range

if TYPE_CHECKING:
    import random

    from dse.model._conditions import Conditions, Tests

Value: TypeAlias = "int | float | str | bool"
"""One parameter value, as coerced."""
Params: TypeAlias = "dict[str, Any]"
"""One point of a space: parameter name to coerced value."""


class ParamError(DseError, ValueError):
    """A proposed value does not belong to its parameter (wrong type or out of range)."""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


if TYPE_CHECKING:
    _Base = object
else:

    class Parameter:
        """One parameter of a :class:`Space`: a :class:`Categorical`, an :class:`IntRange` or
        a :class:`FloatRange`.

        Type checkers read ``Parameter`` as the union ``Categorical | IntRange | FloatRange``
        (so ``isinstance`` narrows it to one of them); at run time it is the base class the
        three share, so ``isinstance(p, dse.Parameter)`` holds for each. Every parameter has:

        * ``name`` — its name in the params, the ``[space]`` table and command templates;
        * ``kind`` — ``"categorical"``, ``"int"`` or ``"float"`` (a class attribute);
        * ``size`` — how many distinct values it takes (``None``: a float range without a
          ``step``, which is continuous);
        * ``coerce(value)`` — *value* as the parameter's own type, or :class:`ParamError`;
        * ``values(points)`` — its values in grid order (a continuous float range gives
          *points* of them);
        * ``sample(rng)`` — one value drawn with a :class:`random.Random`;
        * ``when`` — the conditions under which it is active (:data:`Conditions`; empty:
          always), as :meth:`Space.active` reads them.

        They are frozen, slotted dataclasses: equal when their fields are, and hashable.
        """

        __slots__ = ()

    _Base = Parameter


@dataclass(frozen=True, slots=True)
class Categorical(_Base):
    """A parameter that takes one of a fixed list of values (a list in ``[space]``, or
    ``type = "categorical"``)."""

    name: str
    """Parameter name, as used in params and command templates."""
    choices: tuple[Value, ...]
    """The allowed values, in declared order (the grid order)."""
    when: Conditions = ()
    """When the parameter is active (``when`` in ``[space]``): each condition a parent's name
    and the values it must take, every condition holding; empty: always active."""
    kind: ClassVar[str] = "categorical"
    """The parameter type, as ``type`` in ``[space]``."""

    def __post_init__(self) -> None:
        for choice in self.choices:
            if isinstance(choice, str) and "\0" in choice:
                # A value becomes an argv item: a NUL would end it where the OS reads it.
                msg = f"space.{self.name}.choices: {choice!r} holds a NUL byte"
                raise ConfigError(msg)
            if (problem := out_of_range(choice)) is not None:
                # A choice is hashed and recorded as JSON: no NaN, no infinity, 64 bits.
                msg = f"space.{self.name}.choices: {choice!r:.40} is {problem}"
                raise ConfigError(msg)

    @property
    def size(self) -> int:
        """Number of distinct values."""
        return len(self.choices)

    def coerce(self, value: object) -> Value:
        """The choice *value* stands for: the choice equal to it and of its type, else an
        equal number (``4.0`` for ``4``; a bool is no number here), else the choice whose
        ``str`` it is (``"4"`` for ``4``, ``"True"`` for ``True``).

        :raises ParamError: when it stands for no choice, or is a string holding a NUL byte.
        """
        if isinstance(value, str) and "\0" in value:
            raise ParamError(f"param {self.name!r}: {value!r} holds a NUL byte")
        for choice in self.choices:
            if value == choice and type(value) is type(choice):
                return choice
        for choice in self.choices:
            if _is_number(value) and _is_number(choice) and value == choice:
                return choice
            if isinstance(value, str) and str(choice) == value:
                return choice
        raise ParamError(
            f"param {self.name!r}: {value!r} is not one of {list(self.choices)!r}"
        )

    def values(self, points: int = 0) -> tuple[Value, ...]:
        """All values, in declared order (*points* is ignored: a categorical is finite)."""
        return self.choices

    def sample(self, rng: random.Random) -> Value:
        """One choice drawn uniformly with *rng*."""
        return self.choices[rng.randrange(len(self.choices))]


@dataclass(frozen=True, slots=True)
class IntRange(_Base):
    """An integer parameter in ``[low, high]`` (both inclusive) on a grid of ``step``."""

    name: str
    """Parameter name."""
    low: int
    """Smallest allowed value."""
    high: int
    """Largest allowed value (inclusive)."""
    step: int = 1
    """Spacing of allowed values, counted from ``low``."""
    log: bool = False
    """Sample on a log scale (``low`` must then be positive)."""
    when: Conditions = ()
    """When the parameter is active (``when`` in ``[space]``): each condition a parent's name
    and the values it must take, every condition holding; empty: always active."""
    kind: ClassVar[str] = "int"
    """The parameter type, as ``type`` in ``[space]``."""

    @property
    def size(self) -> int:
        """Number of distinct values: ``low``, ``low + step``, ... up to ``high``."""
        return (self.high - self.low) // self.step + 1

    def coerce(self, value: object) -> int:
        """*value* as an integer of the range: an ``int``, a float with no fractional part,
        or a string of either (``"4"``, ``"4.0"``, ``"4e0"``).

        :raises ParamError: for a bool, another type, a fraction, or a value outside
            ``[low, high]`` or off the grid of ``step``.
        """
        if isinstance(value, bool):
            raise ParamError(f"param {self.name!r}: {value!r} is a bool, expected an integer")
        if isinstance(value, str):
            try:
                value = float(value) if any(c in value for c in ".eE") else int(value)
            except ValueError:
                raise ParamError(
                    f"param {self.name!r}: {value!r} is not an integer"
                ) from None
        if isinstance(value, float):
            if not value.is_integer():
                raise ParamError(f"param {self.name!r}: {value!r} is not an integer")
            value = int(value)
        if not isinstance(value, int):
            raise ParamError(
                f"param {self.name!r}: {value!r} ({type(value).__name__}) is not an integer"
            )
        if not self.low <= value <= self.high or (value - self.low) % self.step:
            raise ParamError(
                f"param {self.name!r}: {value} is outside [{self.low}, {self.high}]"
                + (f" step {self.step}" if self.step != 1 else "")
            )
        return value

    def values(self, points: int = 0) -> range:
        """Every value, in increasing order (*points* is ignored: an integer range is
        finite)."""
        return range(self.low, self.high + 1, self.step)

    def sample(self, rng: random.Random) -> int:
        """One value drawn with *rng*: uniformly, or with ``log`` log-uniformly (each value
        standing for the interval up to the next)."""
        if self.log:
            # Log-uniform over [low, low + size*step): each value owns the bucket above it.
            top = self.low + self.size * self.step
            raw = math.exp(rng.uniform(math.log(self.low), math.log(top)))
            index = min(int((raw - self.low) // self.step), self.size - 1)
            return self.low + max(index, 0) * self.step
        return self.low + rng.randrange(self.size) * self.step


@dataclass(frozen=True, slots=True)
class FloatRange(_Base):
    """A float parameter in ``[low, high]``, on a linear or log scale."""

    name: str
    """Parameter name."""
    low: float
    """Smallest allowed value."""
    high: float
    """Largest allowed value (inclusive)."""
    log: bool = False
    """The natural scale is logarithmic (``low`` must be positive)."""
    step: float | None = None
    """Optional spacing of allowed values, counted from ``low``; makes the parameter finite."""
    when: Conditions = ()
    """When the parameter is active (``when`` in ``[space]``): each condition a parent's name
    and the values it must take, every condition holding; empty: always active."""
    kind: ClassVar[str] = "float"
    """The parameter type, as ``type`` in ``[space]``."""

    @property
    def size(self) -> int | None:
        """Number of distinct values with a ``step``; ``None`` without one (continuous)."""
        if self.step is None:
            return None
        return math.floor((self.high - self.low) / self.step + 1e-9) + 1

    def coerce(self, value: object) -> float:
        """*value* as a float of the range: a number or a numeric string; with a ``step``,
        snapped onto the grid (rounded to 12 decimals) when it lies within a relative 1e-9
        of a grid value.

        :raises ParamError: for a bool, another type, a NaN or an infinity, a value outside
            ``[low, high]``, or one off the grid of ``step``.
        """
        if isinstance(value, bool):
            raise ParamError(f"param {self.name!r}: {value!r} is a bool, expected a float")
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ParamError(f"param {self.name!r}: {value!r} is not a number") from None
        if not _is_number(value):
            raise ParamError(
                f"param {self.name!r}: {value!r} ({type(value).__name__}) is not a number"
            )
        result = float(value)  # type: ignore[arg-type]
        if not math.isfinite(result) or not self.low <= result <= self.high:
            raise ParamError(
                f"param {self.name!r}: {result!r} is outside [{self.low!r}, {self.high!r}]"
            )
        if self.step is not None:
            index = round((result - self.low) / self.step)
            snapped = self.low + index * self.step
            if not math.isclose(snapped, result, rel_tol=1e-9, abs_tol=1e-12):
                raise ParamError(
                    f"param {self.name!r}: {result!r} is not on the grid of step {self.step!r}"
                )
            result = round(snapped, 12)
        return result

    def values(self, points: int = 5) -> tuple[float, ...]:
        """Grid values: every step if a step is declared, else *points* evenly spaced."""
        size = self.size
        if size is not None and self.step is not None:
            return tuple(round(self.low + i * self.step, 12) for i in range(size))
        if points < 2:
            return (self.low,)
        if self.log:
            lo, hi = math.log(self.low), math.log(self.high)
            inner = [math.exp(lo + (hi - lo) * i / (points - 1)) for i in range(1, points - 1)]
        else:
            inner = [self.low + (self.high - self.low) * i / (points - 1)
                     for i in range(1, points - 1)]
        return (self.low, *inner, self.high)

    def sample(self, rng: random.Random) -> float:
        """One value drawn with *rng*: uniformly (log-uniformly with ``log``), on the grid
        when there is a ``step``."""
        if self.step is not None:
            size = self.size or 1
            if self.log:
                lo, hi = math.log(self.low), math.log(self.high)
                raw = math.exp(rng.uniform(lo, hi))
                index = min(round((raw - self.low) / self.step), size - 1)
            else:
                index = rng.randrange(size)
            return round(self.low + index * self.step, 12)
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)


if TYPE_CHECKING:
    # At run time ``Parameter`` is the documented base class above, the same three.
    Parameter: TypeAlias = Categorical | IntRange | FloatRange


@dataclass(frozen=True, slots=True)
class Space:
    """An ordered set of named parameters: what an agent is built with.

    Read it as a sequence of parameters (``for param in space``, ``len(space)``) or by name
    (``space["lr"]``); :meth:`coerce` checks a proposal the way the engine will, and
    :attr:`cardinality` says whether the space is finite. Spaces are frozen: equal when their
    parameters are.

    A space is :attr:`conditional` when a parameter has a ``when``: it is then a tree, each
    such parameter active only where its parents (declared before it) take given values.
    A point holds its active parameters only: :meth:`active` names them, :meth:`coerce`
    drops the others, :meth:`sample` draws only them.
    """

    params: tuple[Parameter, ...]
    """The parameters, in declared order."""
    _by_name: dict[str, Parameter] = field(init=False, repr=False, compare=False)
    _names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _tests: tuple[tuple[Parameter, Tests], ...] | None = field(
        init=False, repr=False, compare=False)
    """Each parameter with its conditions as sets of keys; ``None`` when none has any."""
    _parents: frozenset[str] = field(init=False, repr=False, compare=False)
    _tree_size: int | None = field(init=False, repr=False, compare=False)
    """The points of a conditional space's tree (counted once: agents ask often)."""

    def __post_init__(self) -> None:
        by_name: dict[str, Parameter] = {}
        declared = {p.name for p in self.params}
        params = []
        for param in self.params:
            if param.name in by_name:
                raise ConfigError(f"space: parameter {param.name!r} is declared twice")
            if param.when:
                param = dataclasses.replace(
                    param, when=checked_when(param, by_name, declared))
            by_name[param.name] = param
            params.append(param)
        object.__setattr__(self, "params", tuple(params))
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_names", tuple(by_name))
        tests = tuple((p, tests_of(p.when)) for p in params)
        conditional = any(p.when for p in params)
        object.__setattr__(self, "_tests", tests if conditional else None)
        object.__setattr__(self, "_parents", frozenset(
            parent for p in params for parent, _ in p.when))
        object.__setattr__(self, "_tree_size",
                           tree_size(tests, self._parents) if conditional else None)

    @property
    def names(self) -> tuple[str, ...]:
        """The parameters' names, in declared order."""
        return self._names

    def __getitem__(self, name: str) -> Parameter:
        """The parameter named *name* (:class:`KeyError` when there is none)."""
        return self._by_name[name]

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    @property
    def conditional(self) -> bool:
        """Whether a parameter has a ``when`` (the space is a tree, not a product)."""
        return self._tests is not None

    @property
    def cardinality(self) -> int | None:
        """Number of distinct points (the product of the parameters' sizes; of a conditional
        space, the points of its tree, each holding its active parameters only), or ``None``
        when a parameter that can be active is continuous (a float range without a
        ``step``)."""
        if self._tests is not None:
            return self._tree_size
        total = 1
        for param in self.params:
            size = param.size
            if size is None:
                return None
            total *= size
        return total

    def active(self, params: Mapping[str, object]) -> tuple[str, ...]:
        """The names of the parameters active for *params* (a point, or the start of one), in
        declared order: a parameter is active when every condition of its ``when`` holds, that
        is its parent is active, given in *params*, and takes one of the condition's values
        (coerced as the parent coerces). Every name, for a space that is not conditional."""
        tests = self._tests
        if tests is None:
            return self._names
        names: list[str] = []
        values: dict[str, Value] = {}
        parents = self._parents
        for param, conditions in tests:
            if conditions and not holds(conditions, values):
                continue
            names.append(param.name)
            if param.name in parents and param.name in params:
                # A value the parent does not take makes no condition hold.
                with contextlib.suppress(ParamError):
                    values[param.name] = param.coerce(params[param.name])
        return tuple(names)

    def coerce(self, proposal: Mapping[str, object]) -> Params:
        """Return *proposal* with every value coerced to its parameter's type, as a new dict
        in declared order: what the engine does to every proposal before anything else. In a
        conditional space the active parameters (:meth:`active`) are coerced and the others
        dropped, given or not: two proposals that differ only in inactive values are one
        configuration.

        :raises ParamError: for a missing (active) or unknown name, or a value its parameter
            refuses (the engine rejects such a proposal and tells the agent why).
        """
        by_name = self._by_name
        tests = self._tests
        if tests is not None:
            return self._coerce_tree(proposal, tests)
        if len(proposal) != len(by_name) or any(k not in by_name for k in proposal):
            _mismatch([n for n in by_name if n not in proposal],
                      [k for k in proposal if k not in by_name])
        return {p.name: p.coerce(proposal[p.name]) for p in self.params}

    def _coerce_tree(self, proposal: Mapping[str, object],
                     tests: tuple[tuple[Parameter, Tests], ...]) -> Params:
        out: Params = {}
        missing = []
        for param, conditions in tests:
            if conditions and not holds(conditions, out):
                continue
            name = param.name
            if name in proposal:
                out[name] = param.coerce(proposal[name])
            else:
                missing.append(name)
        unknown = [k for k in proposal if k not in self._by_name]
        if missing or unknown:
            _mismatch(missing, unknown)
        return out

    def sample(self, rng: random.Random) -> Params:
        """Draw one point uniformly (log-uniformly on log parameters); in a conditional
        space, its active parameters only, each drawn once its parents are."""
        tests = self._tests
        if tests is None:
            return {p.name: p.sample(rng) for p in self.params}
        out: Params = {}
        for param, conditions in tests:
            if not conditions or holds(conditions, out):
                out[param.name] = param.sample(rng)
        return out

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], *, source: str = "<space>") -> Space:
        """Build a space from the ``[space]`` table of a campaign file.

        Each entry is either a list (a categorical parameter) or a table with ``type`` one of
        ``categorical`` (``choices``), ``int`` (``low``, ``high``, optional ``step``, ``log``)
        or ``float`` (``low``, ``high``, optional ``log``, ``step``), each with an optional
        ``when`` (``{parent = value}`` or ``{parent = [value, ...]}``: the parameter is active
        only then; the parent, a categorical or int parameter, declared before it).
        """
        if not isinstance(table, Mapping) or not table:
            raise ConfigError(f"{source}: [space] must declare at least one parameter")
        params = tuple(_parse_param(name, spec, source) for name, spec in table.items())
        try:
            return cls(params)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def _mismatch(missing: list[str], unknown: list[str]) -> None:
    parts = []
    if missing:
        parts.append(f"missing {missing}")
    if unknown:
        parts.append(f"unknown {unknown}")
    raise ParamError("proposal does not match the space: " + ", ".join(parts))


PARAM_KEYS: Mapping[str, frozenset[str]] = {
    "categorical": frozenset({"type", "choices", "when"}),
    "int": frozenset({"type", "low", "high", "step", "log", "when"}),
    "float": frozenset({"type", "low", "high", "step", "log", "when"}),
}
"""The keys of a parameter's table in ``[space]``, by its ``type``."""


def _need(spec: Mapping[str, Any], key: str, where: str, expected: str) -> Any:
    if key not in spec:
        raise ConfigError(f"{where}: missing key {key!r} ({expected})")
    return spec[key]


def _parse_param(name: str, spec: Any, source: str) -> Parameter:
    where = f"{source}: space.{name}"
    if not name.isidentifier():
        raise ConfigError(f"{where}: parameter names must be identifiers, got {name!r}")
    if isinstance(spec, list):
        spec = {"type": "categorical", "choices": spec}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a table or a list of choices, got {spec!r}")
    kind = spec.get("type")
    if not isinstance(kind, str) or kind not in PARAM_KEYS:
        raise ConfigError(
            f"{where}.type: expected one of 'categorical', 'int', 'float', got {kind!r}"
            + (did_you_mean([kind], PARAM_KEYS) if isinstance(kind, str) else ""))
    unknown = sorted(set(spec) - PARAM_KEYS[kind])
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} for a {kind} parameter"
                          + did_you_mean(unknown, PARAM_KEYS[kind]))
    when = parse_when(spec["when"], where) if "when" in spec else ()
    if kind == "categorical":
        choices = _need(spec, "choices", where, "a non-empty list")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}.choices: expected a non-empty list, got {choices!r}")
        for choice in choices:
            if not isinstance(choice, int | float | str | bool):
                raise ConfigError(
                    f"{where}.choices: {choice!r} is not a string, number or boolean"
                )
            if isinstance(choice, str) and "\0" in choice:
                raise ConfigError(f"{where}.choices: {choice!r} holds a NUL byte")
            if (problem := out_of_range(choice)) is not None:
                raise ConfigError(f"{where}.choices: {choice!r:.40} is {problem}")
        if len({(type(c), c) for c in choices}) != len(choices):
            raise ConfigError(f"{where}.choices: duplicate values in {choices!r}")
        return Categorical(name, tuple(choices), when)
    low = _need(spec, "low", where, "a number")
    high = _need(spec, "high", where, "a number")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where}.log: expected true or false, got {log!r}")
    if kind == "int":
        step = spec.get("step", 1)
        for key, value in (("low", low), ("high", high), ("step", step)):
            if not is_int64(value):
                raise ConfigError(f"{where}.{key}: expected an integer within 64 bits, got"
                                  f" {value!r:.40}")
        if step < 1:
            raise ConfigError(f"{where}.step: expected a positive integer, got {step}")
        if low > high:
            raise ConfigError(f"{where}: empty range, low {low} > high {high}")
        if log and low <= 0:
            raise ConfigError(f"{where}.low: a log-scaled range needs low > 0, got {low}")
        return IntRange(name, low, high, step, log, when)
    fstep = spec.get("step")
    for key, value in (("low", low), ("high", high)):
        if finite_float(value) is None:
            raise ConfigError(f"{where}.{key}: expected a finite number, got {value!r:.40}")
    if fstep is not None and (finite_float(fstep) is None or not fstep > 0):
        raise ConfigError(f"{where}.step: expected a positive number, got {fstep!r}")
    if not low < high:
        raise ConfigError(f"{where}: empty range, low {low!r} must be < high {high!r}")
    if log and low <= 0:
        raise ConfigError(f"{where}.low: a log-scaled range needs low > 0, got {low!r}")
    return FloatRange(name, float(low), float(high), log,
                      None if fstep is None else float(fstep), when)

