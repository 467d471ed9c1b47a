"""Durations as campaign files write them (``30``, ``"90s"``, ``"10m"``), in seconds."""

from __future__ import annotations

import math
import re

from dse.model._errors import ConfigError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|min|h|d)?\s*$")
_SCALE = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
MAX_DURATION = 36500 * 86400.0
"""The longest duration a campaign may give (100 years, in seconds): a timer of more, once in
nanoseconds, overflows what the system's waits take."""


def parse_duration(value: object, where: str) -> float:
    """Seconds from a duration as a campaign file writes it: what dse's own keys accept, for a
    plugin's options (a backend's :meth:`~dse.Backend.from_options`) to read the same way.

    :param value: a number of seconds (an ``int`` or ``float``, not a ``bool``), or a string
        of a number and an optional unit: ``ms``, ``s``, ``m`` or ``min``, ``h``, ``d``
        (``"90s"``, ``"10m"``, ``"1.5h"``, ``" 5 s "``; no unit: seconds).
    :param where: what the value is, for the message: the file and key, such as
        ``"campaign.toml: backend.mine.timeout"``.
    :return: the duration in seconds, a ``float`` from 0 to :data:`MAX_DURATION`.
    :raises ConfigError: ``<where>: expected a duration such as 30, "90s", "10m" or "2h",
        got ...`` for anything else, or ``<where>: expected a non-negative duration of at
        most 100 years ...`` for a negative number, a longer one, an infinity or a NaN.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) if abs(value) < 1e300 else math.inf  # an int past floats
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _SCALE[match.group(2)]
    else:
        raise ConfigError(
            f"{where}: expected a duration such as 30, \"90s\", \"10m\" or \"2h\", got {value!r}"
        )
    if not 0 <= seconds <= MAX_DURATION:  # NaN compares false too
        raise ConfigError(f"{where}: expected a non-negative duration of at most 100 years"
                          f" ({MAX_DURATION:.0f} s), got {value!r:.40}")
    return seconds
