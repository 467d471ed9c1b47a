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

    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation().lower(),
        "distributions": dict(sorted(found.items())),
    }


def _main() -> None:
    import json

    # Run as a file, its own directory is first on sys.path; a trial's script is not here.
    if sys.path and sys.path[0] and __file__.startswith(sys.path[0]):
        del sys.path[0]
    print(json.dumps({**environment(), "executable": sys.executable, "path": sys.path}))


if __name__ == "__main__":
    _main()
