"""What a record on a SQL database writes, whatever database: ids from reserved blocks, a
pass in one transaction, invalidations, claims of configurations and the campaigns' leases.

:class:`SqlStore` implements those of :class:`dse.record.Storage`; a database's store
(:class:`dse.record.sqlite.Store`, :class:`dse.record.postgres.PostgresStore`) says how a
transaction is run (and retried), how a new row's id is read back and whether a campaign's
controller lives.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dse.record._batch import dumps
from dse.record._records import Claim
from dse.record.sql._invalidate import DryRun, flag_rows, matching_rows, selected_rows
from dse.record.sql._leases import Leases
from dse.record.sql._rows import REUSABLE_ROW, TRIAL, absolute_dir, as_trial, chunks, loads
from dse.record.sql._schema import REBUILD
from dse.record.sql._tallies import Tallies
from dse.record.sql._writes import (
    CLAIM,
    FIRST_BLOCK,
    INSERT_CAMPAIGN,
    LAST_BLOCK,
    RELEASE,
    RESERVE,
    SNAPSHOT,
    STATEMENTS,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from dse.record._base import Orphan
    from dse.record._batch import Batch
    from dse.record._records import TrialSelection
    from dse.record.sql._reads import Reads
    from dse.record.sql._rows import Connection
    from dse.record.sql._stops import Stops
    from dse.record.sql._summaries import Summaries

_T = TypeVar("_T")


class SqlStore:
    """The writes of :class:`dse.record.Storage` on a SQL database (each method's
    documentation is there). A subclass connects and provides :meth:`_transaction`,
    :meth:`_inserted_id`, :meth:`_inserted_ids` and :meth:`_alive`."""

    path: Path
    read_only: bool
    workspace: Path
    """Where the campaigns' trial directories and lock files are."""
    where: str
    """The record as messages name it."""
    reads: Reads
    summaries: Summaries
    stops: Stops
    _db: Connection
    _root: Path | None

    def close(self) -> None:
        """See :meth:`dse.record.Storage.close`."""
        raise NotImplementedError

    def begin_session(self) -> None:
        """Forget the ids, claims and leases of an earlier connection."""
        # Ids are handed out from blocks the record reserved for this Store: [next, end).
        self._next_trial = self._end_trial = self._next_attempt = self._end_attempt = 0
        self._blocks = {"trials": FIRST_BLOCK, "attempts": FIRST_BLOCK}
        self._claiming = False
        """Whether this Store claimed configs (its trials' ends then release them)."""
        self.leases = Leases()
        """The campaigns' leases this store holds."""

    # -- what a database provides ------------------------------------------------------

    def _transaction(self, body: Callable[[], _T], *, light: bool = False,
                     serializable: bool = False) -> _T:
        """*body*'s statements in one write transaction, committed; rolled back if it raises.
        *light*: the commit need not reach the disk on its own (reserved ids, claims);
        *serializable*: what *body* read stays true until the commit (else it is run again)."""
        raise NotImplementedError

    def _inserted_id(self, sql: str, params: Sequence[Any]) -> int:
        """Run the ``INSERT`` *sql* and return the id of the row it made."""
        raise NotImplementedError

    def _inserted_ids(self, sql: str, rows: list[tuple[Any, ...]]) -> list[int]:
        """Run the ``INSERT`` *sql* once per row of *rows*; the ids of the rows made, in
        order."""
        raise NotImplementedError

    def alive(self, campaign: str) -> bool:
        """See :meth:`dse.record.Storage.alive`."""
        return self._alive(campaign)

    def take_lease(self, campaign: str, holder: Mapping[str, Any], ttl_s: float) -> None:
        """See :meth:`dse.record.Storage.take_lease`."""
        ttl = max(float(ttl_s), 0.1)
        token = self._transaction(lambda: self.leases.take(self._db, campaign, holder, ttl),
                                  serializable=True)
        self.leases.taken(campaign, token, ttl)

    def release_lease(self, campaign: str) -> None:
        """See :meth:`dse.record.Storage.release_lease`."""
        token = self.leases.drop(campaign)
        if token is None or self.read_only:
            return
        with contextlib.suppress(Exception):  # the record gone: the lease expires
            self._transaction(lambda: self.leases.delete(self._db, campaign, token), light=True)

    def release_leases(self) -> None:
        """Give up every lease this store holds (it is being closed)."""
        for campaign in self.leases.campaigns():
            self.release_lease(campaign)

    def rebuild_summaries(self) -> None:
        """Build the summaries (``run_tallies``, ``run_totals``, ``stop_totals``) again from
        the rows, in one transaction: ``dse doctor --salvage`` keeps the rows of a damaged
        record that read; ``dse record copy`` copies rows, then builds their summaries."""
        def body() -> None:
            for statement in REBUILD:
                self._db.execute(statement)

        self._transaction(body)

    def write(self, body: Callable[[Connection], _T]) -> _T:
        """Run *body* on the record's connection in one write transaction (``dse record
        copy``: rows written as they are)."""
        return self._transaction(lambda: body(self._db))

    @property
    def connection(self) -> Connection:
        """The record's connection, for reads outside the storage interface (``dse record
        copy``, a record's digests); SQLite's SQL, as :mod:`dse.record.sql` writes it."""
        return self._db

    def after_copy(self) -> None:
        """Rows were written with their ids (``dse record copy``): what makes new ids follow
        them (nothing for SQLite, whose next id is past the largest)."""

    def lease_state(self, campaign: str) -> bool | None:
        """See :meth:`dse.record.Storage.lease_state`."""
        return self.leases.state(self._db, campaign)

    def _alive(self, campaign: str) -> bool:
        """Whether a controller of *campaign* lives (holds its lock or a fresh lease)."""
        return self.leases.state(self._db, campaign) is True

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
        # Past every row, too: rows written without the counter (a test's SQL) are skipped.
        (end,) = self._transaction(lambda: self._db.execute(
            RESERVE.format(table=table), (size, table)).fetchone(), light=True)
        return int(end) - size, int(end)

    # -- writes ---------------------------------------------------------------------------

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
        params = (name, source, dumps(spec), agent, backend, mode, max_parallelism, now)
        return self._transaction(lambda: self._inserted_id(INSERT_CAMPAIGN, params))

    def commit(self, batch: Batch) -> None:
        """See :meth:`dse.record.Storage.commit`. Every lease this store holds is renewed in
        the same transaction (and checked: a lease another controller took fails it)."""
        renew = self.leases.due()
        if not batch and not renew:
            return
        self._transaction(lambda: self._write(batch, renew))
        self.leases.renewed(renew)
        batch.clear()

    def _write(self, batch: Batch, renew: list[str]) -> None:
        db = self._db
        self.leases.renew(self._db, renew, self.where)
        tallies = Tallies(db, batch.touched())
        tallies.before()
        snapshots = batch.snapshots()
        for kind, rows in batch.changes():
            if kind == "agent_log":
                ids = self._inserted_ids(STATEMENTS[kind], rows) if rows else []
                # The snapshot names the last call it covers: the k-th of this batch's.
                db.executemany(SNAPSHOT, [
                    (c, ids[k - 1] if k else self._last_call(c), state, unobserved)
                    for c, (k, state, unobserved) in snapshots.items()])
            elif rows:
                db.executemany(STATEMENTS[kind], rows)
        tallies.after()
        if self._claiming:
            db.executemany(RELEASE, list(batch.released()))

    def _last_call(self, campaign: int) -> int:
        (last,) = self._db.execute("SELECT COALESCE(MAX(id), 0) FROM agent_log"
                                   " WHERE campaign_id = ?", (campaign,)).fetchone()
        return int(last)

    def last_invalidation(self) -> int:
        """See :meth:`dse.record.Storage.last_invalidation`."""
        (last,) = self._db.execute("SELECT COALESCE(MAX(id), 0) FROM invalidations").fetchone()
        return int(last)

    # -- changes outside a polling pass -------------------------------------------------

    def enqueue(self, campaign: str, configs: Sequence[Mapping[str, Any]], source: str,
                now: float) -> list[int]:
        """See :meth:`dse.record.Storage.enqueue`."""
        rows = [(campaign, dumps(dict(params)), source, now) for params in configs]
        return self._transaction(lambda: self._inserted_ids(
            "INSERT INTO enqueued(campaign, params, source, added_at) VALUES (?, ?, ?, ?)", rows))

    def invalidate(
        self, kind: str, target: str, reason: str, now: float, *, trial_row: int | None = None,
        select: TrialSelection | None = None, dry_run: bool = False,
    ) -> tuple[int, int, int] | None:
        """See :meth:`dse.record.Storage.invalidate`."""

        def body() -> tuple[int, int, int] | None:
            score_ids: list[int]
            if select is not None:
                trial_ids, score_ids = selected_rows(self._db, select), []
            else:
                trial_ids, score_ids = matching_rows(self._db, kind, target, trial_row)
            if not trial_ids and not score_ids:
                return None
            done = flag_rows(self._db, self._inserted_id, trial_ids, score_ids,
                             (kind, target, reason, now))
            if dry_run:
                raise DryRun(done)
            return done

        try:
            return self._transaction(body)
        except DryRun as dry:
            return dry.result

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

    def reopen_campaign(self, campaign_id: int) -> None:
        """See :meth:`dse.record.Storage.reopen_campaign`."""
        self._transaction(lambda: self._db.execute(
            "UPDATE campaigns SET status='running', end_reason=NULL, ended_at=NULL"
            " WHERE id=?", (campaign_id,)))

    # -- configurations shared with other controllers --------------------------------------

    def claim(self, wanted: Mapping[str, int], campaign: str, now: float, *,
              reuse: bool = True, run: int | None = None,
              orphan: Orphan | None = None) -> dict[str, Claim]:
        """See :meth:`dse.record.Storage.claim`."""
        self._claiming = True
        return self._transaction(lambda: self._claim(wanted, campaign, now, reuse, run, orphan),
                                 light=True, serializable=True)

    def _claim(self, wanted: Mapping[str, int], campaign: str, now: float, reuse: bool,
               run: int | None, orphan: Orphan | None) -> dict[str, Claim]:
        out = self.reusable_results(list(wanted), reuse, run)
        free = [d for d in wanted if d not in out]
        held = self.claims_held(free)
        alive: dict[str, bool] = {campaign: False}  # our own claims: our table knows
        for digest in free:
            out[digest] = self.judged_claim(wanted[digest], held.get(digest), campaign, alive,
                                       orphan)
        self._db.executemany(CLAIM, [(d, wanted[d], campaign, now)
                                     for d in free if out[d].mine])
        return out

    def reusable_results(self, digests: Sequence[str], reuse: bool, run: int | None
                  ) -> dict[str, Claim]:
        """The configs of *digests* with a reusable finished result (when not *reuse*, only
        one of run *run*), each named by the earliest of them."""
        out: dict[str, Claim] = {}
        own = "" if reuse else " AND campaign_id = ?"
        for chunk in chunks(digests if reuse or run is not None else []):
            marks = ",".join("?" * len(chunk))
            for found in self._db.execute(
                f"SELECT {TRIAL} FROM trials WHERE config_hash IN ({marks}) AND"
                f" {REUSABLE_ROW}{own} ORDER BY id DESC",
                chunk if reuse else [*chunk, run],
            ):
                out[found[5]] = Claim(found[0], mine=False, result=as_trial(found, self._root))
        return out

    def claims_held(self, digests: Sequence[str], *, lock: str = "") -> dict[str, tuple[Any, ...]]:
        """The claims of *digests*: config hash -> (trial row, campaign, the trial's
        invalidation, its last attempt's job id, trial directory, attempt number); *lock*
        ends the query (``FOR UPDATE OF c``, where the database has it)."""
        held: dict[str, tuple[Any, ...]] = {}
        for chunk in chunks(digests):
            marks = ",".join("?" * len(chunk))
            held.update((r[0], r[1:]) for r in self._db.execute(
                "SELECT c.config_hash, c.trial_id, c.campaign, t.invalidation, a.job_id,"
                " t.trial_dir, a.attempt FROM claims c LEFT JOIN trials t ON t.id ="
                " c.trial_id LEFT JOIN attempts a ON a.id = (SELECT MAX(id) FROM attempts"
                f" WHERE trial_id = c.trial_id) WHERE c.config_hash IN ({marks}){lock}", chunk,
            ))
        return held

    def judged_claim(self, row: int, other: tuple[Any, ...] | None, campaign: str,
                alive: dict[str, bool], orphan: Orphan | None) -> Claim:
        """The claim of trial *row* (of *campaign*) on a config held by *other* (see
        :meth:`claims_held`; ``None``: nobody): the holder's trial to wait on while its controller
        lives (or its orphan runs), else this trial's. *alive* caches who lives."""
        if other is not None and other[1] not in alive:
            alive[other[1]] = self._alive(other[1])
        if (other is not None and other[0] != row and other[2] is None
                and (alive[other[1]] or (other[1] != campaign
                                         and self._orphan(orphan, *other[3:])))):
            return Claim(int(other[0]), mine=False)
        return Claim(row, mine=True)

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

        def body() -> None:
            self._db.execute("DELETE FROM claims WHERE campaign = ?", (campaign,))
            self._db.executemany(
                "INSERT OR IGNORE INTO claims(config_hash, trial_id, campaign, claimed_at)"
                " VALUES (?, ?, ?, ?)",
                [(digest, row, campaign, now) for digest, row in live.items()])

        self._transaction(body, light=True)
