"""Several controllers on one record: row ids come from the record, configs are claimed in it.

Two (or more) stores open the same record, as the controllers of two campaigns do — the
workspace's SQLite file, or a PostgreSQL database (the tests taking ``opener`` run on both);
some tests use separate processes.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import dse
from dse import TrialStatus
from dse.record import sqlite
from dse.record._batch import Batch
from dse.record._open import writer
from support.older import as_schema_8
from support.postgres import database
from support.record import live

if TYPE_CHECKING:
    from collections.abc import Callable

    from dse.record import Storage


def new_run(store: dse.Store, name: str) -> int:
    return store.create_campaign(name=name, source=None, spec={}, agent="none",
                                 backend="none", mode="waves", max_parallelism=1, now=0.0)


def add_trials(store: dse.Store, run: int, first: int, count: int, *,
               prefix: str = "h") -> list[int]:
    """Commit *count* running trials of *run* (numbers from *first*); return their rows."""
    batch = Batch()
    rows = []
    for number in range(first, first + count):
        row = store.new_trial_id()
        rows.append(row)
        batch.add_trial(row=row, campaign=run, number=number, proposal=number, wave=1,
                        config_hash=f"{prefix}-{run}-{number}", params_json="{}",
                        status=TrialStatus.RUNNING, created_at=0.0)
        batch.add_attempt(row=store.new_attempt_id(), trial=row, attempt=1, backend="none",
                          state=dse.AttemptState.SUBMITTING, submitted_at=0.0)
    store.commit(batch)
    return rows


def test_two_stores_on_one_file_hand_out_disjoint_ids_and_both_commit(
    tmp_path: Path, opener: Callable[[Path], Storage]
) -> None:
    first, second = opener(tmp_path), opener(tmp_path)
    try:
        a, b = new_run(first, "a"), new_run(second, "b")
        rows: list[int] = []
        # Interleaved passes, each Store numbering from what it reserved: never a collision.
        for number in range(1, 400, 50):
            rows += add_trials(first, a, number, 50)
            rows += add_trials(second, b, number, 50)
        assert len(rows) == len(set(rows)) == 800
        assert {len(first.reads.trials(a)), len(second.reads.trials(b))} == {400}
        assert len({a.id for a in first.reads.attempts(a)} | {a.id for a in
                   first.reads.attempts(b)}) == 800
    finally:
        first.close()
        second.close()
    if not isinstance(first, dse.Store):
        return
    db = sqlite3.connect(tmp_path / "dse.sqlite")
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()


RESERVER = r"""
import sys
from dse.record._open import writer
store = writer(sys.argv[1], sys.argv[3] or None)
ids = [store.new_trial_id() for _ in range(int(sys.argv[2]))]
ids += [-store.new_attempt_id() for _ in range(int(sys.argv[2]))]
print(" ".join(map(str, ids)))
"""


def test_processes_reserving_ids_at_once_never_share_one(
    tmp_path: Path, opener: Callable[[Path], Storage], record: str | None
) -> None:
    opener(tmp_path).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", RESERVER, str(tmp_path), "3000", record or ""],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    seen: list[int] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        seen += [int(word) for word in out.split()]
    assert len(seen) == len(set(seen)) == 4 * 6000


def test_ids_reserved_start_past_rows_written_without_the_counter(tmp_path: Path) -> None:
    path = tmp_path / "dse.sqlite"
    store = dse.Store(path)
    run = new_run(store, "a")
    store.close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO trials(id, campaign_id, number, proposal, wave, config_hash,"
               " params, status, created_at) VALUES (5000, ?, 1, 1, 1, 'x', '{}', 'running', 0)",
               (run,))
    db.commit()
    db.close()
    store = dse.Store(path)
    try:
        assert store.new_trial_id() > 5000
    finally:
        store.close()


def test_a_record_of_schema_8_is_migrated_and_its_ids_continue_past_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dse.sqlite"
    store = dse.Store(path)
    run = new_run(store, "old")
    rows = add_trials(store, run, 1, 10)
    store.close()
    as_schema_8(path)

    first, second = dse.Store(path), dse.Store(path)  # the first migrates it in place
    try:
        assert len(first.reads.trials(run)) == 10
        fresh = {first.new_trial_id(), second.new_trial_id()}
        assert min(fresh) > max(rows)
        assert len(fresh) == 2
    finally:
        first.close()
        second.close()
    db = sqlite3.connect(path)
    try:
        (version,) = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    finally:
        db.close()
    assert int(version) == sqlite.SCHEMA_VERSION


def test_a_config_claimed_by_a_live_controller_is_waited_on_then_taken_over(
    tmp_path: Path, opener: Callable[[Path], Storage]
) -> None:
    first, second = opener(tmp_path), opener(tmp_path)
    try:
        with live(first, "a"):
            a_row = first.new_trial_id()
            assert first.claim({"h1": a_row}, "a", 0.0)["h1"].mine
            b_row = second.new_trial_id()
            waited = second.claim({"h1": b_row}, "b", 0.0)["h1"]
            assert (waited.mine, waited.row, waited.result) == (False, a_row, None)
            # Claiming again for the same trial keeps it.
            assert first.claim({"h1": a_row}, "a", 0.0)["h1"].mine
        # Campaign a's controller is gone (its lock is released): its claim is stale.
        taken = second.claim({"h1": b_row}, "b", 0.0)["h1"]
        assert (taken.mine, taken.row) == (True, b_row)
    finally:
        first.close()
        second.close()


def test_a_claim_ends_with_its_trial_and_its_result_is_reused(
    tmp_path: Path, opener: Callable[[Path], Storage]
) -> None:
    first, second = opener(tmp_path), opener(tmp_path)
    try:
        with live(first, "a"):
            run = new_run(first, "a")
            (row,) = add_trials(first, run, 1, 1)
            assert first.claim({f"h-{run}-1": row}, "a", 0.0)[f"h-{run}-1"].mine
            batch = Batch()
            batch.end_trial(row=row, status=TrialStatus.COMPLETED, metrics={"value": 2.0},
                            score=2.0, ended_at=1.0)
            first.commit(batch)
            reused = second.claim({f"h-{run}-1": second.new_trial_id()}, "b", 0.0)[f"h-{run}-1"]
        assert not reused.mine
        assert reused.row == row
        assert reused.result is not None
        assert reused.result.metrics == {"value": 2.0}
        assert second.reads.rows("SELECT COUNT(*) FROM claims") == [(0,)]
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("outcome", [TrialStatus.CANCELLED, TrialStatus.INTERRUPTED])
def test_a_config_whose_trial_ended_without_a_reusable_result_is_claimed_anew(
    tmp_path: Path, outcome: TrialStatus, opener: Callable[[Path], Storage]
) -> None:
    first, second = opener(tmp_path), opener(tmp_path)
    try:
        with live(first, "a"):
            run = new_run(first, "a")
            (row,) = add_trials(first, run, 1, 1)
            digest = f"h-{run}-1"
            first.claim({digest: row}, "a", 0.0)
            batch = Batch()
            batch.end_trial(row=row, status=outcome, ended_at=1.0)
            first.commit(batch)
            mine = second.claim({digest: (other := second.new_trial_id())}, "b", 0.0)[digest]
        assert (mine.mine, mine.row, mine.result) == (True, other, None)
    finally:
        first.close()
        second.close()


OPEN_AT_ONCE = """
import os, sys, time
from dse.record._open import writer
where, start, url = sys.argv[1], float(sys.argv[2]), sys.argv[3] or None
time.sleep(max(start - time.time(), 0.0))
writer(where, url).close()
"""


def test_controllers_that_make_a_new_record_at_once_all_open_it(tmp_path: Path) -> None:
    """Two `dse run`s started together in a new workspace both make the record: the one that
    waited for the other's write lock finds the tables made (and adds no column twice); on
    PostgreSQL, the one that waited for the other's advisory lock."""
    for round_ in range(6):
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(database()) if round_ % 2 else None
            opened_at_once(tmp_path / f"ws-{round_}", url)


def opened_at_once(workspace: Path, url: str | None) -> None:
    """Four processes open the new record of *workspace* (or *url*) at once: all do, and
    it is made once."""
    start = time.time() + 1.0  # every process imported dse by then, even under load
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_AT_ONCE, str(workspace),
                               str(start), url or ""],
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errors = [proc.communicate(timeout=60)[1] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), errors
    store = writer(workspace, url)
    try:
        assert store.reads.campaigns() == []
        assert store.reads.rows("SELECT value FROM meta WHERE key='schema_version'") == [
            (str(sqlite.SCHEMA_VERSION),)]
    finally:
        store.close()
