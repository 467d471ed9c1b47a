"""The third-party backend in ``examples/plugin-backend`` works as its users would install it.

A fresh virtual environment gets dse-core and the example (``dse-backend-unshare``) from their
sources with pip, as wheels, nothing editable and nothing from this repository's own
environment: dse must find the backend through its entry point alone, and the example's own
test suite (dse's ``BackendContract`` and its namespace tests) must pass there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from support.venv import REPO, install_example, run, run_example_tests

if TYPE_CHECKING:
    from pathlib import Path

EXAMPLE = REPO / "examples" / "plugin-backend"


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


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh venv, a copy of the example) with dse-core and the example installed."""
    return install_example(EXAMPLE, tmp_path_factory.mktemp("plugin-backend"))


def test_dse_plugins_lists_the_backend_found_through_its_entry_point(
    installed: tuple[Path, Path],
) -> None:
    venv, _ = installed
    table = run([str(venv / "bin" / "dse"), "plugins"], timeout=120)
    assert "unshare" in table
    assert "dse-backend-unshare" in table
    rows = json.loads(run([str(venv / "bin" / "dse"), "plugins", "--json"], timeout=120))
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
    run_example_tests(venv, example)
