"""Bringing an older record up to date, one schema version at a time, in one transaction;
and rebuilding the summaries from the rows."""

from __future__ import annotations

import re
import sqlite3
from typing import TYPE_CHECKING

from dse.model._errors import StoreError
from dse.record.sqlite._schema import (
    BACKFILL_11,
    BACKFILL_12,
    BACKFILL_15,
    NEW_COLUMNS_16,
    NEW_COLUMNS_17,
    NEW_TABLES_7,
    NEW_TABLES_9,
    NEW_TABLES_10,
    NEW_TABLES_13,
    NEW_TABLES_14,
    SCHEMA,
    SCHEMA_VERSION,
    SUMMARIES,
    SUMMARIES_12,
    SUMMARIES_15,
)

if TYPE_CHECKING:
    from pathlib import Path


_ADD_COLUMN = re.compile(r"ALTER TABLE (?P<table>\w+) ADD COLUMN (?P<column>\w+)")


def bring_up_to_date(db: sqlite3.Connection, path: Path) -> None:
    """Make a new record's tables, or migrate one an older dse wrote to :data:`SCHEMA_VERSION`
    in place, in one write transaction; :class:`StoreError` for a version this dse does not
    read. The version is read again under the write lock: another controller may have made or
    migrated the record while this one waited for it (adding a column twice fails)."""
    if schema_version(db) == str(SCHEMA_VERSION):
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        found = schema_version(db)
        if found is None:
            for statement in (*SCHEMA.split(";"), *SUMMARIES, *SUMMARIES_12,
                              *SUMMARIES_15):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                       (str(SCHEMA_VERSION),))
            db.execute("INSERT OR IGNORE INTO counters(name, next) VALUES ('trials', 1),"
                       " ('attempts', 1)")
        elif int(found) in MIGRATIONS:
            version = int(found)
            while version != SCHEMA_VERSION:
                for statement in MIGRATIONS[version]:
                    if statement.strip() and not _has_column(db, statement):
                        db.execute(statement)
                version += 1
            db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(version),))
        elif int(found) != SCHEMA_VERSION:
            raise StoreError(f"{path}: schema version {found}, this dse reads {SCHEMA_VERSION}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def schema_version(db: sqlite3.Connection) -> str | None:
    """The record's schema version, or ``None`` when it has none yet (a new file)."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.OperationalError:
        return None
    return None if row is None else str(row[0])


def _has_column(db: sqlite3.Connection, statement: str) -> bool:
    """Whether *statement* adds a column the table has already (SQLite has no ``ADD COLUMN
    IF NOT EXISTS``): a migration then leaves it be."""
    added = _ADD_COLUMN.match(statement.strip())
    return added is not None and added["column"] in {
        row[1] for row in db.execute(f"PRAGMA table_info({added['table']})")}


MIGRATIONS: dict[int, tuple[str, ...]] = {
    3: ("ALTER TABLE attempts ADD COLUMN usage TEXT",),
    4: ("ALTER TABLE attempts ADD COLUMN spend TEXT",),
    5: ("ALTER TABLE trials ADD COLUMN data_version TEXT",
        "ALTER TABLE trials ADD COLUMN data_version_read TEXT"),
    6: ("ALTER TABLE trials ADD COLUMN dependencies TEXT",
        "ALTER TABLE trials ADD COLUMN replaces INTEGER REFERENCES trials(id)",
        "ALTER TABLE trials ADD COLUMN invalidation INTEGER REFERENCES invalidations(id)",
        *NEW_TABLES_7.split(";")),
    7: ("ALTER TABLE attempts ADD COLUMN expected_s REAL",),
    8: (*NEW_TABLES_9.split(";"),
        "INSERT OR IGNORE INTO counters(name, next)"
        " SELECT 'trials', COALESCE(MAX(id), 0) + 1 FROM trials",
        "INSERT OR IGNORE INTO counters(name, next)"
        " SELECT 'attempts', COALESCE(MAX(id), 0) + 1 FROM attempts"),
    9: tuple(NEW_TABLES_10.split(";")),
    10: (*SUMMARIES, *BACKFILL_11),
    11: (*SUMMARIES_12, *BACKFILL_12),
    12: tuple(NEW_TABLES_13.split(";")),
    13: tuple(NEW_TABLES_14.split(";")),
    14: (*SUMMARIES_15, *BACKFILL_15),
    15: tuple(NEW_COLUMNS_16.split(";")),
    16: NEW_COLUMNS_17,
}


"""Statements that take a record from schema version *key* to *key* + 1."""


OLDEST_SCHEMA = min(MIGRATIONS)


"""The oldest schema version this dse migrates. Every step leaves what a record has already
as it is (a column there, a table there, a summary rebuilt whole), so a record whose version
cannot be read (``dse doctor --salvage``) is migrated from here."""


REBUILD = (*BACKFILL_11, *BACKFILL_12, *BACKFILL_15)
"""Every summary SQLite keeps as rows are written, built again from the rows (a summary of a
new schema adds its backfill here)."""
