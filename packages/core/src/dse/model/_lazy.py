"""A package's public names imported on first use (PEP 562): what every face of dse uses, so
that importing one module of a package never imports the rest of it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def lazy_names(
    package: str, table: Mapping[str, str], public: list[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for *package*: a name of *table* (name -> module) is
    imported from its module on first use and kept in the package; *public* is what
    ``dir()`` lists."""

    def getattr_(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def dir_() -> list[str]:
        return sorted(public)

    return getattr_, dir_
