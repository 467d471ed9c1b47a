"""The durable record: one SQLite file per workspace, composed of its reads
(:class:`Reads`, ``Summaries``, ``Stops``) and the writes of this module.

Every state change is buffered in a :class:`Batch` and committed in one transaction per
polling pass, before the engine acts on it, with ``synchronous=FULL``: a committed pass
survives a crash of the process or of the machine. The journal depends on where the file
lives: WAL on a local disk; a rollback journal (``DELETE``) on a network file system (NFS,
Lustre, GPFS…, where shared clusters keep home directories), because WAL's shared-memory
index only works when every connection runs on one host. ``DSE_SQLITE_JOURNAL`` (``wal`` or
``delete``) overrides the choice.

Several controllers (one per campaign, each holding its campaign lock) may share one record.
Row ids come from the record, never from a controller's own count: :meth:`Store.new_trial_id`
hands out ids from a block reserved in one short transaction on the ``counters`` table (blocks
grow as a run goes, gaps are harmless). Every write takes the write lock up front
(``BEGIN IMMEDIATE``) and waits for it rather than failing, however long another process
holds it (a peer stopped with Ctrl+Z in a transaction: :mod:`dse.record._busy` names it, once).
A damaged file is refused before anything is written to it (:class:`DamagedRecordError`);
the reading commands open the record read only (:func:`open_existing`).
A trial about to run is *claimed* by its config hash (table ``claims``, :meth:`Store.claim`),
so two controllers never run one configuration at once; a claim ends with its trial.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dse.model._errors import StoreError
from dse.record.sql._pages import Pages
from dse.record.sql._reads import Reads
from dse.record.sql._stops import Stops
from dse.record.sql._store import SqlStore
from dse.record.sql._summaries import Summaries
from dse.record.sqlite._connection import (
    SqliteConnection,
    open_db,
    open_read_only,
    writing,
)
from dse.record.sqlite._files import workspace_db

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

_T = TypeVar("_T")


class Store(SqlStore):
    """Implements :class:`dse.record._base.Storage` (each method's documentation is there). The
    SQLite record of a workspace (``<workspace>/dse.sqlite``).

    ``journal_mode`` is the journal SQLite runs with: ``wal`` on a local disk, ``delete``
    (a rollback journal) on a network file system or when ``DSE_SQLITE_JOURNAL`` says so.
    """

    _db: SqliteConnection

    def __init__(self, path: str | Path, *, durable: bool = True, connect: bool = True,
                 read_only: bool = False, say: Callable[[str], None] | None = None) -> None:
        """:param connect: open (and create) the file now; with false, nothing is touched
        until :meth:`connect` (a campaign refused before it runs writes nothing).
        :param read_only: open an existing record as it is and write nothing (see
        :func:`open_existing`).
        :param say: prints a line: that the record is busy (held by another process) and
        who holds it, that it is free again, that it is read as a snapshot."""
        self.path = Path(path)
        self._root = self.path.parent.resolve()
        self.workspace = self.path.parent
        self.where = str(self.path)
        self.durable = durable
        self.read_only = read_only
        self.say = say
        if connect:
            self.connect()

    def connect(self) -> None:
        """See :meth:`dse.record.Storage.connect`."""
        db = open_read_only(self.path, self.say) if self.read_only else None
        if db is None:
            db, self.journal_mode, self._sync = open_db(self.path, durable=self.durable,
                                                      say=self.say)
        else:
            self.journal_mode = str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            self._sync = "OFF"
        self._db = db
        self.reads = Reads(db, self.path, self._root)
        """The record's rows: runs, trials, attempts, events, scores, agent calls."""
        self.summaries = Summaries(db, self.path, self._root)
        """Aggregates whose cost does not grow with what they print."""
        self.stops = Stops(db, self.path, self._root)
        """What a stopping rule decided, and the learning curves it read."""
        self.pages = Pages(db, self.path, self._root)
        """Pages of trials and the record's change stamp, for a live view."""
        self.begin_session()

    def close(self) -> None:
        """See :meth:`dse.record.Storage.close`."""
        self.release_leases()
        self._db.close()

    # -- what SqlStore asks of a database --------------------------------------------------

    def _transaction(self, body: Callable[[], _T], *, light: bool = False,
                     serializable: bool = False) -> _T:
        """Every write takes the write lock up front (``BEGIN IMMEDIATE``): what *body* reads
        stays true until its commit, whatever *serializable* says."""
        with writing(self.path), self._light(light):
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                result = body()
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return result

    @contextlib.contextmanager
    def _light(self, light: bool) -> Iterator[None]:
        """A write that need not reach the disk on its own: in WAL mode the next durable
        commit carries it (the log is replayed in order); with a rollback journal every
        commit stays durable. Reserved ids and claims are worth nothing after a crash of the
        machine, which ends every controller holding them."""
        light = light and self.journal_mode == "wal" and self._sync == "FULL"
        if light:
            self._db.execute("PRAGMA synchronous=NORMAL")
        try:
            yield
        finally:
            if light:
                self._db.execute(f"PRAGMA synchronous={self._sync}")

    def _inserted_id(self, sql: str, params: Sequence[Any]) -> int:
        cursor = self._db.execute(sql, params)
        assert cursor.lastrowid is not None
        return int(cursor.lastrowid)

    def _inserted_ids(self, sql: str, rows: list[tuple[Any, ...]]) -> list[int]:
        # Under the write lock, rows get ids one past the largest, in order.
        table = sql.split()[2].partition("(")[0]
        (last,) = self._db.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()
        self._db.executemany(sql, rows)
        return list(range(int(last) + 1, int(last) + 1 + len(rows)))

    def _alive(self, campaign: str) -> bool:
        # Only a run claims: the commands that read the record never import the lock module.
        from dse.record._lock import lock_held

        lease = self.leases.state(self._db, campaign)
        if lease is False:
            return False  # its lease expired: gone, or stalled past it (it stops writing)
        # A lock file on this host says at once whether its holder is gone (its flock).
        return lock_held(self.workspace, campaign, remote=lambda: lease is True,
                         missing=lease is True)


def open_existing(workspace: str | Path, *, write: bool = False,
                  say: Callable[[str], None] | None = None) -> Store:
    """Open the record of an existing workspace: read only (the reading commands: nothing is
    written, a read-only workspace is read), or with *write* (``dse invalidate``). *say*:
    see :class:`Store`."""
    path = workspace_db(workspace)
    if not path.is_file():
        raise StoreError(f"{path}: no dse record here (run `dse run CAMPAIGN.toml` first)")
    if not os.access(path, os.R_OK):
        raise StoreError(f"{path}: not readable")
    if path.stat().st_size == 0:
        raise StoreError(f"{path}: the record is empty (0 bytes): no run is recorded in it")
    return Store(path, read_only=not write, say=say)
