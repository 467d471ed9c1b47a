"""What a campaign's agent starts from besides its own proposals: the results of earlier runs
it is told before its first proposal (``[agent] warm_start``) and the configurations that run
before its proposals (``[[enqueue]]``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from dse.model._errors import ConfigError, did_you_mean
from dse.model._space import ParamError

if TYPE_CHECKING:
    from dse.model._constraints import Constraint
    from dse.model._space import Params, Space

WARM_KEYS = frozenset({"warm_start", "warm_start_data", "warm_start_fill"})
"""The keys of ``[agent]`` that are not an agent's table of options."""

WarmData = Literal["current", "any"]


@dataclass(frozen=True, slots=True)
class WarmStart:
    """``[agent] warm_start``: the runs whose results the agent is told before it proposes."""

    sources: tuple[str | int, ...]
    """Campaign names (each of their runs in the record) and run ids."""
    data: WarmData = "current"
    """``current``: only results about the data version this run reads; ``any``: all."""
    fill: Mapping[str, Any] = field(default_factory=dict)
    """The value of a parameter the source runs did not have (``warm_start_fill``): what they
    ran with. A source trial lacking a parameter not filled here is left out."""


def parse_warm_start(section: Mapping[str, Any], where: str, space: Space) -> WarmStart | None:
    """The warm start the ``[agent]`` table asks for (``None``: none); every key of the table
    that is not a table of an agent's options must be one of :data:`WARM_KEYS`."""
    unknown = sorted(k for k, v in section.items()
                     if not isinstance(v, Mapping) and k not in WARM_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join('agent.' + k for k in unknown)}"
                          + did_you_mean(unknown, WARM_KEYS))
    raw = section.get("warm_start")
    if raw is None:
        for key in ("warm_start_data", "warm_start_fill"):
            if key in section:
                raise ConfigError(f"{where}: agent.{key}: given without agent.warm_start")
        return None
    if isinstance(raw, str | int) and not isinstance(raw, bool):
        raw = [raw]
    if (not isinstance(raw, list) or not raw
            or any(isinstance(s, bool) or not isinstance(s, str | int) for s in raw)):
        raise ConfigError(f"{where}: agent.warm_start: expected a list of campaign names and"
                          f" run ids, got {raw!r}")
    data = section.get("warm_start_data", "current")
    if data not in ("current", "any"):
        raise ConfigError(f"{where}: agent.warm_start_data: expected 'current' or 'any', got"
                          f" {data!r}")
    fill = section.get("warm_start_fill", {})
    if not isinstance(fill, Mapping):
        raise ConfigError(f"{where}: agent.warm_start_fill: expected a table of parameter"
                          f" values, got {fill!r}")
    filled: dict[str, Any] = {}
    for name, value in fill.items():
        if name not in space.names:
            raise ConfigError(f"{where}: agent.warm_start_fill.{name}: no such parameter"
                              + did_you_mean([name], space.names))
        try:
            filled[name] = space[name].coerce(value)
        except ParamError as exc:
            raise ConfigError(f"{where}: agent.warm_start_fill.{name}: {exc}") from None
    return WarmStart(tuple(raw), data, filled)


def parse_enqueue(
    raw: Any, where: str, space: Space, constraints: Sequence[Constraint]
) -> tuple[Params, ...]:
    """The ``[[enqueue]]`` tables: configurations to run before the agent's proposals, each
    coerced to the space and checked against the constraints."""
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, Mapping) else raw
    if not isinstance(items, list):
        raise ConfigError(f"{where}: enqueue: expected [[enqueue]] tables of parameter values")
    return tuple(enqueued_params(item, f"{where}: enqueue[{i}]", space, constraints)
                 for i, item in enumerate(items))


def enqueued_params(
    item: Any, where: str, space: Space, constraints: Sequence[Constraint]
) -> Params:
    """One configuration to enqueue, coerced and checked (a :class:`ConfigError` naming
    *where* when the space or a constraint refuses it)."""
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where}: expected a table of parameter values, got {item!r}")
    try:
        params = space.coerce(item)
    except ParamError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    for constraint in constraints:
        if not constraint(params):
            raise ConfigError(f"{where}: {params} breaks the constraint {constraint.text!r}")
    return params
