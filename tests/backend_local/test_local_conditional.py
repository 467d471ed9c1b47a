"""A conditional space on real local processes (issue 42): `dse run` through the grid, random,
Bayesian (and Optuna) agents of the 2-level space — the optimizer and its own params, the
layers and a width per layer — and the example of docs/campaign.md as written. Every trial's
recorded params are exactly its active ones (what the trial read from its params file too),
`dse export --format csv` leaves the others' cells empty, and `dse show` prints the tree."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import dse
from support.cli import last_run, run_dse, write_plugin
from support.conditional import SMALL_POINTS, SMALL_SPACE_TOML, expected_active

DOC = Path(__file__).resolve().parents[2] / "docs" / "campaign.md"


def doc_block(kind: str, needle: str) -> str:
    """The one fenced block of docs/campaign.md of *kind* holding *needle*."""
    blocks = [b.split("\n```", 1)[0] for b in DOC.read_text().split(f"```{kind}\n")[1:]]
    found = [b for b in blocks if needle in b]
    assert len(found) == 1, f"one ```{kind} block holding {needle!r} in {DOC}"
    return found[0] + "\n"


EXAMPLE = doc_block("toml", 'when = { optimizer = "sgd" }')
TRAIN = doc_block("python", "# train.py")
COMMAND = f'environment.command=["{sys.executable}", "train.py"]'
"""The example's command with the interpreter that has dse (its ``python`` may not)."""


def project_with(tmp_path: Path, campaign: str) -> Path:
    write_plugin(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "campaign.toml").write_text(campaign)
    return tmp_path


def trials(project: Path) -> list[tuple[int, dict[str, Any], str, dict[str, Any] | None]]:
    """Each trial of the record: number, params, status, the params the trial read."""
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        rows = db.execute("SELECT number, params, status, trial_dir FROM trials"
                          " ORDER BY number").fetchall()
    finally:
        db.close()
    read = []
    for number, params, status, trial_dir in rows:
        seen = Path(trial_dir or "") / "params.json"
        read.append((number, json.loads(params), status,
                     json.loads(seen.read_text()) if trial_dir and seen.exists() else None))
    return read


def assert_tree_everywhere(project: Path, name: str, count: int) -> None:
    """*count* completed trials, each holding its active params only (as the trial read
    them too), the export's cells empty where a param is inactive, `dse show` the tree."""
    found = trials(project)
    assert len(found) == count
    for number, params, status, read in found:
        assert status == "completed", (number, status)
        assert set(params) == expected_active(params), params
        assert read == params
    proc = run_dse(project, "export", name, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [int(r["trial"]) for r in rows] == [n for n, *_ in found]
    for row, (_, params, _, _) in zip(rows, found, strict=True):
        cells = {c[len("param."):]: v for c, v in row.items() if c.startswith("param.")}
        assert set(cells) == {"optimizer", "momentum", "beta2", "layers", "width_1",
                              "width_2", "width_3"}
        assert {n for n, v in cells.items() if v != ""} == set(params)
    number, params, *_ = found[-1]
    shown = run_dse(project, "show", f"{name}:{number}")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    tree = lines[next(i for i, line in enumerate(lines) if line.startswith("  space")):][:7]
    for line in tree:
        entry = line[len("  space         "):]
        param = entry.split()[0]
        # A conditional param is indented under its parent and says its condition.
        conditional = param in ("momentum", "beta2", "width_2", "width_3")
        assert entry.startswith("  ") == conditional, line
        assert ("  when " in entry) == conditional, line
        assert entry.endswith("(inactive)") == (param not in params), line


def test_the_docs_example_runs_as_written(tmp_path: Path) -> None:
    project = project_with(tmp_path, EXAMPLE)
    proc = run_dse(project, "run", "campaign.toml", "--set", COMMAND, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert_tree_everywhere(project, "nets", 20)
    found = trials(project)
    assert {p["optimizer"] for _, p, *_ in found} == {"sgd", "adam"}
    assert {p["layers"] for _, p, *_ in found} == {1, 2, 3}
    # The figures draw a run whose trials hold different params.
    out = project / "report.html"
    report = run_dse(project, "report", "campaign.toml", "--html", str(out), timeout=600)
    assert report.returncode == 0, report.stderr
    page = out.read_text()
    for figure in ("parameters", "importance", "slices", "contour"):
        assert f'id="plot-{figure}"' in page, figure
    assert "No slices" not in page
    assert "No contour" not in page


CAMPAIGN = """
[campaign]
name = "small"
agent = "{agent}"
backend = "local"
max_parallelism = 2
{limit}
seed = 1

[environment]
command = ["{python}", "train.py"]
time_limit = "2m"

[[objectives]]
metric = "loss"

[agent.bayesian]
initial = 4
candidates = 256

{space}
"""


@pytest.mark.parametrize(
    ("agent", "count"), [("grid", SMALL_POINTS), ("random", 12), ("bayesian", 12),
                         ("optuna", 12)])
def test_each_agent_runs_the_tree_on_local_processes(
    tmp_path: Path, agent: str, count: int,
) -> None:
    if agent == "optuna":
        pytest.importorskip("optuna")
    limit = "" if agent == "grid" else f"max_trials = {count}"
    project = project_with(tmp_path, CAMPAIGN.format(
        agent=agent, limit=limit, python=sys.executable, space=SMALL_SPACE_TOML))
    proc = run_dse(project, "run", "campaign.toml", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert_tree_everywhere(project, "small", count)
    configs = {json.dumps(p, sort_keys=True) for _, p, *_ in trials(project)}
    assert len(configs) == count
    if agent == "grid":  # the whole tree, once: its size counts the points
        space = dse.Space.from_dict(tomllib.loads(SMALL_SPACE_TOML)["space"])
        assert space.cardinality == SMALL_POINTS
    # A rerun is the same campaign: every configuration answered from the record.
    again = run_dse(project, "run", "campaign.toml", timeout=600)
    assert again.returncode == 0, again.stderr
    assert last_run(project) == {"cached": count}
