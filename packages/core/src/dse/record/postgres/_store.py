"""The record in a PostgreSQL database, for a team: controllers on many hosts write one record.

Chosen by a URL (``--record postgresql://host/db``, ``DSE_RECORD``, ``[campaign] record``);
credentials come the usual libpq ways (``PGPASSWORD``, ``~/.pgpass``, a service file) and are
never recorded or printed: :func:`shown` is the URL without its password. The workspace
keeps the trial directories (and each controller's logs); the record keeps every row.

Every write is one transaction (a pass, a claim, a reserved block of ids) and is run again
when PostgreSQL aborts it for a deadlock or a serialization failure; a claim takes row locks
(:meth:`PostgresStore.claim`), so two controllers never both take one configuration, and a
lease is taken ``SERIALIZABLE``. Reads run outside transactions, each statement its own
snapshot: they never hold back a writer.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from dse.model._errors import StorageError, StoreError
from dse.record._records import Claim
from dse.record.postgres._dialect import Translating
from dse.record.postgres._schema import bring_up_to_date, schema_version
from dse.record.sql._pages import Pages
from dse.record.sql._reads import Reads
from dse.record.sql._rows import loads
from dse.record.sql._schema import SCHEMA_VERSION
from dse.record.sql._stops import Stops
from dse.record.sql._store import SqlStore
from dse.record.sql._summaries import Summaries
from dse.record.sql._writes import CLAIM

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import psycopg

    from dse.record._base import Orphan
    from dse.record._batch import Batch

_T = TypeVar("_T")


IDENTITY_TABLES = ("campaigns", "trials", "attempts", "events", "agent_log", "scores",
                   "invalidations", "decisions", "enqueued")


"""The tables whose ``id`` is an identity column (SQLite's ``INTEGER PRIMARY KEY``)."""


GROWING = ("trials", "attempts")
"""The tables a run adds a row to per trial, whose statistics :meth:`PostgresStore.commit`
refreshes as they grow."""
ANALYZE_FIRST = 500
"""The rows a store adds before it first refreshes their statistics."""

RETRIES = 50


"""How many times a transaction PostgreSQL aborted (deadlock, serialization failure) is run
again before its error is raised."""


def shown(url: str) -> str:
    """*url* as it may be printed and recorded: without its password."""
    scheme, netloc, path, query, fragment = urllib.parse.urlsplit(url)
    user, at, host = netloc.rpartition("@")
    netloc = f"{user.partition(':')[0]}{at}{host}"
    kept = [(k, v) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)
            if k != "password"]
    if len(kept) != len(urllib.parse.parse_qsl(query, keep_blank_values=True)):
        query = urllib.parse.urlencode(kept)
    return urllib.parse.urlunsplit((scheme, netloc, path, query, fragment))


class PostgresStore(SqlStore):
    """Implements :class:`dse.record._base.Storage` (each method's documentation is there) in
    the PostgreSQL database *url* names; *workspace* is where this controller's trial
    directories are."""

    _db: Translating

    def __init__(self, url: str, workspace: str | Path, *, connect: bool = True,
                 read_only: bool = False, say: Callable[[str], None] | None = None) -> None:
        self.url = url
        self.where = shown(url)
        """The record, as messages name it (no password)."""
        self.workspace = Path(workspace)
        self.path = self.workspace
        self.read_only = read_only
        self.say = say
        self._root = None
        self._added = 0
        self._analyze_at = ANALYZE_FIRST
        if connect:
            self.connect()

    def connect(self) -> None:
        """See :meth:`dse.record.Storage.connect`."""
        try:
            import psycopg
        except ImportError:
            raise StoreError(f"{self.where}: a PostgreSQL record needs psycopg: pip install"
                             " 'dse-core[postgres]'") from None
        try:
            connection = psycopg.connect(self.url, autocommit=True,
                                         application_name="dse")
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: cannot open the record"
                             f" ({_first_line(exc)})") from None
        connection.adapters.register_loader("numeric", _number_loader())
        # psycopg warns of a pipeline it ends after an aborted transaction, which this store
        # runs again (a serialization failure of a claim): not the user's concern.
        logging.getLogger("psycopg").setLevel(logging.ERROR)
        try:
            self._prepare(connection)
        except psycopg.Error as exc:
            connection.close()
            raise StoreError(f"{self.where}: cannot open the record"
                             f" ({_first_line(exc)})") from None
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        self._session_of: list[Any] | None = None
        self._db = db = Translating(connection, self.where)
        self.reads = Reads(db, self.path, None)
        """The record's rows: runs, trials, attempts, events, scores, agent calls."""
        self.summaries = Summaries(db, self.path, None)
        """Aggregates whose cost does not grow with what they print."""
        self.stops = Stops(db, self.path, None)
        """What a stopping rule decided, and the learning curves it read."""
        self.pages = Pages(db, self.path, None)
        """Pages of trials and the record's change stamp, for a live view."""
        self.begin_session()

    def _prepare(self, connection: psycopg.Connection[Any]) -> None:
        """Check the record's schema (read only), or make or migrate it."""
        if self.read_only:
            found = schema_version(connection)
            if found is None:
                raise StoreError(f"{self.where}: no dse record here (run `dse run"
                                 " CAMPAIGN.toml --record URL` first)")
            if found != str(SCHEMA_VERSION):
                raise StoreError(f"{self.where}: schema version {found}, this dse reads"
                                 f" {SCHEMA_VERSION} (a `dse run` migrates it)")
            connection.execute("SET default_transaction_read_only = on")
        else:
            bring_up_to_date(connection, self.where)

    def close(self) -> None:
        """See :meth:`dse.record.Storage.close`."""
        self.release_leases()
        self._connection.close()

    # -- what SqlStore asks of a database --------------------------------------------------

    def _transaction(self, body: Callable[[], _T], *, light: bool = False,
                     serializable: bool = False) -> _T:
        import psycopg
        from psycopg import errors

        for attempt in range(RETRIES + 1):
            try:
                with self._connection.transaction():
                    if serializable:
                        self._connection.execute(
                            "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                    if light:
                        self._connection.execute("SET LOCAL synchronous_commit = off")
                    return body()
            except (errors.SerializationFailure, errors.DeadlockDetected):
                if attempt == RETRIES:
                    raise
                time.sleep(random.uniform(0, 0.002 * 2 ** min(attempt, 8)))
            except (errors.DiskFull, errors.ReadOnlySqlTransaction,
                    errors.InsufficientPrivilege) as exc:
                raise StorageError(f"{self.where}: cannot write the record"
                                   f" ({_first_line(exc)}); nothing already recorded is lost"
                                   ) from None
            except (psycopg.Error, StorageError) as exc:
                if not self._connection.broken and not isinstance(exc, psycopg.OperationalError):
                    raise
                self._lost(exc)
        raise AssertionError("unreachable")

    def _lost(self, exc: BaseException) -> NoReturn:
        """The connection was lost inside a transaction (the server ended it, or is gone):
        :class:`LeaseLostError` if another controller took a lease this store held meanwhile
        (read on a connection of its own), else the record is unreachable."""
        import psycopg
        from psycopg import errors

        if self.leases.campaigns():
            with (contextlib.suppress(psycopg.Error),
                  psycopg.connect(self.url, autocommit=True, application_name="dse",
                                  connect_timeout=10) as check):
                self.leases.check(Translating(check, self.where), self.where)
        if isinstance(exc, errors.IdleInTransactionSessionTimeout):
            raise StorageError(f"{self.where}: the record ended a transaction of this controller"
                               " that stood still longer than its lease (the process was"
                               " stopped or stalled); nothing already recorded is lost"
                               ) from None
        if isinstance(exc, StorageError):
            raise exc
        raise StorageError(f"{self.where}: the record is unreachable ({_first_line(exc)});"
                           " nothing already recorded is lost") from None

    def take_lease(self, campaign: str, holder: Mapping[str, Any], ttl_s: float) -> None:
        """See :meth:`dse.record.Storage.take_lease`. The server then ends a transaction of
        this connection left open longer than the shortest lease it holds (a controller
        stopped inside one): the row locks it took are free for the controller that takes
        the campaign over, and this one's next statement fails."""
        session = self._session()
        self._end_stalled(campaign, session)
        super().take_lease(campaign, {**holder, "session": session}, ttl_s)
        shortest = self.leases.shortest()
        if shortest is not None:
            self._connection.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                (str(math.ceil(shortest * 1000)),))

    def _session(self) -> list[Any]:
        """This connection's database session, as a lease records it: its backend pid and
        when that backend started (a pid the server reuses names another session)."""
        if self._session_of is None:
            started = self._connection.execute(
                "SELECT backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()"
            ).fetchone()
            self._session_of = [self._connection.info.backend_pid, started and started[0]]
        return self._session_of

    def _end_stalled(self, campaign: str, mine: list[Any]) -> None:
        """End the database session of *campaign*'s previous controller when its lease has
        expired (it was stopped or stalled past it), so that the row locks of a transaction
        it was stopped inside are free for this one; a session this role may not end is left
        to the server's ``idle_in_transaction_session_timeout``."""
        import psycopg

        row = self._db.execute("SELECT holder FROM leases WHERE campaign = ? AND"
                               " renewed_at + ttl_s < dse_now()", (campaign,)).fetchone()
        try:
            session = loads(row[0]).get("session") if row is not None else None
        except (ValueError, AttributeError):
            return
        if not isinstance(session, list) or len(session) != 2 or session == mine:
            return
        with contextlib.suppress(psycopg.Error):
            self._connection.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE pid = %s AND backend_start::text = %s", session)

    def commit(self, batch: Batch) -> None:
        """See :meth:`dse.record.Storage.commit`. The planner's statistics of the tables a
        run grows are refreshed as the rows this store added pass 500, 2,000, 8,000, ...:
        autovacuum's ANALYZE comes only after a minute, and a young record without
        statistics would read trials by a scan of the whole table instead of its indexes
        (a claim's lookup by configuration hash took 22 ms at 20,000 trials, not 0.1)."""
        added = sum(len(rows) for kind, rows in batch.changes() if kind in GROWING)
        super().commit(batch)
        self._added += added
        if self._added >= self._analyze_at:
            import psycopg

            self._analyze_at *= 4
            with contextlib.suppress(psycopg.Error):
                self._connection.execute("ANALYZE " + ", ".join(GROWING))

    def claim(self, wanted: Mapping[str, int], campaign: str, now: float, *,
              reuse: bool = True, run: int | None = None,
              orphan: Orphan | None = None) -> dict[str, Claim]:
        """See :meth:`dse.record.Storage.claim`. Row locks, not a serializable transaction
        (whose predicate locks made concurrent controllers' claims abort one another): the
        free configs are taken with ``INSERT … ON CONFLICT DO NOTHING``, the held ones locked
        (``FOR UPDATE``, in order) and judged, and those taken are looked up again for a
        result another controller committed meanwhile (its claim's release and its result
        are one transaction: either the insert waited for it, or the look again sees it)."""
        self._claiming = True
        return self._transaction(
            lambda: self._claim_rows(wanted, campaign, now, reuse, run, orphan), light=True)

    def _claim_rows(self, wanted: Mapping[str, int], campaign: str, now: float, reuse: bool,
                    run: int | None, orphan: Orphan | None) -> dict[str, Claim]:
        digests = sorted(wanted)
        out = self.reusable_results(digests, reuse, run)
        free = [d for d in digests if d not in out]
        taken = {r[0] for r in self._db.returning(
            "INSERT INTO claims(config_hash, trial_id, campaign, claimed_at) VALUES (?,?,?,?)"
            " ON CONFLICT (config_hash) DO NOTHING RETURNING config_hash",
            [(d, wanted[d], campaign, now) for d in free]) if r is not None}
        rest = [d for d in free if d not in taken]
        held = self.claims_held(rest, lock=" ORDER BY c.config_hash FOR UPDATE OF c")
        alive: dict[str, bool] = {campaign: False}
        for digest in free:
            out[digest] = (Claim(wanted[digest], mine=True) if digest in taken else
                           self.judged_claim(wanted[digest], held.get(digest), campaign, alive,
                                        orphan))
        self._db.executemany(CLAIM, [(d, wanted[d], campaign, now)
                                     for d in rest if out[d].mine])
        mine = [d for d in free if out[d].mine]
        again = self.reusable_results(mine, reuse, run)
        if again:  # recorded by another controller since the first look: reused
            self._db.executemany("DELETE FROM claims WHERE config_hash = ? AND trial_id = ?",
                                 [(d, wanted[d]) for d in again])
            out.update(again)
        return out

    def after_copy(self) -> None:
        """Each identity column's sequence past the rows copied with their ids; and the
        planner's statistics of the rows copied (a run on the record reads by its indexes
        from its first pass)."""
        def body() -> None:
            for table in IDENTITY_TABLES:
                self._connection.execute(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                    f" GREATEST((SELECT COALESCE(MAX(id), 0) FROM {table}), 1))")

        self._transaction(body)
        self._connection.execute("ANALYZE " + ", ".join(IDENTITY_TABLES))

    def _inserted_id(self, sql: str, params: Sequence[Any]) -> int:
        (row,) = self._db.execute(f"{sql} RETURNING id", params).fetchall()
        return int(row[0])

    def _inserted_ids(self, sql: str, rows: list[tuple[Any, ...]]) -> list[int]:
        return [int(r[0]) for r in self._db.returning(f"{sql} RETURNING id", rows)]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _number_loader() -> type:
    """A loader of ``numeric`` values (what ``SUM`` of integers gives) as Python numbers: an
    ``int`` when whole, as SQLite gives them."""
    from psycopg.adapt import Loader

    class NumberLoader(Loader):
        def load(self, data: Any) -> int | float:
            text = bytes(data)
            try:
                return int(text)
            except ValueError:
                return float(text)

    return NumberLoader
