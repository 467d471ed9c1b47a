"""A Store's wait for a record another connection holds, on real SQLite files: a holder that
runs is named once the wait has lasted a while, the wait ends when it lets go; a lock held by
another connection of this very process (which no wait of this thread can see released) is
waited on for a bound, then refused. (A stopped holder, and real controllers:
``tests/backend_local/test_busy_record.py``.)"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dse
from dse.model._errors import StorageError
from dse.record import _busy
from dse.record._batch import Batch

pytestmark = pytest.mark.skipif(not Path("/proc/locks").exists(),
                                reason="needs Linux's /proc/locks")

HOLDER = r"""
import os, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
open(sys.argv[2] + ".held", "w").close()
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.05)
db.execute("COMMIT")
"""


def a_change(store: dse.Store) -> Batch:
    batch = Batch()
    batch.add_event(campaign=store.create_campaign(
        name="c", source=None, spec={}, agent="a", backend="b", mode="waves",
        max_parallelism=1, now=0.0), trial=None, at=0.0, kind="note", data={})
    return batch


def test_a_running_holder_is_named_after_a_while_and_the_wait_ends_when_it_lets_go(
    tmp_path: Path,
) -> None:
    path, release = tmp_path / "dse.sqlite", tmp_path / "release"
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        release.touch()  # the holder lets go once the wait is said

    store = dse.Store(path, say=say)
    batch = a_change(store)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(release)])
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{release}.held").exists():
            assert time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.05)
        command = Path(f"/proc/{holder.pid}/comm").read_text().strip()  # python, python3...
        started = time.monotonic()
        store.commit(batch)  # waits, names the holder, goes on
        assert time.monotonic() - started >= _busy.SAY_AFTER_S
    finally:
        holder.wait(timeout=60)
        store.close()
    assert len(said) == 2, said
    assert f"is held by {command} (pid {holder.pid}, running) for" in said[0], said
    assert said[0].endswith("s; waiting for it"), said
    assert said[1].startswith("record free again after "), said


def test_a_lock_held_by_this_very_process_is_waited_on_for_a_bound_then_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_busy, "SELF_WAIT_S", 2.0)
    path = tmp_path / "dse.sqlite"
    said: list[str] = []
    store = dse.Store(path, say=said.append)
    batch = a_change(store)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # this process, another connection
    try:
        with pytest.raises(StorageError, match="database is locked"):
            store.commit(batch)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert said == []  # nobody else to name, nothing to wait for
    store.commit(batch)  # the batch kept: written once the lock is free
    assert [e.kind for e in store.reads.events(1)] == ["note"]
    store.close()
