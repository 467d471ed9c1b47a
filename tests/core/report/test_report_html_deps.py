"""`dse report --html` where matplotlib cannot be imported (a real subprocess whose
interpreter refuses the import, as one without the report extra would): one line saying what
to install, before anything else is printed, and a non-zero exit; the plain report still
works there."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

from support.cli import dse_env, run_dse, write_plugin

if TYPE_CHECKING:
    from pathlib import Path

CAMPAIGN = """
[campaign]
name = "plain"
agent = "list"
backend = "probe"
max_parallelism = 2
poll_interval = "1ms"

[agent.list]
points = [{x = 1}, {x = 2}]

[[objectives]]
metric = "value"

[space]
x = { type = "int", low = 0, high = 10 }
"""

BLOCK = '''
import sys


class NoMatplotlib:
    """Refuses matplotlib and its submodules, as an interpreter without it would."""

    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoMatplotlib())
'''


def without_matplotlib(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    blocked = project / "blocked"
    blocked.mkdir(exist_ok=True)
    (blocked / "sitecustomize.py").write_text(BLOCK)
    env = dse_env(project)
    env["PYTHONPATH"] = os.pathsep.join([str(blocked), env["PYTHONPATH"]])
    return subprocess.run([sys.executable, "-m", "dse", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_report_html_without_matplotlib_is_one_line_before_anything(tmp_path: Path) -> None:
    project = write_plugin(tmp_path)
    (project / "campaign.toml").write_text(CAMPAIGN)
    assert run_dse(project, "run", "campaign.toml").returncode == 0
    # The interpreter really has no matplotlib to give.
    probe = without_matplotlib(project, "--version")
    check = subprocess.run(
        [sys.executable, "-c", "import matplotlib"], cwd=project, capture_output=True,
        text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(project / "blocked")})
    assert probe.returncode == 0, probe.stderr
    assert check.returncode != 0
    assert "No module named 'matplotlib'" in check.stderr

    out = project / "r.html"
    done = without_matplotlib(project, "report", "campaign.toml", "--html", str(out))
    assert done.returncode == 2, done
    assert done.stdout == ""  # no report printed first
    assert done.stderr.splitlines() == [
        "dse: error: dse report --html draws its plots with matplotlib, which is not"
        " installed: pip install 'dse-core[report]'"]
    assert not out.exists()
    # With --json too: nothing on stdout either.
    both = without_matplotlib(project, "report", "--json", "--html", str(out))
    assert (both.returncode, both.stdout) == (2, "")
    # Without --html, the report needs no matplotlib.
    plain = without_matplotlib(project, "report", "campaign.toml")
    assert plain.returncode == 0, plain.stderr
    assert "campaign plain run 1: completed" in plain.stdout
