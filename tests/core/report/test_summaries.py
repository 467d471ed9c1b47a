"""The summaries the record keeps as trials are written (schemas 11 and 12; each pass's commit
keeps them since schema 20) say what a scan of the rows says: after a run with failures, cache
hits and an invalidation, and after a record of schema 10 is migrated (its summaries rebuilt
from its rows)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from typing import TYPE_CHECKING, Any

import dse
from dse.report._report import run_detail
from dse.testing import ProbeScript

if TYPE_CHECKING:
    from pathlib import Path


def _script(params: dict[str, Any]) -> ProbeScript:
    x = params["x"]
    if x % 5 == 0:
        return ProbeScript(state=dse.JobState.FAILED, exit_code=3)
    return ProbeScript(passes=x % 2, metrics={"value": float(x % 7)})


def _scanned(db: Path, run: int) -> dict[str, Any]:
    """What the rows themselves say, read with sqlite3 alone."""
    conn = sqlite3.connect(db)
    try:
        trials = conn.execute("SELECT id, status, failure, cache_of, invalidation, score"
                              " FROM trials WHERE campaign_id = ?", (run,)).fetchall()
        ((dirs, wave),) = conn.execute(
            "SELECT SUM(cache_of IS NULL AND COALESCE(trial_dir, '') != ''), MAX(wave)"
            " FROM trials WHERE campaign_id = ?", (run,)).fetchall()
        ran = conn.execute(
            "SELECT a.ended_at - a.started_at FROM attempts a JOIN trials t ON t.id = a.trial_id"
            " WHERE t.campaign_id = ? AND a.started_at IS NOT NULL AND a.ended_at IS NOT NULL",
            (run,)).fetchall()
        spends = conn.execute(
            "SELECT a.spend FROM attempts a JOIN trials t ON t.id = a.trial_id"
            " WHERE t.campaign_id = ? AND a.spend IS NOT NULL", (run,)).fetchall()
        with_attempts = {row for (row,) in conn.execute("SELECT trial_id FROM attempts")}
    finally:
        conn.close()
    money = sum(json.loads(s)["wall_s"] for (s,) in spends)
    return {
        "counts": dict(Counter(status for _, status, *_ in trials)),
        "failures": dict(Counter(f for _, status, f, *_ in trials
                                 if f is not None and status != "cached")),
        "dispatched": sum(1 for row, _, _, cache_of, *_ in trials
                          if cache_of is None and row in with_attempts),
        "wall_s": money,
        "trial_dirs": dirs,
        "wave": wave,
        "attempt_s": round(sum(max(s, 0.0) for (s,) in ran), 6),
    }


def _summarized(store: dse.Store, run: int) -> dict[str, Any]:
    counts = store.reads.run_counts(run, lower_is_better=True)
    return {
        "counts": {s.value: n for s, n in store.reads.trial_counts(run).items()},
        "failures": store.summaries.failure_counts(run),
        "dispatched": store.reads.dispatched(run),
        "wall_s": store.reads.spend_total(run).wall_s,
        "trial_dirs": counts.dispatched,
        "wave": counts.wave,
        "attempt_s": round(store.reads.attempt_durations(run, last=1)[0], 6),
    }


def test_the_summaries_agree_with_the_rows_before_and_after_a_migration(run_campaign):
    proposals = [1, 2, 3, 5, 2, 10, 4, 7, 1, 5, 6, 8, 9, 3, 11]
    run = run_campaign(proposals, script=_script, max_parallelism=3, mode="rolling")
    store, campaign_id = run.store, run.result.campaign_id
    store.invalidate("trial", "probe-campaign:2", "bad input", 0.0,
                     trial_row=store.reads.find_trial("probe-campaign:2")[1].id)
    db = store.path
    assert _summarized(store, campaign_id) == _scanned(db, campaign_id)  # kept by the passes
    conn = sqlite3.connect(db)
    with conn:  # the probe's attempts take no time on its clock: give them some
        conn.execute("UPDATE attempts SET started_at = started_at - 0.25 * id"
                     " WHERE started_at IS NOT NULL")
    conn.close()
    store.rebuild_summaries()  # rows written outside a pass: the summaries built again
    before = run_detail(store, campaign_id)
    expected = _scanned(db, campaign_id)
    assert expected["counts"]["cached"] >= 3
    assert expected["failures"] == {"nonzero_exit": 2}
    assert expected["attempt_s"] > 0
    assert _summarized(store, campaign_id) == expected

    # A record of schema 10 had no summaries: the migration builds them from its rows.
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM run_tallies")
    conn.execute("DROP TABLE run_totals")
    for name in ("total_dispatched", "total_spend", "total_trial", "total_dirs",
                 "total_seconds"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")  # a schema-20 record has none
    conn.execute("UPDATE meta SET value = '10' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    migrated = dse.Store(db)
    try:
        assert _summarized(migrated, campaign_id) == expected
        after = run_detail(migrated, campaign_id)
    finally:
        migrated.close()
    assert after == before
    assert after.summary.effective == expected["counts"]["completed"] - 1  # one invalidated
    assert after.best is not None
    assert after.best.trial != 2
