"""Running a contract suite as a plugin author runs it: a test module of plugins (broken on
purpose) in a pytest process of its own, and which of its tests failed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path


def run_suite(
    root: Path, module: str, source: str, *, python: str | Path = sys.executable,
    env: Mapping[str, str] | None = None,
) -> str:
    """Write *source* as ``root/<module>.py``, run pytest on it with *python* (its own
    process, no addopts, its temporary files under *root*) and return what pytest printed.
    Failures are expected: the caller reads them with :func:`failed`."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
         "-o", "addopts=", f"--basetemp={root / 'tmp'}", f"{module}.py"],
        cwd=root, env=None if env is None else dict(env), capture_output=True, text=True,
        timeout=900, check=False,
    )
    return done.stdout + done.stderr


def failed(outcome: str) -> set[str]:
    """``Class::test`` of every test pytest's ``-rfE`` summary lists as failed or in error
    (a fixture that broke counts: it is not a pass); a module that did not load, as its whole
    line."""
    return {line.split(" ", 1)[1].partition("::")[2].split(" ", 1)[0] or line
            for line in outcome.splitlines() if line.startswith(("FAILED ", "ERROR "))}
