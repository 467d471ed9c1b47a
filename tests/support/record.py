"""The record as its SQLite file holds it, read with the ``sqlite3`` module as a user could:
rows addressed by column name, values as stored (a status's text, a JSON column's text).

Tests that check what a run wrote read it here, independently of :class:`dse.Store`'s typed
reads (``tests/core/record/test_store_reads.py`` checks those against the same file); and
:func:`live`, a campaign's controller as the record and the workspace see it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dse

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dse.record import Storage


class RecordFile:
    """The SQLite file of a workspace's record."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """The rows *sql* selects (a connection of its own, closed after)."""
        db = sqlite3.connect(self.path, timeout=30.0)
        try:
            db.row_factory = sqlite3.Row
            return db.execute(sql, params).fetchall()
        finally:
            db.close()

    def campaigns(self) -> list[sqlite3.Row]:
        return self.rows("SELECT * FROM campaigns ORDER BY id")

    def trials(self, campaign_id: int) -> list[sqlite3.Row]:
        return self.rows(
            "SELECT * FROM trials WHERE campaign_id = ? ORDER BY number", (campaign_id,))

    def attempts(self, campaign_id: int) -> list[sqlite3.Row]:
        return self.rows(
            "SELECT a.* FROM attempts a JOIN trials t ON a.trial_id = t.id"
            " WHERE t.campaign_id = ? ORDER BY t.number, a.attempt", (campaign_id,))

    def events(self, campaign_id: int, kind: str | None = None) -> list[sqlite3.Row]:
        if kind is None:
            return self.rows(
                "SELECT * FROM events WHERE campaign_id = ? ORDER BY id", (campaign_id,))
        return self.rows("SELECT * FROM events WHERE campaign_id = ? AND kind = ? ORDER BY id",
                         (campaign_id, kind))

    def agent_log(self, campaign_id: int) -> list[sqlite3.Row]:
        return self.rows(
            "SELECT * FROM agent_log WHERE campaign_id = ? ORDER BY id", (campaign_id,))


def record(store: dse.Store) -> RecordFile:
    """The file *store* writes."""
    return RecordFile(store.path)


@contextlib.contextmanager
def live(store: Storage, campaign: str) -> Iterator[None]:
    """*campaign*'s controller lives while the block runs: it holds the campaign's lock file
    and its lease, as ``dse run`` does."""
    from dse.record._lock import CampaignLock

    with CampaignLock(store.workspace, campaign):
        store.take_lease(campaign, {"host": "elsewhere", "pid": 1}, 60.0)
        try:
            yield
        finally:
            store.release_lease(campaign)


UNENDED = frozenset({dse.TrialStatus.PENDING, dse.TrialStatus.RUNNING, dse.TrialStatus.CANCELLED})
"""Where a trial is before its outcome (a cancelled one too: a later run resumes it)."""


def ended_trials(workspace: Path, url: str | None = None) -> dict[str, tuple[str, list[int]]]:
    """The trials of the record of *workspace* (or of the database *url*) that reached an
    outcome, by name (``<campaign>-<run>-<number>``), each with its status and the steps of
    its learning curve (a step reported again by a later attempt, once)."""
    from dse.record._open import reader

    store = reader(workspace, url)
    try:
        out = {}
        for run in store.reads.campaigns():
            trials = [t for t in store.reads.trials(run.id) if t.status not in UNENDED]
            curves = store.stops.trial_progress([t.id for t in trials])
            for t in trials:
                steps = sorted({p.step for p in curves.get(t.id, [])})
                out[f"{run.name}-{run.id}-{t.number}"] = (t.status.value, steps)
        return out
    finally:
        store.close()
