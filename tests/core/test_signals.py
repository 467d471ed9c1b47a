"""Signals are acted on within a second in every state of the loop (issue 18): here, dispatch
paused by systematic interruptions with nothing running, where the loop waits for minutes."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from support.cli import start_dse, write_plugin

SCRIPT = """
from dse import JobState
from dse.testing import ProbeScript


def launch_fails(params):
    return ProbeScript(state=JobState.LAUNCH_ERROR)
"""

CAMPAIGN = """
[campaign]
name = "paused"
agent = "random"
backend = "probe"
max_parallelism = 2
max_trials = 50
interruption_threshold = 2
interruption_window = "10m"
poll_interval = ["0.05s", "0.1s"]

[backend.probe]
script = "scripts:launch_fails"

[[objectives]]
metric = "value"

[space]
x = { type = "float", low = 0, high = 1 }
"""


def paused(db: Path) -> bool:
    if not db.exists():
        return False
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return bool(conn.execute(
            "SELECT COUNT(*) FROM events WHERE kind = 'systematic_interruptions'").fetchone()[0])
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_dispatch_is_paused_ends_the_run_within_a_second(
    tmp_path: Path, signum: int,
) -> None:
    write_plugin(tmp_path)
    (tmp_path / "scripts.py").write_text(SCRIPT)
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    db = tmp_path / ".dse" / "dse.sqlite"
    proc = start_dse(tmp_path, "run", "campaign.toml")
    try:
        deadline = time.monotonic() + 60
        while not paused(db):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "dispatch never paused"
            time.sleep(0.1)
        time.sleep(0.5)  # well into the pause's wait
        proc.send_signal(signum)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert took < 1.0 + 0.5, f"took {took:.2f}s"  # 1 s, and a margin for process exit
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT status FROM campaigns").fetchall() == [("cancelled",)]
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
