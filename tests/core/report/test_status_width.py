"""`dse status` fits the terminal it prints in: at 80, 120 and 200 columns (a real tmux
terminal, a pty with ``COLUMNS``, a pipe) it keeps the columns that matter first — campaign,
run, status, progress, best — wraps a cell at its spaces rather than cutting it, drops the
rest and names them below the table; no cell is ever cut to a letter and "…"."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from dse.report._listings import STATUS_COLUMNS, status_table
from support.cli import dse_env, run_dse, write_plugin
from support.tmux import dse_command, start, wait_screen

if TYPE_CHECKING:
    from pathlib import Path

CAMPAIGN = """
[campaign]
name = "{name}"
agent = "list"
backend = "probe"
max_parallelism = 2
max_trials = 6
poll_interval = "1ms"

[agent.list]
points = [{{x = 1}}, {{x = 2}}, {{x = 3}}, {{x = 4}}, {{x = 5}}, {{x = 6}}]

[backend.probe]
script = "width_script:scripted"

[[objectives]]
metric = "latency_ms"

[space]
x = {{ type = "int", low = 0, high = 10 }}
"""

SCRIPT = '''
from dse import JobState
from dse.testing import ProbeScript


def scripted(params):
    if params["x"] == 3:
        return ProbeScript(state=JobState.FAILED, exit_code=3)
    return ProbeScript(metrics={"latency_ms": 10.0 + params["x"] / 7})
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with two finished runs of `matmul-tiles` (the second all cache hits)."""
    root = write_plugin(tmp_path_factory.mktemp("width"))
    (root / "width_script.py").write_text(SCRIPT)
    (root / "campaign.toml").write_text(CAMPAIGN.format(name="matmul-tiles"))
    for _ in range(2):
        proc = run_dse(root, "run", "campaign.toml")
        assert proc.returncode == 0, proc.stderr
    return root


def table_cells(text: str) -> list[list[str]]:
    """The cells of each line of a Rich table in *text* (header and body rows)."""
    return [[cell.strip() for cell in re.split(r"[┃│]", line)[1:-1]]
            for line in text.splitlines() if line.startswith(("┃", "│"))]


def assert_fits(text: str, width: int) -> list[list[str]]:
    """*text* holds a table no wider than *width* with no cell cut; returns its cells."""
    rows = table_cells(text)
    assert rows, text
    table = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert all(len(line) <= width for line in table), text
    assert "…" not in text, text
    header = rows[0]
    assert header[:5] == ["run", "campaign", "status", "progress", "best"], text
    for name in header:
        assert name in STATUS_COLUMNS, (name, text)
    body = "\n".join(" ".join(r) for r in rows[1:])
    assert re.search(r"\bmatmul-tiles\b", body), text
    assert "completed" in body, text
    assert "(max_trials)" in body, text
    assert re.search(r"\b5/6\b|\b6/6\b", body), text
    # The best trial: x = 1 (10 + 1/7), trial 1, shown whole (maybe over two lines).
    assert "10.1429" in body, text
    assert re.search(r"\(trial\s+1\)", body), text
    return rows


def dropped_note(text: str) -> str:
    return " ".join(line for line in text.splitlines() if line[:1] not in "┏┃┡│└")


@pytest.mark.parametrize("width", [80, 120, 200])
def test_status_in_a_terminal_fits_its_width(project: Path, tmux: str, width: int) -> None:
    start(tmux, dse_command(project, "status"), width=width)
    text = wait_screen(tmux, r"^EXIT=\d+", 60)
    (project / f"status-{width}.txt").write_text(text)
    assert "EXIT=0" in text, text
    rows = assert_fits(text, width)
    header = rows[0]
    if width >= 120:
        # Wide enough for each run on one line: status and best are not wrapped.
        assert any("completed (max_trials)" in " ".join(r) for r in rows), text
    if width == 80:
        assert {"failed", "running"} <= set(header), text
        assert "trials/h" not in header
        note = dropped_note(text)
        assert "more columns in a wider terminal (or dse status --json):" in note, text
        assert "trials/h" in note, text
    if width == 200:
        assert {"cached", "cost/result", "spent", "results/h"} <= set(header), text


def test_status_honours_columns_in_a_pty(project: Path) -> None:
    # A pseudo-terminal of its own, told COLUMNS=80 (Rich's reading of the width).
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dse", "status"], cwd=project,
            env=dse_env(project, {"COLUMNS": "80", "TERM": "xterm"}),
            stdin=follower, stdout=follower, stderr=follower)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(leader)
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r", "")
    rows = assert_fits(text, 80)
    assert "trials/h" not in rows[0], text


def test_status_piped_keeps_rows_on_one_line_within_200_columns(project: Path) -> None:
    proc = run_dse(project, "status")
    assert proc.returncode == 0, proc.stderr
    rows = assert_fits(proc.stdout, 200)
    assert len(rows) == 3, proc.stdout  # the header and one line per run
    assert "1 more column" in proc.stderr or set(rows[0]) == set(STATUS_COLUMNS)


def entry(**extra: object) -> dict[str, object]:
    return {"run": 12, "name": "a-rather-long-campaign-name", "status": "running",
            "end_reason": None, "agent": "bayesian==0.1.0", "backend": "slurm==0.1.0",
            "trials": 1234, "completed": 1000, "failed": 30, "running": 4, "cached": 200,
            "max_trials": 5000, "best": {"trial": 977, "metric": "loss", "score": 0.0123456},
            "throughput_per_h": 1234.5, "effective_per_h": 1000.0, "cost_per_effective": 0.25,
            "spent": 250.0, "currency": "USD"} | extra


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120, 160, 200, 300])
def test_the_table_keeps_columns_by_priority_and_never_cuts_a_cell(width: int) -> None:
    (columns, rows), dropped = status_table([entry(), entry(run=13, best=None)], width)
    assert set(columns) | set(dropped) == set(STATUS_COLUMNS)
    assert not set(columns) & set(dropped)
    widths = [max(len(line) for cell in [name, *(r[i] for r in rows)]
                  for line in cell.split("\n")) for i, name in enumerate(columns)]
    if width >= 60:
        assert sum(widths) + 3 * len(widths) + 1 <= width, (columns, rows)
    # What the priority keeps first is there whenever it fits at all.
    priority = ["campaign", "run", "status", "progress", "best"]
    assert [c for c in priority if c in columns] == priority[:len(
        [c for c in priority if c in columns])]
    if width >= 80:
        assert set(priority) <= set(columns)
    for row in rows:
        cells = dict(zip(columns, row, strict=True))
        assert cells["campaign"] == "a-rather-long-campaign-name"
        if "best" in cells and cells["best"] != "-":
            assert " ".join(cells["best"].split()) == "0.0123456 (trial 977)"
            assert "(trial\n" not in cells["best"]
        if "progress" in cells:
            assert cells["progress"] == "1230/5000"  # 1234 trials, 4 of them still running
    if width >= 300:
        assert not dropped
        assert columns == STATUS_COLUMNS
