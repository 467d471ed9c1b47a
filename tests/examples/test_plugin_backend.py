"""The third-party backend in ``examples/plugin-backend`` works as its users would install it.

A fresh virtual environment gets dse-core and the example (``dse-backend-unshare``) from their
sources with pip, as wheels, nothing editable and nothing from this repository's own
environment: dse must find the backend through its entry point alone, and the example's own
test suite (dse's ``BackendContract`` and its namespace tests) must pass there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "plugin-backend"
CORE = REPO / "packages" / "core"


def _can_unshare() -> bool:
    exe = shutil.which("unshare")
    if exe is None:
        return False
    probe = subprocess.run([exe, "--fork", "--pid", "--mount-proc", "--kill-child", "true"],
                           capture_output=True, check=False)
    return probe.returncode == 0


pytestmark = [
    pytest.mark.slow,
    # Both tests share one environment: keep them on one worker under `--dist loadgroup`.
    pytest.mark.xdist_group("plugin-backend"),
    pytest.mark.skipif(not _can_unshare(),
                       reason="needs util-linux unshare and the right to create namespaces"),
]


def _clean_env() -> dict[str, str]:
    """This process's environment without what would leak the repo's plugins or paths in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "DSE_PLUGINS", "DSE_DISABLE_PLUGIN_AUTOLOAD",
                        "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(argv: list[str], *, timeout: float, cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=_clean_env(), check=False)
    assert proc.returncode == 0, (
        f"{' '.join(argv[:4])} ... exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh venv, a copy of the example) with dse-core and the example installed."""
    root = tmp_path_factory.mktemp("plugin-backend")
    # A copy, so that running its tests writes nothing into the repository.
    example = root / "plugin-backend"
    shutil.copytree(EXAMPLE, example,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.egg-info"))
    venv = root / "venv"
    # --without-pip and this environment's pip driving the new one (`pip --python`): Debian's
    # system Python strips ensurepip, and CI runs there.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
          "--disable-pip-version-check", "-q", str(CORE), f"{example}[test]"], timeout=900)
    return venv, example


def test_dse_plugins_lists_the_backend_found_through_its_entry_point(
    installed: tuple[Path, Path],
) -> None:
    venv, _ = installed
    table = _run([str(venv / "bin" / "dse"), "plugins"], timeout=120)
    assert "unshare" in table
    assert "dse-backend-unshare" in table
    rows = json.loads(_run([str(venv / "bin" / "dse"), "plugins", "--json"], timeout=120))
    backends = {row["name"]: row for row in rows if row["kind"] == "backend"}
    # Only dse-core's probe besides it: nothing of this repository's environment leaked in.
    assert sorted(backends) == ["probe", "unshare"]
    unshare = backends["unshare"]
    assert unshare["plugin"] == "unshare"  # the entry point's name
    assert unshare["distribution"] == "dse-backend-unshare"
    assert unshare["distribution_version"] == "0.1.0"


def test_the_examples_own_tests_pass_in_that_environment(
    installed: tuple[Path, Path],
) -> None:
    venv, example = installed
    basetemp = example.parent / "pytest-tmp"  # its own, not shared with this session's
    out = _run([str(venv / "bin" / "python"), "-m", "pytest", "-q", f"--basetemp={basetemp}",
                "tests"], timeout=600, cwd=example)
    summary = out.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
    assert counts.get("passed", 0) > 0, summary
    assert set(counts) == {"passed"}, summary  # no failed, error, skipped or xfailed
