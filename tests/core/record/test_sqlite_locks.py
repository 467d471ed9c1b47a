"""A record this process holds through SQLite is never opened and closed beside it.

POSIX locks belong to a process and a file: closing *any* descriptor of the file drops them
all. A second open of the record in a process that already has it (the campaign lock's
lease read, a reader thread, a store opened twice) must not read it with a plain ``open()``
and ``close()``: SQLite's shared lock would be gone, another process closing its last
connection would think itself the last, checkpoint and delete the ``-wal`` under this one's
feet, and this one would read "database disk image is malformed" (as three ask-tell
processes on one record did, under load)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

from dse.record._open import lease_state
from dse.record.sqlite import Store, header_damage, open_existing

if TYPE_CHECKING:
    from pathlib import Path

_LAST_CONNECTION = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("SELECT count(*) FROM meta").fetchone()
db.close()
"""


def _other_process_opens_and_closes(path: Path) -> None:
    subprocess.run([sys.executable, "-c", _LAST_CONNECTION, str(path)], check=True,
                   timeout=60)


def test_reopening_the_record_in_this_process_keeps_its_locks(tmp_path: Path) -> None:
    workspace = tmp_path / ".dse"
    store = Store(workspace / "dse.sqlite")
    try:
        wal = workspace / "dse.sqlite-wal"
        store.connection.execute("SELECT count(*) FROM meta").fetchone()
        assert wal.exists()
        # Every second open a controller or a Python caller makes of its own record.
        assert header_damage(workspace / "dse.sqlite") is None
        store.take_lease("c", {"host": "here", "pid": os.getpid(), "start": 0.0}, 600.0)
        assert lease_state(workspace, None, "c") is True
        assert lease_state(workspace, None, "nobody") is None
        open_existing(workspace).close()
        _other_process_opens_and_closes(workspace / "dse.sqlite")
        # The other process saw this one's shared lock: it was not the last connection,
        # so it neither checkpointed nor deleted the -wal this one reads through.
        assert wal.exists()
        store.connection.execute("SELECT count(*) FROM meta").fetchone()
    finally:
        store.close()


def test_a_record_no_connection_holds_is_still_checked_before_it_is_opened(
        tmp_path: Path) -> None:
    path = tmp_path / "dse.sqlite"
    Store(path).close()
    with path.open("r+b") as handle:
        handle.write(b"not a record at all")
    assert header_damage(path) == "not a SQLite file"
