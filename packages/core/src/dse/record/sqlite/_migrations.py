"""Bringing an older record up to date, one schema version at a time, in one transaction;
and rebuilding the summaries from the rows."""

from __future__ import annotations

import re
import sqlite3
from typing import TYPE_CHECKING

from dse.model._errors import StoreError
from dse.record.sql._schema import (
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    SUMMARY_TABLES,
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
            for statement in (*SCHEMA.split(";"), *SUMMARY_TABLES):
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
