"""``dse doctor``: what is damaged in a record, what of it still reads, and a new record of
what reads (``--salvage``).

A damaged record is read here as SQLite pages, not as the record's rows: the one place
besides :mod:`dse.record.sqlite` that holds SQL. The check is SQLite's ``integrity_check`` (every
page, every index against its table; about 0.7 s for 50 MB, where the ``quick_check`` every
``dse run`` makes at its start takes 0.2 s). What reads is found table by table, in key order
(the rowid, or the primary key of a ``WITHOUT ROWID`` table): a read that meets a damaged page
is taken up again past it, at the smallest key whose page reads (found by doubling, then
halving, the step from the last key read), so only the rows of the damaged pages are lost,
and each lost range of keys is said. The salvage is a new file with the damaged record's own
schema (as its first page says), the rows that read, then its indexes and triggers; opened
as a record it is migrated where it is older, and its summaries are built again from its rows
(those of the damaged file counted what was lost too).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import tempfile
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError, DamagedRecordError
from dse.record.sqlite import OLDEST_SCHEMA, Store, header_damage

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_SHOWN = 20
"""The problems of ``integrity_check`` a report lists (it counts them all, up to 1000)."""
_LOWEST = -(2**63)
_HIGHEST = 2**63 - 1


@dataclass(frozen=True, slots=True)
class TableRead:
    """What of one table reads."""

    name: str
    rows: int
    """Rows read."""
    lost: list[tuple[Any, Any]] = field(default_factory=list)
    """The key ranges that could not be read: (the last key read before, the first key read
    after; ``None``: the start or the end of the table)."""


@dataclass(frozen=True, slots=True)
class Checkup:
    """What ``dse doctor`` found in one record file."""

    path: Path
    size: int
    """The file's size in bytes."""
    state: str
    """``ok``, ``empty`` (0 bytes: no run recorded) or ``damaged``."""
    problems: list[str]
    """What is wrong: the header's word, then ``integrity_check``'s (the first
    :data:`_SHOWN`)."""
    problem_count: int
    schema: str | None
    """The schema version the record says, or ``None`` when it cannot be read."""
    tables: list[TableRead]
    """What of each table reads (none when not even its schema does)."""
    counted: int | None
    """The trials the record's summaries count (what was written), or ``None``."""

    def rows(self, table: str) -> int:
        """The rows of *table* that read (0: none, or no such table)."""
        return next((t.rows for t in self.tables if t.name == table), 0)


def _open(path: Path) -> sqlite3.Connection:
    """*path* opened read only, writing nothing; a snapshot where the ``-wal`` and ``-shm``
    cannot be made (a read-only directory)."""
    uri = "file:" + urllib.parse.quote(str(path.resolve()))
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=30)
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF not in (8, 14):  # READONLY, CANTOPEN
            return db
        db.close()
        db = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)
    except sqlite3.DatabaseError:
        pass  # the check says what
    # A schema partly damaged is read as far as it reads (SQLITE_NoSchemaError); mode=ro
    # keeps every write out.
    db.execute("PRAGMA writable_schema=ON")
    return db


def _integrity(db: sqlite3.Connection) -> list[str]:
    try:
        found = [str(r[0]) for r in db.execute("PRAGMA integrity_check(1000)").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [f"integrity_check: {exc}"]
    return [] if found == ["ok"] else found


def _keys(db: sqlite3.Connection, table: str) -> list[str]:
    """The columns *table* is ordered by: its rowid, or a ``WITHOUT ROWID`` table's key."""
    info = db.execute(f'PRAGMA table_xinfo("{table}")').fetchall()
    pk = [str(r[1]) for r in sorted(info, key=lambda r: int(r[5])) if int(r[5])]
    try:
        db.execute(f'SELECT _rowid_ FROM "{table}" LIMIT 0').fetchall()
    except sqlite3.OperationalError:
        return pk  # no rowid
    return ["_rowid_"]


def _reads_from(db: sqlite3.Connection, select: str, order: str, first: int) -> Any:
    """The first key at or past *first* (of the first key column) when that part of the
    table reads; ``False`` when it does not; ``None`` past the last row."""
    try:
        row = db.execute(f"{select} WHERE {order.split(',')[0]} >= ? ORDER BY {order}"
                         " LIMIT 1", (first,)).fetchone()
    except sqlite3.DatabaseError:
        return False
    return None if row is None else row


def _resume(db: sqlite3.Connection, table: str, keys: Sequence[str], after: Any) -> Any:
    """The first key past the damaged pages met after key *after* (``None``: the start),
    or ``None`` when nothing past them reads."""
    select, order = f'SELECT {", ".join(keys)} FROM "{table}"', ", ".join(keys)
    low = _LOWEST if after is None else after[0]
    if not isinstance(low, int):
        return None  # a key that is no integer: no step to take past it
    step, high = 1, None
    while low + step <= _HIGHEST:
        found = _reads_from(db, select, order, low + step)
        if found is None:
            return None
        if found is not False:
            high = low + step
            break
        step *= 2
    if high is None:
        return None
    bad = low + step // 2  # the last probe that failed (or *low*)
    while high - bad > 1:  # the smallest start that reads
        middle = (bad + high) // 2
        if _reads_from(db, select, order, middle) is False:
            bad = middle
        else:
            high = middle
    return _reads_from(db, select, order, high)


def read_table(db: sqlite3.Connection, table: str, columns: Sequence[str],
               take: Callable[[tuple[Any, ...]], None] | None = None) -> TableRead:
    """Read every row of *table* that reads, in key order, handing each (its *columns*) to
    *take*; what was read and what was lost."""
    try:
        keys = _keys(db, table)
    except sqlite3.DatabaseError:
        return TableRead(table, 0, [(None, None)])  # not even its schema reads
    n = len(keys)
    names = ", ".join(f'"{c}"' for c in (*keys, *columns))
    order = ", ".join(keys)
    rows, lost = 0, list[tuple[Any, Any]]()
    after: Any = None
    start: Any = None  # a key to read from, inclusive (past damaged pages)
    for _ in range(100_000):  # damaged ranges: a bound, never a loop for ever
        where, args = "", ()
        if start is not None:
            where, args = f" WHERE ({order}) >= ({', '.join('?' * n)})", tuple(start)
        elif after is not None:
            where, args = f" WHERE ({order}) > ({', '.join('?' * n)})", tuple(after)
        try:
            for row in db.execute(f'SELECT {names} FROM "{table}"{where} ORDER BY {order}',
                                  args):
                after, start = row[:n], None
                rows += 1
                if take is not None:
                    take(row[n:])
            break
        except sqlite3.DatabaseError:
            # From past the key it failed at: the last one read, or the start it failed on
            # before reading a row (a row whose own overflow pages are damaged).
            origin = after if start is None else start
            start = _resume(db, table, keys, origin)
            begin = None if origin is None else origin[0]
            if lost and lost[-1][1] == begin:
                begin = lost.pop()[0]  # one damaged range, met twice
            lost.append((begin, None if start is None else start[0]))
            if start is None:
                break
    return TableRead(table, rows, lost)


def _tables(db: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(type, name, sql) of the schema's tables, indexes and triggers, as far as it reads."""
    found: list[tuple[str, str, str]] = []

    def take(row: tuple[Any, ...]) -> None:
        if row[2]:  # an index a constraint makes has no SQL of its own
            found.append((str(row[0]), str(row[1]), str(row[2])))

    read_table(db, "sqlite_master", ["type", "name", "sql"], take)
    return found


def _scalar(db: sqlite3.Connection, sql: str) -> Any:
    try:
        row = db.execute(sql).fetchone()
    except sqlite3.DatabaseError:
        return None
    return None if row is None else row[0]


def examine(path: Path) -> Checkup:
    """Check the record file at *path*: its header, ``integrity_check``, what reads."""
    size = path.stat().st_size
    if size == 0:
        return Checkup(path, 0, "empty", [], 0, None, [], None)
    problem = header_damage(path)
    problems = [] if problem is None else [problem]
    if problem is not None and problem.startswith(("not a SQLite", "its header")):
        return Checkup(path, size, "damaged", problems, 1, None, [], None)
    db = _open(path)
    try:
        problems += _integrity(db)
        tables = []
        for kind, name, _ in _tables(db):
            if kind == "table" and not name.startswith("sqlite_"):
                try:
                    columns = [str(r[1]) for r in db.execute(f'PRAGMA table_info("{name}")')]
                except sqlite3.DatabaseError:
                    continue
                tables.append(read_table(db, name, columns))
        schema = _scalar(db, "SELECT value FROM meta WHERE key = 'schema_version'")
        counted = _scalar(db, "SELECT SUM(trials) FROM run_tallies")
    finally:
        db.close()
    if not tables and not problems:
        problems = ["no table of its schema reads"]
    return Checkup(path, size, "damaged" if problems else "ok", problems[:_SHOWN],
                   len(problems), None if schema is None else str(schema), tables,
                   None if counted is None else int(counted))


def _fresh_tables() -> list[tuple[str, str]]:
    """(name, sql) of each table of a record this dse makes."""
    with tempfile.TemporaryDirectory() as where:
        Store(Path(where) / "dse.sqlite", durable=False).close()
        db = sqlite3.connect(Path(where) / "dse.sqlite")
        try:
            return [(str(n), str(sql)) for n, sql in db.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%'")]
        finally:
            db.close()


def _tables_of(db: sqlite3.Connection) -> list[str]:
    return [str(r[0]) for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]


def salvage(path: Path, out: Path) -> Checkup:
    """Write a new record at *out* of what reads of the record at *path* (see the module);
    how the new one checks. Refused, writing nothing, when *out* exists or nothing of
    *path*'s schema reads."""
    if out.exists() or out.resolve() == path.resolve():
        raise ConfigError(f"dse doctor --salvage {out}: the file exists (nothing written"
                          " over it); name a new file")
    partial = out.with_name(f".{out.name}.partial")
    partial.unlink(missing_ok=True)
    src = _open(path)
    try:
        schema = _tables(src)
        if not any(kind == "table" for kind, _, _ in schema):
            raise DamagedRecordError(f"{path}: not even its schema reads: nothing to save")
        dst = sqlite3.connect(partial, isolation_level=None)
        try:
            _copy(src, dst, schema, path)
        finally:
            dst.close()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        src.close()
    try:
        store = Store(partial)  # migrated where it is older
        try:
            store.rebuild_summaries()
        finally:
            store.close()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, out)
    return examine(out)


def _insert(db: sqlite3.Connection, sql: str, row: tuple[Any, ...]) -> None:
    db.execute(sql, row)


def _copy(src: sqlite3.Connection, dst: sqlite3.Connection,
          schema: list[tuple[str, str, str]], path: Path) -> None:
    """The tables of *schema*, the rows of *src* that read, its indexes and triggers."""
    dst.execute("BEGIN")
    for kind, name, sql in schema:
        if kind == "table" and not name.startswith("sqlite_"):
            with contextlib.suppress(sqlite3.Error):  # its text is damaged: the table lost
                dst.execute(sql)
    for name in _tables_of(dst):
        columns = [str(r[1]) for r in dst.execute(f'PRAGMA table_info("{name}")')]
        names = ", ".join(f'"{c}"' for c in columns)
        insert = (f'INSERT OR IGNORE INTO "{name}" ({names})'
                  f" VALUES ({', '.join('?' * len(columns))})")
        read_table(src, name, columns, functools.partial(_insert, dst, insert))
    have = set(_tables_of(dst))
    for name, sql in _fresh_tables():
        if name not in have:  # lost with its schema's page: as this dse makes it
            dst.execute(sql)
    if dst.execute("SELECT 1 FROM meta WHERE key = 'schema_version'").fetchone() is None:
        # Its version is lost with its page: migrated from the oldest, each step leaving
        # what the record has as it is.
        dst.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                    (str(OLDEST_SCHEMA),))
    for kind, _, sql in schema:
        if kind in ("index", "trigger"):
            with contextlib.suppress(sqlite3.Error):  # its text is damaged: made again by
                dst.execute(sql)                      # the migration, where it is dse's
    dst.execute("COMMIT")
