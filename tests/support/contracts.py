"""Running a contract suite as a plugin author runs it: a test module of plugins (broken on
purpose) in a pytest process of its own, and which of its tests failed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def run_suite(root: Path, module: str, source: str) -> str:
    """Write *source* as ``root/<module>.py``, run pytest on it (its own process, no addopts)
    and return what pytest printed."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider",
         "-o", "addopts=", f"{module}.py"],
        cwd=root, capture_output=True, text=True, timeout=900, check=False,
    )
    return done.stdout + done.stderr


def failed(outcome: str) -> set[str]:
    """``Class::test`` of every failed test in pytest's ``-rf`` summary."""
    return {line.split("::", 1)[1].split(" ", 1)[0] for line in outcome.splitlines()
            if line.startswith("FAILED ")}
