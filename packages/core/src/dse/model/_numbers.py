"""Numbers handed in from outside dse, bounded to what the record can keep.

A trial's files (``progress.jsonl``, ``result.json``), a campaign file, ``--set`` and a
reference typed on the command line all hand dse numbers JSON and TOML give no size: SQLite
keeps an integer in 64 signed bits and JSON has no NaN nor infinity. Each number is checked
where it enters (a trial's line refused, a campaign's key named in a :class:`ConfigError`, a
reference out of range a trial that does not exist), so none reaches the record as an
``OverflowError``.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

INT64_MIN = -(1 << 63)
"""The least integer SQLite keeps."""
INT64_MAX = (1 << 63) - 1
"""The largest integer SQLite keeps (9223372036854775807)."""

MAX_TIME = 253402300799.0
"""The last second of the year 9999 (UTC): the latest time, in seconds since the epoch, a
date can show."""

_DIGITS = len(str(INT64_MAX))


def is_number(value: object) -> bool:
    """Whether *value* is an integer or a float (``True`` and ``False`` are not)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_whole(value: object) -> TypeGuard[int]:
    """Whether *value* is an integer (``True`` and ``False`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_int64(value: object) -> TypeGuard[int]:
    """Whether *value* is an integer SQLite keeps as one (64 bits, signed)."""
    return is_whole(value) and INT64_MIN <= value <= INT64_MAX


def finite_float(value: Any) -> float | None:
    """*value* as a finite float, or ``None`` when it is not a finite number (a boolean, a
    NaN, an infinity, an integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        result = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return result if math.isfinite(result) else None


def is_time(value: object) -> bool:
    """Whether *value* is a time dse can keep and show: seconds since the epoch, from 0 to
    :data:`MAX_TIME`."""
    return is_number(value) and 0 <= value <= MAX_TIME  # type: ignore[operator]


def out_of_range(value: object) -> str | None:
    """Why the number *value* cannot be kept, in words (``"an integer beyond 64 bits"``,
    ``"NaN"``, ``"an infinity"``); ``None`` when it can, or when it is not a number."""
    if is_whole(value):
        return None if is_int64(value) else (
            f"an integer beyond 64 bits (at most {INT64_MAX} in magnitude)")
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "an infinity"
    return None


def record_number(text: str) -> int | None:
    """The whole number *text* (ASCII digits) names, or ``None`` when it is past
    :data:`INT64_MAX`: nothing the record holds has such a number (a run, a trial)."""
    digits = text.lstrip("0") or "0"
    if not digits.isascii() or not digits.isdigit():
        raise ValueError(f"{text!r} is not a whole number")
    if len(digits) > _DIGITS:  # never converted: int() refuses 4300 digits and more
        return None
    number = int(digits)
    return number if number <= INT64_MAX else None
