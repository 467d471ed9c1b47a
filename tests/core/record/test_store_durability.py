"""The record survives a controller killed mid-transaction, in either journal mode.

A child process commits large batches through :meth:`dse.Store.commit` in a tight loop and
is SIGKILLed at random moments; after each kill the file must open as a dse record, pass
``PRAGMA integrity_check`` and still hold every batch the child saw committed.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dse
from dse.record import sqlite
from dse.record.sqlite import _files

BATCH = 200
KILLS = 10

WRITER = r"""
import os, sys
import dse
from dse import TrialStatus
from dse.record._batch import Batch

path, acks, batch_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
if path.startswith("postgresql://"):
    from dse.record.postgres import PostgresStore
    store = PostgresStore(path, ".dse")
else:
    store = dse.Store(path)
run = store.create_campaign(
    name="durability", source=None, spec={}, agent="none", backend="none", mode="waves",
    max_parallelism=1, now=0.0,
)
committed = sum(len(store.reads.trials(r.id)) for r in store.reads.campaigns())
ack = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
payload = "p" * 200
number = 0
previous = []
while True:
    batch = Batch()
    # Each pass ends the previous batch's trials and starts new ones, so a transaction both
    # rewrites existing pages and adds new ones.
    for row_id in previous:
        batch.end_trial(row=row_id, status=TrialStatus.COMPLETED, metrics={"value": 1},
                        score=1.0, ended_at=1.0)
    previous = []
    for _ in range(batch_size):
        number += 1
        row_id = store.new_trial_id()
        previous.append(row_id)
        batch.add_trial(row=row_id, campaign=run, number=number, proposal=number, wave=1,
                        config_hash=f"hash-{run}-{number}", params_json=payload,
                        status=TrialStatus.RUNNING, created_at=0.0)
    batch.add_event(campaign=run, trial=None, at=0.0, kind="pass", data={"p": payload})
    store.commit(batch)
    committed += batch_size
    os.write(ack, b"%d\n" % committed)
"""


def last_ack(path: Path) -> int | None:
    """The last row count the writer reported committed (complete lines only)."""
    if not path.exists():
        return None
    lines = path.read_bytes().split(b"\n")[:-1]
    return int(lines[-1]) if lines else None


def killed_writer(target: str, acks: Path, rng: random.Random, cwd: Path) -> int:
    """Start the writer on the record *target*, kill it at a random moment once it has
    committed a pass; the last count it acked (in *acks*)."""
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, target, str(acks), str(BATCH)],
        env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd,
    )
    deadline = time.monotonic() + 60
    while last_ack(acks) is None and writer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert writer.poll() is None, writer.stderr.read() if writer.stderr else ""
    time.sleep(rng.uniform(0.0, 0.06))
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    assert writer.stderr is not None
    writer.stderr.close()
    acked = last_ack(acks)
    assert acked is not None
    return acked


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_a_kill_during_a_transaction_leaves_a_sound_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv(sqlite.JOURNAL_ENV, mode)
    db = tmp_path / "dse.sqlite"
    rng = random.Random(f"durability-{mode}")
    rows = 0
    hot_journals = 0
    for kill in range(KILLS):
        acked = killed_writer(str(db), tmp_path / f"acks-{kill}", rng, tmp_path)
        if (tmp_path / "dse.sqlite-journal").exists():
            hot_journals += 1

        store = dse.Store(db)  # opens as a dse record (rolling back a hot journal)
        try:
            assert store.journal_mode == mode
        finally:
            store.close()
        raw = sqlite3.connect(db)
        raw.row_factory = sqlite3.Row
        try:
            assert [tuple(r) for r in raw.execute("PRAGMA integrity_check")] == [("ok",)]
            (now,) = raw.execute("SELECT COUNT(*) FROM trials").fetchone()
            per_run = raw.execute(
                "SELECT campaign_id, COUNT(*) AS n, SUM(status = 'running') AS running"
                " FROM trials GROUP BY campaign_id"
            ).fetchall()
        finally:
            raw.close()
        # Nothing committed is lost; at most the batch in flight at the kill got through.
        assert acked <= now <= acked + BATCH, (kill, acked, now)
        assert now >= rows
        rows = now
        # Every pass is all or nothing: whole batches, and the ends of the previous batch
        # landed together with the next one.
        for run in per_run:
            assert run["n"] % BATCH == 0, dict(run)
            assert run["running"] == BATCH, dict(run)
    assert rows >= KILLS * BATCH
    if mode == "delete":
        # The kills did land inside transactions: SQLite found hot journals to roll back.
        assert hot_journals > 0
        assert not (tmp_path / "dse.sqlite-wal").exists()


def test_the_journal_override_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sqlite.JOURNAL_ENV, "memory")
    with pytest.raises(dse.ConfigError, match="DSE_SQLITE_JOURNAL='memory': expected"):
        dse.Store(tmp_path / "dse.sqlite")


def test_a_local_disk_gets_wal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sqlite.JOURNAL_ENV, raising=False)
    fstype = dse.filesystem_type(tmp_path)
    if fstype in sqlite.NETWORK_FILESYSTEMS:
        pytest.skip(f"the temporary directory is on {fstype}, a network file system")
    store = dse.Store(tmp_path / "dse.sqlite")
    try:
        assert store.journal_mode == "wal"
        store.create_campaign(
            name="c", source=None, spec={}, agent="a", backend="b", mode="waves",
            max_parallelism=1, now=0.0,
        )
        assert (tmp_path / "dse.sqlite-wal").exists()
    finally:
        store.close()


MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime shared:5 - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
40 27 0:45 / /home rw,relatime shared:20 - nfs4 filer:/export/home rw,vers=4.2,addr=10.0.0.2
41 40 0:46 / /home/alice/scratch\040space rw master:3 - lustre 10.0.0.1@tcp:/scratch rw
42 27 0:47 / /home2 rw,relatime - ext4 /dev/vdb rw
43 27 0:48 / /mnt rw,relatime - tmpfs tmpfs rw
44 43 0:49 / /mnt rw,relatime - xfs /dev/vdc rw
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/home/alice/project/.dse", ("/home", "nfs4")),
        ("/home", ("/home", "nfs4")),
        ("/home2/bob/.dse", ("/home2", "ext4")),
        ("/home/alice/scratch space/ws", ("/home/alice/scratch space", "lustre")),
        ("/mnt/data", ("/mnt", "xfs")),
        ("/var/tmp/ws", ("/", "ext4")),
    ],
)
def test_the_mount_table_names_the_file_system(path: str, expected: tuple[str, str]) -> None:
    assert sqlite.mount_of(path, MOUNTINFO) == expected


def test_a_network_file_system_gets_a_rollback_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(sqlite.JOURNAL_ENV, raising=False)
    workspace = (tmp_path / "home" / ".dse").resolve()
    table = tmp_path / "mountinfo"
    table.write_text(
        MOUNTINFO + f"50 27 0:60 / {workspace.parent} rw - nfs4 filer:/export/x rw\n"
    )
    monkeypatch.setattr(_files, "_MOUNTINFO", str(table))
    assert dse.filesystem_type(workspace) == "nfs4"
    store = dse.Store(workspace / "dse.sqlite")
    try:
        assert store.journal_mode == "delete"
        store.create_campaign(
            name="c", source=None, spec={}, agent="a", backend="b", mode="waves",
            max_parallelism=1, now=0.0,
        )
        assert not (workspace / "dse.sqlite-wal").exists()
    finally:
        store.close()


def test_the_file_system_of_the_repository_is_the_one_findmnt_names() -> None:
    findmnt = shutil.which("findmnt")
    if findmnt is None:
        pytest.skip("findmnt (util-linux) is not installed")
    here = Path(__file__).resolve().parent
    expected = subprocess.run(
        [findmnt, "-n", "-o", "FSTYPE", "--target", str(here)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert dse.filesystem_type(here) == expected
    assert expected not in sqlite.NETWORK_FILESYSTEMS


def test_a_record_of_schema_3_is_migrated_in_place_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "dse.sqlite"
    store = dse.Store(path)
    store.create_campaign(
        name="old", source=None, spec={}, agent="none", backend="none", mode="waves",
        max_parallelism=1, now=0.0,
    )
    store.close()
    # What dse 0.1 with schema 3 wrote: no usage or spend on attempts, no data versions,
    # no scores, invalidations, environments or trial links, no expected durations.
    db = sqlite3.connect(path)
    # Nor schema 11's and 12's summaries: their tables, the triggers that keep them, their
    # indexes; nor agent snapshots.
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
        db.execute(f"DROP TRIGGER {name}")
    for name in ("trials_invalid", "trials_cache_of", "trials_score", "trials_replaces",
                 "trials_open", "attempts_ended"):
        db.execute(f"DROP INDEX {name}")
    for table in ("run_tallies", "run_totals"):
        db.execute(f"DROP TABLE {table}")
    db.execute("ALTER TABLE attempts DROP COLUMN usage")
    db.execute("ALTER TABLE attempts DROP COLUMN spend")
    db.execute("ALTER TABLE attempts DROP COLUMN expected_s")
    for column in ("data_version", "data_version_read", "dependencies", "replaces",
                   "invalidation"):
        db.execute(f"ALTER TABLE trials DROP COLUMN {column}")
    for table in ("scores", "invalidations", "environments", "agent_snapshots"):
        db.execute(f"DROP TABLE {table}")
    db.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    db.commit()
    db.close()

    store = dse.Store(path)  # migrates the record in place
    try:
        names = [run.name for run in store.reads.campaigns()]
    finally:
        store.close()
    db = sqlite3.connect(path)
    try:
        columns = {row[1] for row in db.execute("PRAGMA table_info(attempts)")}
        trial_columns = {row[1] for row in db.execute("PRAGMA table_info(trials)")}
        snapshot_columns = {row[1] for row in db.execute("PRAGMA table_info(agent_snapshots)")}
        tables = {row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        (version,) = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    finally:
        db.close()
    assert {"usage", "spend", "expected_s"} <= columns
    assert {"data_version", "dependencies", "replaces", "invalidation"} <= trial_columns
    assert "unobserved" in snapshot_columns
    assert {"scores", "invalidations", "environments", "run_tallies", "run_totals"} <= tables
    assert int(version) == sqlite.SCHEMA_VERSION
    assert names == ["old"]


def test_a_record_from_a_newer_dse_is_refused_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "dse.sqlite"
    dse.Store(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(dse.StoreError, match=r"schema version 99, this dse reads \d+"):
        dse.Store(path)


def test_a_new_record_appears_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reader polling a workspace while `dse run` starts must never meet an empty file or a
    # file with no table: the schema is written aside, then linked into place.
    from dse.record.sqlite import _connection

    monkeypatch.delenv(sqlite.JOURNAL_ENV, raising=False)
    path = tmp_path / ".dse" / "dse.sqlite"
    seen: list[tuple[bool, list[str], str]] = []
    link = os.link

    def watching(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        db = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        try:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            mode = db.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            db.close()
        seen.append((Path(dst).exists(), tables, mode))
        link(src, dst)

    monkeypatch.setattr(_connection.os, "link", watching)
    store = dse.Store(path)
    try:
        assert len(seen) == 1
        existed, tables, mode = seen[0]
        assert not existed
        assert mode == "delete"  # no -wal beside the file made aside
        assert store.journal_mode == "wal"  # set once in place (a local disk)
        assert {"campaigns", "trials", "attempts", "meta"} <= set(tables)
        assert sorted(p.name for p in path.parent.iterdir() if ".new-" in p.name) == []
        assert store.reads.campaigns() == []
    finally:
        store.close()
    again = dse.Store(path)  # an existing record: opened, not made again
    again.close()
    assert len(seen) == 1


def test_a_kill_during_a_commit_leaves_postgres_whole(tmp_path: Path, postgres_url: str) -> None:
    """The same writer on a PostgreSQL record (a real server), killed at random moments:
    every pass it saw committed is there, and every pass is all or nothing."""
    from dse.record._open import reader

    rng = random.Random("durability-postgres")
    rows = 0
    for kill in range(KILLS):
        acked = killed_writer(postgres_url, tmp_path / f"acks-{kill}", rng, tmp_path)
        store = reader(tmp_path, postgres_url)
        try:
            (now,) = store.reads.rows("SELECT COUNT(*) FROM trials")[0]
            per_run = store.reads.rows(
                "SELECT campaign_id, COUNT(*), SUM(CASE WHEN status = 'running' THEN 1"
                " ELSE 0 END) FROM trials GROUP BY campaign_id")
        finally:
            store.close()
        assert acked <= now <= acked + BATCH, (kill, acked, now)
        assert now >= rows
        rows = now
        for run, n, running in per_run:
            assert n % BATCH == 0, (run, n)
            assert running == BATCH, (run, running)
    assert rows >= KILLS * BATCH
