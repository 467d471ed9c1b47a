"""A connection to the record: opened (created, migrated, or read only as it is), damage
named before anything is written, a busy record waited for, a refused write said once."""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
import urllib.parse
import weakref
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from dse.model._durable import sync_directory
from dse.model._errors import DamagedRecordError, StorageError, StoreError
from dse.record._busy import BusyWait
from dse.record.sql._schema import MIGRATIONS, SCHEMA_VERSION
from dse.record.sqlite._files import journal_mode_for
from dse.record.sqlite._migrations import bring_up_to_date, schema_version

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path



TRY_S = 0.5


"""How long one try of a statement waits for a record another process holds (SQLite's busy
timeout) before dse looks who holds it, sees a Ctrl+C, and tries again."""


_Method = TypeVar("_Method", bound="Callable[..., Any]")


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """A write SQLite refuses (a full disk, a read-only file or directory) as one
    :class:`StorageError` naming the record; the transaction it was in is rolled back."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise StorageError(
            f"{path}: cannot write the record ({exc}); nothing already recorded is lost"
        ) from None


class _OnFile(Protocol):
    path: Path


def writing_method(method: _Method) -> _Method:
    """A method of a record (anything with the ``path`` of its file) that writes: see
    :func:`writing`."""

    @functools.wraps(method)
    def wrapper(self: _OnFile, *args: Any, **kwargs: Any) -> Any:
        with writing(self.path):
            return method(self, *args, **kwargs)

    return cast("_Method", wrapper)


_SQLITE_BUSY = 5


_DAMAGED_CODES = frozenset({11, 26})


"""SQLITE_CORRUPT ("database disk image is malformed") and SQLITE_NOTADB."""


_UNWRITABLE_DIR = frozenset({8, 14})


"""SQLITE_READONLY, SQLITE_CANTOPEN: what a read-only open answers where SQLite cannot make
the ``-wal`` and ``-shm`` files a WAL record is read through."""


_MAGIC = b"SQLite format 3\x00"


def damaged(path: Path, why: str) -> DamagedRecordError:
    """The one line refusing the damaged record at *path*."""
    return DamagedRecordError(
        f"{path}: the record is damaged ({why}); nothing is written to it; `dse doctor"
        f" --workspace {path.parent}` says what can be saved")


class SqliteCursor(sqlite3.Cursor):
    """A cursor of a :class:`SqliteConnection`: its statements wait out a busy record, and a
    damaged page met while reading rows is a :class:`DamagedRecordError`."""

    def execute(self, sql: str, parameters: Any = (), /) -> SqliteCursor:
        cast("SqliteConnection", self.connection).attempt(sql, super().execute, sql, parameters)
        return self

    def executemany(self, sql: str, seq: Any, /) -> SqliteCursor:
        cast("SqliteConnection", self.connection).attempt(sql, super().executemany, sql, seq)
        return self

    def _named(self, exc: sqlite3.DatabaseError) -> Exception:
        return cast("SqliteConnection", self.connection).named(exc)

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._named(exc) from None

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._named(exc) from None

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.DatabaseError as exc:
            raise self._named(exc) from None


class SqliteConnection(sqlite3.Connection):
    """The record's connection (every statement of the store runs through it).

    A statement that finds the record held by another process (SQLITE_BUSY after
    :data:`TRY_S`) is tried again for as long as it is held (:class:`dse.record._busy.BusyWait`
    says once who holds it, and when it is free again): one outside a transaction, the
    ``BEGIN IMMEDIATE`` taking the write lock, or a ``COMMIT`` (SQLite's rule for what may be
    retried). A damaged file (SQLITE_CORRUPT, SQLITE_NOTADB) is a :class:`DamagedRecordError`
    naming it.
    """

    path: Path
    wait: BusyWait
    held: tuple[int, int] | None
    """The device and inode of its file (:class:`_Held`), ``None`` if it could not be read."""

    def close(self) -> None:
        _HELD.forget(self)
        super().close()

    def cursor(self, factory: Any = SqliteCursor) -> Any:  # ours by default
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> SqliteCursor:
        return cast("SqliteCursor", self.cursor()).execute(sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> SqliteCursor:
        return cast("SqliteCursor", self.cursor()).executemany(sql, seq)

    def named(self, exc: sqlite3.DatabaseError) -> Exception:
        """*exc*, or the :class:`DamagedRecordError` it means."""
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _DAMAGED_CODES:
            return damaged(self.path, str(exc))
        return exc

    def attempt(self, sql: str, call: Callable[..., Any], *args: Any) -> None:
        retry = not self.in_transaction or sql.lstrip()[:6].upper() == "COMMIT"
        while True:
            try:
                call(*args)
            except sqlite3.DatabaseError as exc:
                busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == _SQLITE_BUSY
                if busy and retry and self.wait.busy():
                    continue
                self.wait.over()
                raise self.named(exc) from None
            self.wait.over()
            return


class _Held:
    """The record files this process has SQLite connections to, by device and inode (a hard
    link, a path through a symbolic link: the same file).

    POSIX locks belong to a process and a file, and closing *any* descriptor of the file
    drops them all: a plain ``open()`` and ``close()`` of a record this process reads or
    writes through SQLite would silently drop SQLite's locks, and another process closing
    its own last connection would then checkpoint and delete the ``-wal`` under this one's
    feet ("database disk image is malformed"; SQLite's "How To Corrupt" 2.2). So the file is
    opened outside SQLite only when no connection of this process holds it, under a lock
    that a new connection's registration also takes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._by_file: dict[tuple[int, int], weakref.WeakSet[SqliteConnection]] = {}

    @staticmethod
    def _key(path: Path) -> tuple[int, int] | None:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return stat.st_dev, stat.st_ino

    def add(self, db: SqliteConnection) -> None:
        """Count *db* (a connection just made, before its first statement)."""
        db.held = key = self._key(db.path)
        if key is not None:
            with self.lock:
                self._by_file.setdefault(key, weakref.WeakSet()).add(db)

    def forget(self, db: SqliteConnection) -> None:
        """*db* is closing (one collected is forgotten by itself: its file's set keeps no
        connection alive)."""
        key: tuple[int, int] | None = getattr(db, "held", None)
        if key is None:
            return
        with self.lock:
            held = self._by_file.get(key)
            if held is not None:
                held.discard(db)
                if not held:
                    del self._by_file[key]

    def holds(self, path: Path) -> bool:
        """Whether a connection of this process is open on *path* (call with :attr:`lock`)."""
        key = self._key(path)
        return key is not None and bool(self._by_file.get(key))


_HELD = _Held()


def _connect(target: str | Path, path: Path, say: Callable[[str], None] | None, *,
             uri: bool = False) -> SqliteConnection:
    db = sqlite3.connect(target, isolation_level=None, timeout=TRY_S, uri=uri,
                         factory=SqliteConnection)
    db.path = path
    _HELD.add(db)
    db.wait = BusyWait(path, say)
    # The record's clock (leases): this host's, as every controller of the file shares it.
    db.create_function("dse_now", 0, time.time)
    return db


def header_damage(path: Path) -> str | None:
    """What the first 100 bytes and the size of the file at *path* say is wrong with it as a
    SQLite file (not one, truncated), or ``None`` (a sound header, an empty file, no file):
    a read of 100 bytes, cheap enough for every open. The size is checked against the
    header's page count only without a ``-wal`` or ``-journal`` (a writer at work).

    A file this process already has open through SQLite is not read again (closing another
    descriptor of it would drop SQLite's locks: :class:`_Held`): it was checked when first
    opened, and SQLite names what has gone wrong since."""
    with _HELD.lock:
        if _HELD.holds(path):
            return None
        try:
            with path.open("rb") as handle:
                head, size = handle.read(100), os.fstat(handle.fileno()).st_size
        except OSError:
            return None  # SQLite's own open says what is wrong
    if size == 0:
        return None
    if not head.startswith(_MAGIC[: len(head)]) or len(head) < len(_MAGIC):
        return "not a SQLite file"
    if len(head) < 100:
        return f"truncated: {size} bytes, shorter than a SQLite header"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        return f"its header is damaged (page size {page})"
    if size % page:
        return f"truncated: {size} bytes is not a whole number of {page}-byte pages"
    pages = int.from_bytes(head[28:32], "big")
    try:
        # A writer in the middle of its commit (a -journal) or a checkpoint (the -wal)
        # writes page 1 before the pages that lengthen the file.
        busy = os.stat(f"{path}-wal").st_size > 0 or os.path.exists(f"{path}-journal")
    except OSError:
        busy = os.path.exists(f"{path}-journal")
    if not busy and pages and head[24:28] == head[92:96] and size < pages * page:
        return f"truncated: its header counts {pages} pages, the file holds {size // page}"
    return None


def check_writable(path: Path) -> None:
    """A :class:`StorageError` when the record at *path* cannot be written: the file or its
    directory (or, before there is one, the nearest directory that exists) is read-only —
    an archive, a snapshot, a read-only mount."""
    if path.exists():
        writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
    else:
        where = next((d for d in path.parents if d.exists()), None)
        writable = where is None or os.access(where, os.W_OK | os.X_OK)
    if not writable:
        raise StorageError(
            f"{path}: the record is read-only (an archive, a snapshot, a read-only mount?):"
            " `dse run` writes to it; `dse status`, `report`, `show` and `export` read it"
            " as it is")


def open_db(path: Path, *, durable: bool, say: Callable[[str], None] | None
          ) -> tuple[SqliteConnection, str, str]:
    """The record at *path* opened for writing, made or migrated, with its journal mode and
    ``synchronous`` setting; a damaged file refused before anything is written."""
    check_writable(path)
    problem = header_damage(path)
    if problem is not None:
        raise damaged(path, problem)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        wanted = journal_mode_for(path)
        if not path.exists():
            _create(path, say)
        existing = path.is_file() and path.stat().st_size > 0
        db = _connect(path, path, say)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"{path}: cannot open the record ({exc})") from None
    try:
        if existing:
            _quick_check(db, path)
        try:
            # One try (no wait): leaving WAL needs the file to itself, and another
            # connection that has it open keeps it in WAL.
            row = sqlite3.Connection.execute(db, f"PRAGMA journal_mode={wanted}").fetchone()
        except sqlite3.OperationalError:
            row = db.execute("PRAGMA journal_mode").fetchone()
        sync = "FULL" if durable else "OFF"
        db.execute(f"PRAGMA synchronous={sync}")
        with writing(path):
            bring_up_to_date(db, path)
    except BaseException as exc:
        # A transaction left open would hold the record's write lock for this process's
        # life (a Python API caller that catches the error goes on).
        db.close()
        if isinstance(exc, sqlite3.DatabaseError):
            raise StoreError(f"{path}: not a dse record ({exc})") from None
        raise
    return db, str(row[0]).lower(), sync


def _create(path: Path, say: Callable[[str], None] | None) -> None:
    """Make the record at *path* whole or not at all: its schema is written to a file of its
    own, then linked into place, so that a reader never meets a record being made (an empty
    file, a file with no table); the journal mode is set once it is in place. Another process
    that made it first wins; where the file system has no hard links, the record is made in
    place."""
    made = path.with_name(f"{path.name}.new-{os.getpid()}")
    try:
        db = _connect(made, made, say)  # a rollback journal: the file is whole once closed
        try:
            with writing(path):
                bring_up_to_date(db, made)
        finally:
            db.close()
        try:
            os.link(made, path)
        except FileExistsError:
            pass  # another controller made it first: theirs is the record
        except OSError:
            pass  # no hard links here: made in place by the caller
        else:
            sync_directory(path.parent)
    finally:
        for left in (made, made.with_name(f"{made.name}-journal")):
            with contextlib.suppress(OSError):
                left.unlink()


def _quick_check(db: SqliteConnection, path: Path) -> None:
    """SQLite's ``quick_check`` of every page (about 0.2 s for 50 MB; not the indexes'
    contents, which ``dse doctor`` checks): a damaged record is refused before a write."""
    found = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)").fetchall()]
    if found != ["ok"]:
        raise damaged(path, "; ".join(found))


def open_read_only(path: Path, say: Callable[[str], None] | None) -> SqliteConnection | None:
    """The record at *path* opened read only (``mode=ro``; where SQLite cannot make the
    ``-wal`` and ``-shm`` beside it, ``immutable=1``, said), writing nothing: no journal
    mode, no migration. ``None`` when the record is of an older schema and can be written:
    it is then opened for writing and migrated, as before."""
    problem = header_damage(path)
    if problem is not None:
        raise damaged(path, problem)
    uri = "file:" + urllib.parse.quote(str(path.resolve()))
    db = _connect(f"{uri}?mode=ro", path, say, uri=True)
    try:
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF not in _UNWRITABLE_DIR:
                raise
            db.close()
            db = _connect(f"{uri}?mode=ro&immutable=1", path, say, uri=True)
            if say is not None:
                say(_immutable_note(path))
        found = schema_version(db)
        if found is None and not db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall():
            # A SQLite file with no table yet: a `dse run` starting now is making its record.
            raise StoreError(f"{path}: no dse record here yet (no table in it: no run is"
                             " recorded; a `dse run` starting now makes them)")
        if found is None:
            raise StoreError(f"{path}: not a dse record (it holds no dse schema)")
        if found != str(SCHEMA_VERSION) and found.isdigit() and int(found) in MIGRATIONS:
            db.close()
            if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
                return None
            raise StoreError(
                f"{path}: schema version {found}, this dse reads {SCHEMA_VERSION}, and the"
                " record is read-only: it cannot be migrated here (read a writable copy)")
        if found != str(SCHEMA_VERSION):
            raise StoreError(f"{path}: schema version {found}, this dse reads {SCHEMA_VERSION}")
    except BaseException as exc:
        db.close()
        if isinstance(exc, sqlite3.DatabaseError):
            raise StoreError(f"{path}: not a dse record ({exc})") from None
        raise
    return db


def _immutable_note(path: Path) -> str:
    """What reading *path* as an immutable file means."""
    note = (f"{path}: read-only workspace: read as a snapshot (SQLite cannot make its -wal"
            f" and -shm files in {path.parent}); if anything writes the record meanwhile,"
            " what is shown may be stale")
    try:
        wal = os.stat(f"{path}-wal").st_size
    except OSError:
        wal = 0
    if wal:
        note += (f", and the {wal} bytes of its -wal file (the latest passes, not yet in"
                 " the file) are not read")
    return note
