"""The environment a Python process runs in, as dse records it: one function, no dse imports.

:func:`dse.trial.environment` calls it inside a trial; the controller runs this file with the
interpreter a trial's command names (``python …/dse/_envprobe.py``), which need not have dse
installed, and reads the JSON it prints: the same answer the trial would give, before any
trial runs, so the dependencies are part of a result's identity (docs/record.md).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["environment"]


def environment() -> dict[str, Any]:
    """The Python version and implementation, and the installed distributions
    (``{name: version}``, names normalised as PEP 503 does) that this process can import."""
    import importlib.metadata
    import platform
    import re

    found: dict[str, str | None] = {}
    for dist in importlib.metadata.distributions():
        name, version = _name_and_version(
            dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "")
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), version)
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation().lower(),
        "distributions": dict(sorted(found.items())),
    }


def _name_and_version(metadata: str) -> tuple[str | None, str | None]:
    """The first ``Name`` and ``Version`` headers of a distribution's ``METADATA`` (or
    ``PKG-INFO``) text: what ``dist.metadata["Name"]`` and ``dist.version`` answer, read from
    the header lines alone. ``importlib.metadata`` parses the whole file with the ``email``
    package (its long description included): over a hundred installed distributions, that
    was 0.3 s of every trial's report on a loaded machine, this is 20 ms."""
    name = version = None
    for line in metadata.splitlines():
        if not line:
            break  # the headers end at the first empty line
        key, sep, value = line.partition(":")
        if not sep or line[0] in " \t":
            continue  # a continued header's next line
        key = key.strip().lower()
        if key == "name" and name is None:
            name = value.strip()
        elif key == "version" and version is None:
            version = value.strip()
    return name, version


def _main() -> None:
    import json

    # Run as a file, its own directory is first on sys.path; a trial's script is not here.
    if sys.path and sys.path[0] and __file__.startswith(sys.path[0]):
        del sys.path[0]
    print(json.dumps({**environment(), "executable": sys.executable, "path": sys.path}))


if __name__ == "__main__":
    _main()
