"""``dse record copy SRC DST``: a record copied whole into another — a workspace's SQLite file
into a PostgreSQL database, or back — resumable, and checked row by row.

Every table of rows is copied in key order, a page per transaction, with its ids; a copy
stopped part way (Ctrl+C, a lost connection) goes on from the last page the target holds.
The summaries (``run_tallies``, ``run_totals``, ``stop_totals``) are then copied as they are,
in one transaction (rows written as they are change no summary: a pass's commit keeps them,
and a rebuild could differ in the last bit of a sum of floats added in another order). Last,
both records are read again: every table's row count and a digest of all its rows (each row's
SHA-256, summed: any order, any database) must agree; a record that differs is said table by
table and the command fails.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._errors import DseError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from dse.record.sql._rows import Connection
    from dse.record.sql._store import SqlStore

ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("campaigns", ("id",)),
    ("enqueued", ("id",)),
    ("invalidations", ("id",)),
    ("environments", ("digest",)),
    ("trials", ("id",)),
    ("attempts", ("id",)),
    ("events", ("id",)),
    ("agent_log", ("id",)),
    ("agent_snapshots", ("campaign_id",)),
    ("scores", ("id",)),
    ("progress", ("trial_id", "attempt", "step")),
    ("decisions", ("id",)),
    ("lineage", ("trial_id",)),
)
"""The tables of rows, in the order they are copied (what a row names comes first), with
their keys."""


SUMMARIES = ("run_tallies", "run_totals", "stop_totals")
"""The tables built from the rows: compared, never copied."""


PAGE = 5000
"""Rows per transaction."""


MARK = "copy_of"
"""The target's ``meta`` key naming the record it is a copy of (a copy resumed must be of
the same record)."""


class CopyError(DseError, RuntimeError):
    """The copy is refused (a live controller, a target holding another record) or its check
    failed (the message says which tables differ)."""


@dataclass(frozen=True, slots=True)
class TableCheck:
    """One table of both records: its rows' count and digest in each."""

    table: str
    rows: int
    same: bool
    target_rows: int


def identity(store: SqlStore) -> str:
    """What names the record *store* holds: its first run (id, name, when it was made)."""
    first = store.connection.execute(
        "SELECT id, name, created_at FROM campaigns ORDER BY id LIMIT 1").fetchone()
    return json.dumps(None if first is None else list(first))


def copy_record(source: SqlStore, target: SqlStore,
                said: Callable[[str], None] | None = None) -> list[TableCheck]:
    """Copy *source* into *target* (new, or a copy of *source* stopped part way), build the
    target's summaries, and check both; the check of every table."""
    live = source.connection.execute(
        "SELECT campaign FROM leases WHERE renewed_at + ttl_s >= dse_now()").fetchall()
    if live:
        raise CopyError(f"{source.where}: campaign {live[0][0]!r} is running (its lease is"
                        " fresh): copy a record no controller writes")
    mark = identity(source)
    found = target.connection.execute(
        "SELECT value FROM meta WHERE key = ?", (MARK,)).fetchone()
    if found is None and target.connection.execute(
            "SELECT 1 FROM campaigns LIMIT 1").fetchone() is not None:
        raise CopyError(f"{target.where}: the target holds runs already: copy into a new"
                        " record")
    if found is not None and str(found[0]) != mark:
        raise CopyError(f"{target.where}: the target is a copy of another record")
    if found is None:
        target.write(lambda db: db.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?)", (MARK, mark)))
    for table, key in ROWS:
        copied = _copy_table(source, target, table, key)
        if said is not None:
            said(f"{table}: {copied:,} row(s) copied")
    target.write(functools.partial(_summaries, source))
    target.after_copy()
    return check(source, target)


def _copy_table(source: SqlStore, target: SqlStore, table: str, key: tuple[str, ...]) -> int:
    """Copy the rows of *table* the target lacks, a page per transaction; how many."""
    columns = _columns(source.connection, table)
    keys = ", ".join(key)
    last = target.connection.execute(
        f"SELECT {keys} FROM {table} ORDER BY {', '.join(f'{k} DESC' for k in key)} LIMIT 1"
    ).fetchone()
    # Text keys sort differently in each database: their tables are copied whole again.
    after = None if last is None or isinstance(last[0], str) else tuple(last)
    insert = (f"INSERT OR IGNORE INTO {table}({', '.join(columns)})"
              f" VALUES ({', '.join('?' * len(columns))})")
    copied = 0
    while True:
        where = "" if after is None else f" WHERE ({keys}) > ({', '.join('?' * len(key))})"
        page = source.connection.execute(
            f"SELECT {', '.join(columns)} FROM {table}{where} ORDER BY {keys} LIMIT ?",
            (*(after or ()), PAGE)).fetchall()
        if not page:
            return copied
        target.write(functools.partial(_insert, insert, page))
        copied += len(page)
        at = [columns.index(k) for k in key]
        after = tuple(page[-1][i] for i in at)


def _summaries(source: SqlStore, db: Connection) -> None:
    """In the target's transaction: its summaries replaced by the source's."""
    for table in SUMMARIES:
        columns = _columns(source.connection, table)
        db.execute(f"DELETE FROM {table}")
        db.executemany(f"INSERT INTO {table}({', '.join(columns)})"
                       f" VALUES ({', '.join('?' * len(columns))})",
                       list(_rows(source.connection, table, columns)))


def _insert(insert: str, rows: list[Any], db: Connection) -> None:
    db.executemany(insert, rows)


def _columns(db: Connection, table: str) -> list[str]:
    cursor = db.execute(f"SELECT * FROM {table} LIMIT 0")
    return [str(d[0]) for d in cursor.description]


def check(source: SqlStore, target: SqlStore) -> list[TableCheck]:
    """Every table's rows counted and digested in both records."""
    out = []
    for table in (*(t for t, _ in ROWS), *SUMMARIES):
        columns = sorted(_columns(source.connection, table))
        rows, digest = _digest(source.connection, table, columns)
        target_rows, target_digest = _digest(target.connection, table, columns)
        out.append(TableCheck(table, rows, digest == target_digest and rows == target_rows,
                              target_rows))
    return out


def _digest(db: Connection, table: str, columns: Sequence[str]) -> tuple[int, str]:
    """How many rows *table* has, and the sum of their rows' SHA-256 (in any order)."""
    total, count = 0, 0
    for row in _rows(db, table, columns):
        text = json.dumps(list(row), separators=(",", ":"))
        total += int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")
        count += 1
    return count, f"{total % (1 << 256):064x}"


def _rows(db: Connection, table: str, columns: Sequence[str]) -> Iterator[Any]:
    cursor = db.execute(f"SELECT {', '.join(columns)} FROM {table}")
    while page := cursor.fetchmany(PAGE):
        yield from page


