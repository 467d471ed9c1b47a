"""docs/campaign.md's examples of ``[agent] warm_start`` and ``[[enqueue]]``, run as written:
its blocks are read from the page and completed into campaigns on local processes."""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "campaign.md"

BRANIN = """\
import json, math, dse.trial
p = dse.trial.params()
x1, x2 = p["x1"], p["x2"]
b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
dse.trial.report({"value": (x2 - b * x1 ** 2 + c * x1 - 6) ** 2
                  + 10 * (1 - t) * math.cos(x1) + 10})
"""

REST = """
[environment]
command = ["{python}", "work.py"]

[[objectives]]
metric = "value"

[space]
"""


def doc_blocks(kind: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [b.split("\n```", 1)[0] + "\n" for b in text.split(f"```{kind}\n")[1:]]


def _block(kind: str, first: str) -> str:
    found = [b for b in doc_blocks(kind) if b.startswith(first)]
    assert len(found) == 1, f"one ```{kind} block starting {first!r} in {DOC}"
    return found[0]


def _dse(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dse", *args], cwd=project,
                          capture_output=True, text=True, timeout=600, check=False)


def test_the_warm_start_example_tells_the_random_searchs_results(tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(BRANIN)
    rest = REST.format(python=sys.executable) + (
        'x1 = { type = "float", low = -5, high = 10 }\n'
        'x2 = { type = "float", low = 0, high = 15 }\n')
    (tmp_path / "random.toml").write_text(
        '[campaign]\nname = "branin-random"\nagent = "random"\nmax_trials = 12\n'
        'max_parallelism = 2\n' + rest)
    (tmp_path / "gp.toml").write_text(_block("toml", '[campaign]\nname = "branin-gp"') + rest)
    assert _dse(tmp_path, "run", "random.toml").returncode == 0
    done = _dse(tmp_path, "run", "gp.toml")
    assert done.returncode == 0, done.stderr
    assert "warm start: the agent was told 12 result(s) of branin-random (run 1)" in done.stderr
    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    try:
        ((n,),) = db.execute("SELECT COUNT(*) FROM trials WHERE campaign_id = 2").fetchall()
    finally:
        db.close()
    assert n == 10


def test_the_enqueue_examples_run_first_in_order(tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(
        "import dse.trial\np = dse.trial.params()\n"
        "dse.trial.report({'value': abs(p['lr'] - 0.05) + (p['optimizer'] == 'sgd')})\n")
    rest = REST.format(python=sys.executable) + (
        'lr = { type = "float", low = 0.0001, high = 1, log = true }\n'
        'optimizer = ["sgd", "adam"]\n')
    campaign = ('[campaign]\nname = "tuned"\nagent = "random"\nmax_trials = 8\n' + rest
                + _block("toml", "[[enqueue]]"))
    (tmp_path / "campaign.toml").write_text(campaign)
    for line in _block("sh", "dse enqueue").splitlines():
        argv = shlex.split(line)
        assert argv[:2] == ["dse", "enqueue"]
        done = _dse(tmp_path, *argv[1:])
        assert done.returncode == 0, done.stderr
    done = _dse(tmp_path, "run", "campaign.toml")
    assert done.returncode == 0, done.stderr
    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    try:
        params = [json.loads(p) for (p,) in db.execute(
            "SELECT params FROM trials ORDER BY number")]
    finally:
        db.close()
    # The shell's three first (they were in the queue before the run), then the file's two.
    assert params[:5] == [
        {"lr": 0.01, "optimizer": "adam"}, {"lr": 0.02, "optimizer": "sgd"},
        {"lr": 0.2, "optimizer": "sgd"}, {"lr": 0.001, "optimizer": "adam"},
        {"lr": 0.1, "optimizer": "sgd"}]
    assert len(params) == 8
