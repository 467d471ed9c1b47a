from __future__ import annotations

import re

from dse._errors import ConfigError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|min|h|d)?\s*$")
_SCALE = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object, where: str) -> float:
    """Seconds from a number or a string such as ``"90s"``, ``"10m"``, ``"2h"``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _SCALE[match.group(2)]
    else:
        raise ConfigError(
            f"{where}: expected a duration such as 30, \"90s\", \"10m\" or \"2h\", got {value!r}"
        )
    if seconds < 0 or seconds != seconds:
        raise ConfigError(f"{where}: expected a non-negative duration, got {value!r}")
    return seconds
