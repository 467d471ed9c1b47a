"""Command templates: each ``{name}`` of a command item replaced by a trial's value.

:mod:`dse.plugins._environment` runs the command so built; ``dse show`` (:mod:`dse.report._show`)
rebuilds
it from the record without importing what runs it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["PLACEHOLDER", "substitute"]

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A ``{name}`` in a command item."""


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def substitute(
    item: str, values: Mapping[str, Any], quote: Callable[[str], str] = str
) -> str:
    """One item of a command template with each ``{name}`` replaced by ``values[name]``
    (a boolean as ``true``/``false``), passed through *quote*.

    :raises KeyError: a placeholder names nothing in *values*.
    """
    return PLACEHOLDER.sub(lambda m: quote(_text(values[m.group(1)])), item)
