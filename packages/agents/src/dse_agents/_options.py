"""Validation of an agent's ``[agent.<name>]`` options, with messages naming the key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse import ConfigError, did_you_mean

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


def reject_unknown(agent: str, options: Mapping[str, object], known: Iterable[str]) -> None:
    """Raise :class:`dse.ConfigError` when *options* holds keys the agent does not know."""
    if options:
        msg = (
            f"agent.{agent}: unknown option(s) {sorted(options)}; known: {sorted(known) or 'none'}"
            + did_you_mean(options, known)
        )
        raise ConfigError(msg)


def need_int(agent: str, key: str, value: object, *, minimum: int) -> int:
    """*value* as an integer of at least *minimum*, or a :class:`dse.ConfigError`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        msg = f"agent.{agent}.{key}: expected an integer >= {minimum}, got {value!r}"
        raise ConfigError(msg)
    return value


def need_fraction(agent: str, key: str, value: object) -> float | None:
    """*value* as a number in ``[0, 1)`` (``None``, not given, as is), or a
    :class:`dse.ConfigError`."""
    if value is None:
        return None
    if (not isinstance(value, int | float) or isinstance(value, bool)
            or not 0.0 <= float(value) < 1.0):
        msg = f"agent.{agent}.{key}: expected a number >= 0 and < 1, got {value!r}"
        raise ConfigError(msg)
    return float(value)
