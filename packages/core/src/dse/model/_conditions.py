"""Conditional parameters: a parameter of a space active only where earlier parameters take
given values (``when = {optimizer = "sgd"}`` in ``[space]``), which makes the space a tree.

:class:`dse.model._space.Space` holds the parameters; this module reads a ``when`` table,
checks its parents and values, tests the conditions and counts the points of a tree. It knows
a parameter only by what it shows (:class:`Conditional`), so it imports nothing of the space.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeAlias

from dse.model._errors import ConfigError, did_you_mean

__all__ = ["Conditional", "Conditions", "Tests", "checked_when", "holds", "parse_when",
           "tests_of", "tree_size"]

Value: TypeAlias = "int | float | str | bool"
Conditions: TypeAlias = "tuple[tuple[str, tuple[Value, ...]], ...]"
"""A parameter's ``when``: ``((parent, (value, ...)), ...)``, every condition holding."""
Tests: TypeAlias = "tuple[tuple[str, frozenset[tuple[type, Value]]], ...]"
"""A parameter's conditions as they are tested: each parent's name and the keys
``(type(value), value)`` of the values it must take (``1`` is not ``True`` there)."""

_OTHER = object()
"""A parent's value that no condition names (its other values are alike for the tree)."""


class Conditional(Protocol):
    """What this module reads of a parameter."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def size(self) -> int | None: ...

    @property
    def when(self) -> Conditions: ...

    def coerce(self, value: object) -> Value: ...


def parse_when(raw: Any, where: str) -> Conditions:
    """A ``when`` table as read (``{parent = value}`` or ``{parent = [value, ...]}``), in
    the form of :data:`Conditions`; its parents and values are checked by
    :func:`checked_when`, once the parents are known."""
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{where}.when: expected a table such as {{optimizer = \"sgd\"}} or"
                          f" {{layers = [2, 3]}}, got {raw!r:.40}")
    conditions = []
    for parent, value in raw.items():
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ConfigError(f"{where}.when.{parent}: expected a value or a non-empty list of"
                              " values, got []")
        for item in values:
            if not isinstance(item, int | float | str | bool):
                raise ConfigError(f"{where}.when.{parent}: {item!r:.40} is not a string, number"
                                  " or boolean")
        conditions.append((str(parent), tuple(values)))
    return tuple(conditions)


def checked_when(param: Conditional, earlier: Mapping[str, Conditional],
                 declared: set[str]) -> Conditions:
    """*param*'s conditions with their values coerced by their parents, checked: each parent
    a categorical or int parameter declared before it (*earlier*; *declared*: every name of
    the space), each value one the parent takes.

    :raises ConfigError: naming ``space.<param>.when.<parent>``.
    """
    conditions: list[tuple[str, tuple[Value, ...]]] = []
    for parent, values in param.when:
        where = f"space.{param.name}.when.{parent}"
        given = earlier.get(parent)
        if given is None:
            problem = ("a parameter cannot depend on itself" if parent == param.name else
                       f"{parent!r} is declared after {param.name!r}: a condition's parent"
                       " comes first in [space]" if parent in declared else
                       f"no parameter {parent!r}" + did_you_mean([parent], earlier))
            raise ConfigError(f"{where}: {problem}")
        if given.kind == "float":
            raise ConfigError(f"{where}: {parent!r} is a float range; a condition's parent"
                              " must be a categorical or int parameter")
        if any(parent == seen for seen, _ in conditions):
            raise ConfigError(f"{where}: given twice")
        if not values:
            raise ConfigError(f"{where}: expected a value of {parent!r} or a non-empty list"
                              " of them, got []")
        coerced: list[Value] = []
        for value in values:
            try:
                value = given.coerce(value)
            except ValueError as exc:  # the parent's ParamError
                raise ConfigError(f"{where}: {exc}") from None
            if not any(value == v and type(value) is type(v) for v in coerced):
                coerced.append(value)
        conditions.append((parent, tuple(coerced)))
    return tuple(conditions)


def tests_of(conditions: Conditions) -> Tests:
    """*conditions* as :func:`holds` tests them."""
    return tuple((parent, frozenset((type(v), v) for v in values))
                 for parent, values in conditions)


def holds(tests: Tests, values: Mapping[str, object]) -> bool:
    """Whether every condition holds for *values* (coerced values of the active parameters:
    a parent absent from them is inactive, or not given)."""
    for parent, keys in tests:
        if parent not in values:
            return False
        value = values[parent]
        if (type(value), value) not in keys:
            return False
    return True


def tree_size(tests: Sequence[tuple[Conditional, Tests]], parents: frozenset[str]
              ) -> int | None:
    """The points of a conditional space (its parameters in declared order, each with its
    :data:`Tests`; *parents*: the names conditions test), or ``None`` when a parameter that
    can be active is continuous. Each parent's values fall in classes (one per value a
    condition names, one for all the others): the count sums, over the classes each active
    parent takes, the product of the active parameters' sizes."""
    classes: dict[str, list[tuple[object, int]]] = {}
    for param, _ in tests:
        if param.name in parents:
            named = {key for _, conditions in tests for parent, keys in conditions
                     if parent == param.name for key in keys}
            rest = (param.size or 0) - len(named)
            classes[param.name] = ([(value, 1) for _, value in named]
                                   + ([(_OTHER, rest)] if rest > 0 else []))

    def count(start: int, values: dict[str, object]) -> int | None:
        product = 1
        for i in range(start, len(tests)):
            param, conditions = tests[i]
            if conditions and not holds(conditions, values):
                continue
            if param.name in classes:  # a branch per class of its values
                total = 0
                for value, times in classes[param.name]:
                    values[param.name] = value
                    below = count(i + 1, values)
                    if below is None:
                        return None
                    total += times * below
                del values[param.name]
                return product * total
            size = param.size
            if size is None:
                return None
            product *= size
        return product

    return count(0, {})
