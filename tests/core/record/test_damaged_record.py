"""A damaged record — truncated, a page overwritten with garbage, its header overwritten, a
file that is not SQLite at all — is refused in one line (exit 5) before anything is written
to it, by every command; ``dse doctor`` says what is damaged and what still reads, and
``--salvage`` writes a new record of it.

Real ``dse`` subprocesses on real SQLite files: a record a real ``dse run`` wrote, grown with
more trials through :class:`dse.Store`, then damaged on disk as a failing disk, a full disk
or a bad copy would.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import dse
from dse.record._batch import Batch
from support.cli import run_dse, write_plugin
from support.probe import probe_campaign

if TYPE_CHECKING:
    import subprocess

CAMPAIGN = probe_campaign(high=100000)

MORE = 3000
"""Trials added to the run, so that the trials table spans many pages."""

READS: tuple[tuple[str, ...], ...] = (
    ("status",), ("report",), ("show", "demo:1"), ("show", f"demo:{MORE}"), ("export", "demo"))
WRITES: tuple[tuple[str, ...], ...] = (
    ("invalidate", "--trial", "demo:1", "--reason", "bad"), ("run", "campaign.toml"))


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose record a real run wrote (3 trials), with :data:`MORE` trials added."""
    project = write_plugin(tmp_path_factory.mktemp("sound"))
    (project / "campaign.toml").write_text(CAMPAIGN)
    proc = run_dse(project, "run", "campaign.toml", timeout=120)
    assert proc.returncode == 0, proc.stderr
    store = dse.Store(project / ".dse" / "dse.sqlite")
    try:
        batch = Batch()
        for number in range(4, MORE + 1):
            batch.add_trial(row=store.new_trial_id(), campaign=1, number=number,
                            proposal=number, wave=number, config_hash=f"h{number}",
                            params_json=json.dumps({"x": number}),
                            status=dse.TrialStatus.COMPLETED, created_at=0.0)
        store.commit(batch)
    finally:
        store.close()
    return project


def copy(sound: Path, where: Path) -> Path:
    shutil.copytree(sound, where, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    return where / ".dse" / "dse.sqlite"


def trials_leaf(db_path: Path) -> int:
    """A page in the middle of the trials table's leaves."""
    db = sqlite3.connect(db_path)
    try:
        pages = [r[0] for r in db.execute(
            "SELECT pageno FROM dbstat WHERE name = 'trials' AND pagetype = 'leaf'"
            " ORDER BY pageno")]
    finally:
        db.close()
    return int(pages[len(pages) // 2])


def overwrite_page(db_path: Path, page: int) -> None:
    with db_path.open("r+b") as handle:
        handle.seek((page - 1) * 4096)
        handle.write(random.Random(page).randbytes(4096))


def damage(db_path: Path, how: str) -> None:
    size = db_path.stat().st_size
    if how == "truncated":
        with db_path.open("r+b") as handle:
            handle.truncate(size // 2)
    elif how == "a trials page overwritten":
        overwrite_page(db_path, trials_leaf(db_path))
    elif how == "page 2 overwritten":
        overwrite_page(db_path, 2)
    elif how == "header overwritten":
        with db_path.open("r+b") as handle:
            handle.write(random.Random(0).randbytes(100))
    elif how == "not SQLite":
        db_path.write_text("id,name\n1,not a database\n" * 200)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def refused(proc: subprocess.CompletedProcess[str], db: str) -> None:
    """One error line naming the record as damaged, exit 5."""
    assert proc.returncode == 5, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "internal error" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dse: error: ")]
    assert len(errors) == 1, proc.stderr
    assert f"{db}: the record is damaged (" in errors[0], errors[0]
    assert "nothing is written to it; `dse doctor --workspace" in errors[0], errors[0]


@pytest.mark.parametrize("how", ["truncated", "page 2 overwritten", "header overwritten",
                                 "not SQLite"])
def test_a_record_damaged_where_every_open_sees_it_is_refused_by_every_command(
    sound: Path, tmp_path: Path, how: str,
) -> None:
    db_path = copy(sound, tmp_path / "p")
    damage(db_path, how)
    before = digest(db_path)
    for args in (*READS, *WRITES):
        refused(run_dse(tmp_path / "p", *args), "dse.sqlite")
    assert digest(db_path) == before  # not a byte written: no new run inside it


def test_a_damaged_trials_page_is_refused_by_what_meets_it_and_by_every_writer(
    sound: Path, tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    db_path = copy(sound, root)
    damage(db_path, "a trials page overwritten")
    before = digest(db_path)
    for args in WRITES:  # a writer checks every page first (quick_check)
        refused(run_dse(root, *args), "dse.sqlite")
    refused(run_dse(root, "export", "demo"), "dse.sqlite")  # it reads every trial
    for args in READS:  # a reader that does not meet the page reads on
        proc = run_dse(root, *args)
        assert proc.returncode in (0, 5), proc.stderr
        if proc.returncode == 5:
            refused(proc, "dse.sqlite")
    assert digest(db_path) == before


def test_doctor_says_what_is_damaged_and_salvage_keeps_what_reads(
    sound: Path, tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    db_path = copy(sound, root)
    assert run_dse(root, "doctor").returncode == 0  # sound
    damage(db_path, "a trials page overwritten")
    before = digest(db_path)

    proc = run_dse(root, "doctor", "--json")
    assert proc.returncode == 5, proc.stderr
    found = json.loads(proc.stdout)
    assert found["state"] == "damaged", found
    assert found["problems"], found
    tables = {t["name"]: t for t in found["tables"]}
    kept = tables["trials"]["rows"]
    assert 0 < kept < MORE
    assert found["trials"] == {"read": kept, "counted": MORE}
    assert len(tables["trials"]["lost"]) == 1, tables["trials"]
    assert tables["campaigns"] == {"name": "campaigns", "rows": 1, "lost": []}
    text = run_dse(root, "doctor")
    assert text.returncode == 5
    assert f"trials: {kept:,} can be saved (its summaries count {MORE:,})" in text.stdout
    assert "--salvage NEW.sqlite" in text.stdout

    proc = run_dse(root, "doctor", "--salvage", "new.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote new.sqlite: a record of what read ({kept:,} trial(s)" in proc.stdout
    assert digest(db_path) == before  # the damaged file is left as it is
    # The new record is sound and reads as any: its summaries count what it holds.
    saved = tmp_path / "saved" / ".dse"
    saved.mkdir(parents=True)
    (root / "new.sqlite").rename(saved / "dse.sqlite")
    db = sqlite3.connect(saved / "dse.sqlite")
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT COUNT(*) FROM trials").fetchone() == (kept,)
        assert db.execute("SELECT SUM(trials) FROM run_tallies").fetchone() == (kept,)
    finally:
        db.close()
    status = run_dse(tmp_path, "status", "--workspace", str(saved), "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)[0]["trials"] == kept
    shown = run_dse(tmp_path, "show", "demo:1", "--workspace", str(saved))
    assert shown.returncode == 0, shown.stderr  # the real run's trials are kept
    again = run_dse(root, "doctor", "--salvage", str(saved / "dse.sqlite"))
    assert again.returncode == 2
    assert "the file exists" in again.stderr


def test_a_salvage_keeps_what_reads_when_the_schema_version_is_lost(
    sound: Path, tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    copy(sound, root)
    damage(root / ".dse" / "dse.sqlite", "page 2 overwritten")  # the table meta
    proc = run_dse(root, "doctor", "--salvage", "new.sqlite")
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(root / "new.sqlite")
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT COUNT(*) FROM trials").fetchone() == (MORE,)
        (version,) = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    finally:
        db.close()
    assert version == str(dse.record.sqlite.SCHEMA_VERSION)  # migrated from the oldest it knows


def test_doctor_of_a_file_that_is_not_sqlite_says_so_and_saves_nothing(
    sound: Path, tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    copy(sound, root)
    damage(root / ".dse" / "dse.sqlite", "not SQLite")
    proc = run_dse(root, "doctor")
    assert proc.returncode == 5
    assert "not a SQLite file" in proc.stdout
    assert "nothing to save" in proc.stdout
    proc = run_dse(root, "doctor", "--salvage", "new.sqlite")
    assert proc.returncode == 5, proc.stderr
    assert "nothing to save" in proc.stderr
    assert not (root / "new.sqlite").exists()


def test_an_empty_record_is_read_as_no_record_and_run_as_a_new_one(
    sound: Path, tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    db_path = copy(sound, root)
    db_path.write_bytes(b"")
    for args in READS:  # one line, and the file stays empty (no schema written into it)
        proc = run_dse(root, *args)
        assert proc.returncode == 2, proc.stderr
        assert "the record is empty (0 bytes)" in proc.stderr, proc.stderr
    assert db_path.stat().st_size == 0
    doctor = run_dse(root, "doctor")
    assert doctor.returncode == 0
    assert "empty (0 bytes)" in doctor.stdout
    # docs/record.md, "The workspace": an empty file is a new record to `dse run`.
    assert run_dse(root, "run", "campaign.toml").returncode == 0


def test_a_record_still_being_made_is_no_record_yet_and_a_foreign_file_is_not_one(
    tmp_path: Path,
) -> None:
    # What a reading command meets while a `dse run` starting in the same moment has made
    # the file but not yet its tables (seen in CI: `dse status` polled at that instant).
    write_plugin(tmp_path)
    (tmp_path / ".dse").mkdir()
    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    db.execute("PRAGMA journal_mode=WAL")
    status = run_dse(tmp_path, "status", "--workspace", ".dse")
    assert status.returncode == 2, status.stderr
    assert "no dse record here yet" in status.stderr, status.stderr
    db.execute("CREATE TABLE other (a)")
    db.commit()
    status = run_dse(tmp_path, "status", "--workspace", ".dse")
    db.close()
    assert status.returncode == 2, status.stderr
    assert "not a dse record" in status.stderr, status.stderr
