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
from typing import TYPE_CHECKING, Any

from dse.model._errors import StoreError
from dse.model._numbers import is_int64
from dse.record._batch import Batch, dumps
from dse.record._records import Claim, TrialSelection
from dse.record.sqlite._connection import open_db, open_read_only, writing_method
from dse.record.sqlite._files import workspace_db
from dse.record.sqlite._migrations import REBUILD
from dse.record.sqlite._reads import Reads
from dse.record.sqlite._rows import REUSABLE_ROW, TRIAL, absolute_dir, as_trial, chunks, loads
from dse.record.sqlite._stops import Stops
from dse.record.sqlite._summaries import Summaries
from dse.record.sqlite._writes import (
    CLAIM,
    FIRST_BLOCK,
    LAST_BLOCK,
    RELEASE,
    RESERVE,
    SNAPSHOT,
    STATEMENTS,
)

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Iterator, Mapping

    from dse.record._base import Orphan




class Store:
    """Implements :class:`dse.record._base.Storage` (each method's documentation is there). The
    SQLite record of a workspace (``<workspace>/dse.sqlite``).

    ``journal_mode`` is the journal SQLite runs with: ``wal`` on a local disk, ``delete``
    (a rollback journal) on a network file system or when ``DSE_SQLITE_JOURNAL`` says so.
    """

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
        # Ids are handed out from blocks the record reserved for this Store: [next, end).
        self._next_trial = self._end_trial = self._next_attempt = self._end_attempt = 0
        self._blocks = {"trials": FIRST_BLOCK, "attempts": FIRST_BLOCK}
        self._claiming = False
        """Whether this Store claimed configs (its trials' ends then release them)."""

    def _max_id(self, table: str) -> int:
        row = self._db.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()
        return int(row[0])

    def close(self) -> None:
        """See :meth:`dse.record.Storage.close`."""
        self._db.close()

    # -- ids ------------------------------------------------------------------------------

    def new_trial_id(self) -> int:
        """See :meth:`dse.record.Storage.new_trial_id`."""
        if self._next_trial >= self._end_trial:
            self._next_trial, self._end_trial = self._reserve("trials")
        value = self._next_trial
        self._next_trial += 1
        return value

    def new_attempt_id(self) -> int:
        """See :meth:`dse.record.Storage.new_attempt_id`."""
        if self._next_attempt >= self._end_attempt:
            self._next_attempt, self._end_attempt = self._reserve("attempts")
        value = self._next_attempt
        self._next_attempt += 1
        return value

    def _reserve(self, table: str) -> tuple[int, int]:
        """Reserve the next block of ids of *table* in the record: ``[first, end)``. Blocks
        double up to a limit, so a long run asks rarely and a short one wastes little."""
        size = self._blocks[table]
        self._blocks[table] = min(size * 2, LAST_BLOCK)
        with self._light_write():
            # Past every row, too: rows written without the counter (a test's SQL) are skipped.
            (end,) = self._db.execute(RESERVE.format(table=table), (size, table)).fetchone()
        return int(end) - size, int(end)

    @contextlib.contextmanager
    def _light_write(self) -> Iterator[None]:
        """A short write transaction that need not reach the disk on its own: in WAL mode
        the next durable commit carries it (the log is replayed in order); with a rollback
        journal every commit stays durable. Reserved ids and claims are worth nothing after
        a crash of the machine, which ends every controller holding them."""
        db = self._db
        light = self.journal_mode == "wal" and self._sync == "FULL"
        if light:
            db.execute("PRAGMA synchronous=NORMAL")
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        finally:
            if light:
                db.execute(f"PRAGMA synchronous={self._sync}")

    # -- writes ---------------------------------------------------------------------------

    @writing_method
    def create_campaign(
        self,
        *,
        name: str,
        source: str | None,
        spec: dict[str, Any],
        agent: str,
        backend: str,
        mode: str,
        max_parallelism: int,
        now: float,
    ) -> int:
        """See :meth:`dse.record.Storage.create_campaign`."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        cursor = db.execute(
            "INSERT INTO campaigns(name, source, spec, agent, backend, mode, max_parallelism,"
            " status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?)",
            (name, source, dumps(spec), agent, backend, mode, max_parallelism, now),
        )
        db.execute("COMMIT")
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    @writing_method
    def commit(self, batch: Batch) -> None:
        """See :meth:`dse.record.Storage.commit`."""
        if not batch:
            return
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            snapshots = batch.snapshots()
            for kind, rows in batch.changes():
                if kind == "agent_log" and snapshots:
                    # Rows get ids one past the largest, in order: the k-th of this batch's
                    # calls is row last + k (the snapshot names the last call it covers).
                    (last,) = db.execute("SELECT COALESCE(MAX(id), 0) FROM agent_log").fetchone()
                    db.executemany(SNAPSHOT, [(c, last + k, state, unobserved)
                                              for c, (k, state, unobserved) in snapshots.items()])
                if rows:
                    db.executemany(STATEMENTS[kind], rows)
            if self._claiming:
                db.executemany(RELEASE, batch.released())
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        batch.clear()

    # -- reads ----------------------------------------------------------------------------

    def last_invalidation(self) -> int:
        """See :meth:`dse.record.Storage.last_invalidation`."""
        return self._max_id("invalidations")

    # -- changes outside a polling pass -------------------------------------------------

    @writing_method
    def invalidate(
        self, kind: str, target: str, reason: str, now: float, *, trial_row: int | None = None,
        select: TrialSelection | None = None, dry_run: bool = False,
    ) -> tuple[int, int, int] | None:
        """See :meth:`dse.record.Storage.invalidate`."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            score_ids: list[int]
            if select is not None:
                trial_ids, score_ids = _selected(self._db, select), []
            else:
                trial_ids, score_ids = self._matching(kind, target, trial_row)
            if not trial_ids and not score_ids:
                db.execute("ROLLBACK")
                return None
            cursor = db.execute(
                "INSERT INTO invalidations(at, kind, target, reason, trials, scores)"
                " VALUES (?, ?, ?, ?, 0, 0)", (now, kind, target, reason),
            )
            mark = cursor.lastrowid
            flagged_trials = 0
            for chunk in chunks(trial_ids):
                marks = ",".join("?" * len(chunk))
                flagged_trials += db.execute(
                    f"UPDATE trials SET invalidation = ? WHERE id IN ({marks})"
                    " AND invalidation IS NULL", (mark, *chunk),
                ).rowcount
                # Their own scores, and every comparison that used one of them as baseline.
                db.execute(
                    f"UPDATE scores SET invalidation = ? WHERE invalidation IS NULL AND"
                    f" (trial_id IN ({marks}) OR baseline_trial IN ({marks}))",
                    (mark, *chunk, *chunk),
                )
            for chunk in chunks(score_ids):
                marks = ",".join("?" * len(chunk))
                db.execute(
                    f"UPDATE scores SET invalidation = ? WHERE id IN ({marks})"
                    " AND invalidation IS NULL", (mark, *chunk),
                )
            (flagged_scores,) = db.execute(
                "SELECT COUNT(*) FROM scores WHERE invalidation = ?", (mark,)
            ).fetchone()
            db.execute("UPDATE invalidations SET trials = ?, scores = ? WHERE id = ?",
                       (flagged_trials, flagged_scores, mark))
            db.execute("ROLLBACK" if dry_run else "COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        assert mark is not None
        return mark, flagged_trials, int(flagged_scores)

    def _matching(
        self, kind: str, target: str, trial_row: int | None
    ) -> tuple[list[int], list[int]]:
        """The trial rows and the score rows an invalidation of *kind* flags directly."""
        db = self._db
        if kind == "trial":
            rows = db.execute(
                "SELECT id FROM trials WHERE id = ? OR cache_of = ?", (trial_row, trial_row)
            ).fetchall()
            return [int(r[0]) for r in rows], []
        if kind == "data_version":
            # The trials of that version, and the cache hits that reuse one of them.
            rows = db.execute(
                "WITH v AS (SELECT id FROM trials WHERE data_version = ?1"
                " OR data_version_read = ?1)"
                " SELECT id FROM v UNION SELECT id FROM trials WHERE cache_of IN v",
                (target,),
            ).fetchall()
            return sorted(int(r[0]) for r in rows), []
        if kind == "scorer_version":
            rows = db.execute(
                "SELECT id FROM scores WHERE scorer_version = ?"
                " OR scorer || '==' || scorer_version = ?", (target, target),
            ).fetchall()
            return [], [int(r[0]) for r in rows]
        raise ValueError(f"unknown invalidation kind {kind!r}")

    def run_controllers(self, name: str) -> list[tuple[int, dict[str, Any]]]:
        """See :meth:`dse.record.Storage.run_controllers`."""
        out = []
        for run, data in self.reads.rows(
            "SELECT c.id, (SELECT e.data FROM events e WHERE e.campaign_id = c.id AND"
            " e.kind = 'controller' ORDER BY e.id DESC LIMIT 1) FROM campaigns c"
            " WHERE c.name = ? AND c.status = 'running'", (name,),
        ):
            owner = loads(data) if data else None
            if isinstance(owner, dict):
                out.append((int(run), owner))
        return out

    @writing_method
    def reopen_campaign(self, campaign_id: int) -> None:
        """See :meth:`dse.record.Storage.reopen_campaign`."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "UPDATE campaigns SET status='running', end_reason=NULL, ended_at=NULL"
            " WHERE id=?",
            (campaign_id,),
        )
        db.execute("COMMIT")

    # -- configurations shared with other controllers --------------------------------------

    def claim(self, wanted: Mapping[str, int], campaign: str, now: float, *,
              reuse: bool = True, run: int | None = None,
              orphan: Orphan | None = None) -> dict[str, Claim]:
        # Only a run claims: the commands that read the record never import the lock module.
        """See :meth:`dse.record.Storage.claim`."""
        from dse.record._lock import lock_held

        self._claiming = True
        out: dict[str, Claim] = {}
        db = self._db
        digests = list(wanted)
        own = "" if reuse else " AND campaign_id = ?"
        with self._light_write():
            for chunk in chunks(digests if reuse or run is not None else []):
                marks = ",".join("?" * len(chunk))
                for found in db.execute(
                    f"SELECT {TRIAL} FROM trials WHERE config_hash IN ({marks}) AND"
                    f" {REUSABLE_ROW}{own} ORDER BY id DESC",
                    chunk if reuse else [*chunk, run],
                ):
                    out[found[5]] = Claim(found[0], mine=False, result=as_trial(found, self._root))
            free = [d for d in digests if d not in out]
            held: dict[str, tuple[Any, ...]] = {}
            for chunk in chunks(free):
                marks = ",".join("?" * len(chunk))
                held.update((r[0], r[1:]) for r in db.execute(
                    "SELECT c.config_hash, c.trial_id, c.campaign, t.invalidation, a.job_id,"
                    " t.trial_dir, a.attempt FROM claims c LEFT JOIN trials t ON t.id ="
                    " c.trial_id LEFT JOIN attempts a ON a.id = (SELECT MAX(id) FROM attempts"
                    " WHERE trial_id = c.trial_id)"
                    f" WHERE c.config_hash IN ({marks})", chunk,
                ))
            alive: dict[str, bool] = {campaign: False}  # our own claims: our table knows
            for digest in free:
                row, other = wanted[digest], held.get(digest)
                if other is not None and other[1] not in alive:
                    alive[other[1]] = lock_held(self.path.parent, other[1])
                if (other is not None and other[0] != row and other[2] is None
                        and (alive[other[1]] or (other[1] != campaign
                                                 and self._orphan(orphan, *other[3:])))):
                    out[digest] = Claim(int(other[0]), mine=False)
                    continue
                out[digest] = Claim(row, mine=True)
            db.executemany(CLAIM, [(d, wanted[d], campaign, now)
                                    for d in free if out[d].mine])
        return out

    def _orphan(self, orphan: Orphan | None, job_id: str | None, trial_dir: str | None,
                attempt: int | None) -> bool:
        """Whether the last attempt of a gone controller's trial still runs (*orphan*
        asked)."""
        path = absolute_dir(trial_dir, self._root)
        return bool(orphan and path and attempt
                    and orphan(job_id, Path(path), int(attempt)))

    def reset_claims(self, campaign: str, live: Mapping[str, int], now: float) -> None:
        """See :meth:`dse.record.Storage.reset_claims`."""
        self._claiming = True
        with self._light_write():
            self._db.execute("DELETE FROM claims WHERE campaign = ?", (campaign,))
            self._db.executemany(
                "INSERT OR IGNORE INTO claims(config_hash, trial_id, campaign, claimed_at)"
                " VALUES (?, ?, ?, ?)",
                [(digest, row, campaign, now) for digest, row in live.items()],
            )


def _selected(db: sqlite3.Connection, select: TrialSelection) -> list[int]:
    """The trial rows *select* picks, and the cache hits that reuse one of them."""
    where: list[str] = ["1"]
    args: list[str | int] = []
    if select.failed is not None:
        where.append("status = 'failed'")
        if select.failed:
            where.append("failure = ?")
            args.append(select.failed)
    if select.run is not None:
        where.append("campaign_id = ?")
        args.append(select.run if is_int64(select.run) else -1)  # past 64 bits: no run's id
    if select.campaign is not None:
        where.append("campaign_id IN (SELECT id FROM campaigns WHERE name = ?)")
        args.append(select.campaign)
    rows = db.execute(
        f"WITH v AS (SELECT id FROM trials WHERE {' AND '.join(where)})"
        " SELECT id FROM v UNION SELECT id FROM trials WHERE cache_of IN v", args,
    ).fetchall()
    return sorted(int(r[0]) for r in rows)


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


@writing_method
def rebuild_summaries(store: Store) -> None:
    """Build the summaries (``run_tallies``, ``run_totals``, ``stop_totals``) of *store*
    again from its rows, in one transaction: ``dse doctor --salvage`` keeps the rows of a
    damaged record that read, and its summaries counted the rows that did not too."""
    db = store._db
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in REBUILD:
            db.execute(statement)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
