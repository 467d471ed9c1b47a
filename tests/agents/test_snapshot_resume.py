"""A controller killed after the random agent was snapshot resumes from the snapshot (reading
only the trials not yet told back to it) and continues exactly as a run never killed does:
real `dse run` processes, SIGKILL, the real SQLite record."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from support.cli import run_dse, start_dse, trajectory, wait_for_running, write_plugin

SNAPSHOT_CAMPAIGN = """
[campaign]
name = "snap"
agent = "random"
backend = "probe"
max_parallelism = 8
mode = "rolling"
max_trials = 600
poll_interval = "1ms"

[[objectives]]
metric = "value"

[space]
x = { type = "float", low = 0, high = 1 }
passes = [1, 2, 3]
"""


def test_a_controller_killed_after_an_agent_snapshot_resumes_with_the_same_trajectory(
    tmp_path: Path,
) -> None:
    # The random agent is snapshot as it runs: the resume restores the latest snapshot and
    # reads only the trials not told back to it, and must continue exactly as a run never
    # killed does.
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    for root in (reference, killed):
        root.mkdir()
        write_plugin(root)
        (root / "campaign.toml").write_text(SNAPSHOT_CAMPAIGN)
    ref = run_dse(reference, "run", "campaign.toml", "--json", timeout=300)
    assert ref.returncode == 0, ref.stderr
    db_path = killed / ".dse" / "dse.sqlite"
    proc = start_dse(killed, "run", "campaign.toml")
    wait_for_running(db_path, 100, timeout=120, sql="SELECT COUNT(*) FROM trials")
    wait_for_running(db_path, 1, timeout=120,
                     sql="SELECT COUNT(*) FROM agent_snapshots WHERE unobserved IS NOT NULL")
    proc.kill()
    proc.communicate(timeout=30)
    db = sqlite3.connect(db_path)
    try:
        (status,) = db.execute("SELECT status FROM campaigns").fetchone()
    finally:
        db.close()
    assert status == "running"  # killed mid-run

    resumed = run_dse(killed, "run", "campaign.toml", "--json", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming it" in resumed.stderr
    assert "did not replay" not in resumed.stderr

    assert len(trajectory(killed)) == 600
    assert trajectory(killed) == trajectory(reference)
    assert json.loads(resumed.stdout)["best"] == json.loads(ref.stdout)["best"]
