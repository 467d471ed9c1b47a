"""A fresh virtual environment with packages of this repository installed as their users
install them (wheels built by pip, nothing editable, nothing of this environment leaking in),
for the tests of the examples."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "packages" / "core"


def clean_env() -> dict[str, str]:
    """This process's environment without what would leak the repo's plugins or paths in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "DSE_PLUGINS", "DSE_DISABLE_PLUGIN_AUTOLOAD",
                        "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(argv: list[str], *, timeout: float, cwd: Path | None = None) -> str:
    """Run *argv* in :func:`clean_env`; fail the test (with its output) if it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=clean_env(), check=False)
    assert proc.returncode == 0, (
        f"{' '.join(argv[:4])} ... exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


def install_example(example: Path, root: Path) -> tuple[Path, Path]:
    """(a fresh venv under *root*, a copy of *example* there) with dse-core and the copy
    installed with its ``test`` extra."""
    copy = root / example.name
    # A copy, so that running its tests writes nothing into the repository.
    shutil.copytree(example, copy,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.egg-info"))
    venv = root / "venv"
    # --without-pip and this environment's pip driving the new one (`pip --python`): Debian's
    # system Python strips ensurepip, and CI runs there.
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--disable-pip-version-check", "-q", str(CORE), f"{copy}[test]"], timeout=900)
    return venv, copy


def run_example_tests(venv: Path, example: Path) -> str:
    """Run the example's own tests in *venv*; their summary line, every test passed."""
    basetemp = example.parent / "pytest-tmp"  # its own, not shared with this session's
    out = run([str(venv / "bin" / "python"), "-m", "pytest", "-q", f"--basetemp={basetemp}",
               "tests"], timeout=600, cwd=example)
    summary = out.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
    assert counts.get("passed", 0) > 0, summary
    assert set(counts) == {"passed"}, summary  # no failed, error, skipped or xfailed
    return summary
