"""`dse init` names plugins the starter would run with: an agent or backend that is not
installed is refused (did-you-mean from the installed ones, exit 2) and nothing is written,
instead of a starter that does not run."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path


def init(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dse", "init", *args], cwd=where,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("option", "typed", "meant"), [
    ("--agent", "bayesain", "bayesian"), ("--backend", "lcoal", "local")])
def test_an_unknown_plugin_is_refused_with_did_you_mean_and_nothing_written(
    tmp_path: Path, option: str, typed: str, meant: str,
) -> None:
    done = init(tmp_path, option, typed)
    assert done.returncode == 2, done.stderr
    kind = option.removeprefix("--")
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"dse: error: dse init {option}: nothing written: unknown {kind}"
                           f" {typed!r}; installed {kind}s: "), line
    assert line.endswith(f"; did you mean {meant!r}?"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_starter_names_the_agent_and_backend_asked_for(tmp_path: Path) -> None:
    done = init(tmp_path, "--agent", "grid", "--backend", "local")
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "campaign.toml").read_text()
    assert 'agent = "grid"' in text
    assert 'backend = "local"' in text
