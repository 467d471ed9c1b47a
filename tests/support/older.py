"""Records as an earlier dse wrote them, for the migration tests (the storage contract's
``older_record``)."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from dse.model._states import TrialStatus
from dse.record._batch import Batch
from dse.record.sqlite import Store

if TYPE_CHECKING:
    from pathlib import Path

    from dse.record import Storage


def schema_8(path: Path) -> tuple[int, list[int]]:
    """A record as dse wrote it with schema 8 (ids counted by each controller, no claims):
    one run of three trials; the run's id and the trials' ids."""
    store = Store(path)
    run, rows = _three_trials(store)
    store.close()
    as_schema_8(path)
    return run, rows


def _three_trials(store: Storage) -> tuple[int, list[int]]:
    """One run of three completed trials written to *store*."""
    run = store.create_campaign(name="old", source=None, spec={}, agent="list==1",
                                backend="probe==1", mode="rolling", max_parallelism=1, now=1.0)
    batch, rows = Batch(), []
    for number in (1, 2, 3):
        rows.append(store.new_trial_id())
        batch.add_trial(row=rows[-1], campaign=run, number=number, proposal=number, wave=1,
                        config_hash=f"h{number}", params_json="{}",
                        status=TrialStatus.COMPLETED, created_at=1.0, ended_at=2.0,
                        metrics={"value": 1.0}, score=1.0)
    store.commit(batch)
    return run, rows


def as_schema_8(path: Path) -> None:
    """Make the record at *path* what dse wrote with schema 8: ids counted by each
    controller, no claims."""
    db = sqlite3.connect(path)
    try:
        db.execute("DROP TABLE counters")
        db.execute("DROP TABLE claims")
        db.execute("UPDATE meta SET value='8' WHERE key='schema_version'")
        db.commit()
    finally:
        db.close()


def postgres_schema_17(url: str, workspace: Path) -> tuple[int, list[int]]:
    """A PostgreSQL record as dse wrote it with schema 17 (no leases): one run of three
    trials; the run's id and the trials' ids."""
    import psycopg

    from dse.record.postgres import PostgresStore

    store = PostgresStore(url, workspace)
    run, rows = _three_trials(store)
    store.close()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("DROP TABLE leases")
        db.execute("UPDATE meta SET value='17' WHERE key='schema_version'")
    return run, rows
