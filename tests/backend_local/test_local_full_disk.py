"""A full disk is one error line and a record that stays intact, on a real full file system:
a small tmpfs that one trial of the campaign fills while the campaign runs."""

from __future__ import annotations

import sqlite3
import subprocess
from typing import TYPE_CHECKING

import pytest

from support.cli import run_dse, write_plugin

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CAMPAIGN = """
[campaign]
name = "full"
agent = "list"
backend = "local"
max_parallelism = 2
poll_interval = ["10ms", "100ms"]

[agent.list]
points = [{x = 1}, {x = 2}, {x = 3}, {x = 4}, {x = 5}, {x = 6}]

[[objectives]]
metric = "value"

[environment]
# Trial 3 fills the disk the record is on, once (while the flag outside that disk exists).
command = ["sh", "-c", "sleep 0.3; if [ {x} = 3 ] && rm FLAG 2>/dev/null; then \
cat /dev/zero > $DSE_TRIAL_DIR/fill 2>/dev/null; fi; \
echo '{\\"complete\\": true, \\"metrics\\": {\\"value\\": {x}}}' > $DSE_TRIAL_DIR/result.json"]
time_limit = "60s"

[space]
x = { type = "int", low = 1, high = 6 }
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, mounted for the test (root only: unprivileged, mount is refused)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_is_one_line_and_the_record_resumes_once_there_is_room(
    tmp_path: Path, small_disk: Path
) -> None:
    project = write_plugin(tmp_path)
    flag = tmp_path / "fill-once"
    flag.touch()
    campaign = small_disk / "c.toml"
    campaign.write_text(CAMPAIGN.replace("FLAG", str(flag)))

    proc = run_dse(project, "run", str(campaign), timeout=120)

    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dse: error: ")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.rstrip().endswith(errors[0])
    (error,) = errors
    assert f"{small_disk}/.dse/" in error, error  # where
    assert "disk is full" in error or "No space left on device" in error, error  # what
    assert not flag.exists()

    db_path = small_disk / ".dse" / "dse.sqlite"
    db = sqlite3.connect(db_path)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    kept = db.execute("SELECT id, number, config_hash FROM trials WHERE status = 'completed'"
                      " AND campaign_id = 1").fetchall()
    assert {1, 2} <= {number for _, number, _ in kept}
    db.close()

    for fill in (small_disk / ".dse").rglob("fill"):
        fill.unlink()
    again = run_dse(project, "run", str(campaign), timeout=120)

    # With room again the campaign finishes: the run resumed if the full disk left it
    # unfinished, or a new one reusing what was recorded if it was recorded failed.
    assert again.returncode == 0, again.stderr
    db = sqlite3.connect(db_path)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    (last, status), *_ = db.execute("SELECT id, status FROM campaigns ORDER BY id DESC")
    assert status == "completed"
    hashes = db.execute("SELECT DISTINCT config_hash FROM trials WHERE campaign_id = ?"
                        " AND status IN ('completed', 'cached')", (last,)).fetchall()
    assert len(hashes) == 6
    still = db.execute("SELECT id, number, config_hash FROM trials WHERE id IN"
                       f" ({','.join(str(row) for row, _, _ in kept)}) AND status = 'completed'")
    assert sorted(still.fetchall()) == sorted(kept)
