"""The durable record: one SQLite file per workspace.

Every state change is buffered in a :class:`Batch` and committed in one transaction per
polling pass, before the engine acts on it, with ``synchronous=FULL``: a committed pass
survives a crash of the process or of the machine. The journal depends on where the file
lives: WAL on a local disk; a rollback journal (``DELETE``) on a network file system (NFS,
Lustre, GPFS…, where shared clusters keep home directories), because WAL's shared-memory
index only works when every connection runs on one host. ``DSE_SQLITE_JOURNAL`` (``wal`` or
``delete``) overrides the choice.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse._budget import Spend
from dse._errors import ConfigError, StoreError
from dse._records import (
    AgentCall,
    Attempt,
    AttemptSpend,
    CampaignRun,
    EnvironmentRecord,
    Event,
    Invalidation,
    Score,
    Trial,
    TrialRef,
)
from dse._types import AttemptState, CampaignStatus, FailureClass, TrialStatus

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

SCHEMA_VERSION = 8
DB_NAME = "dse.sqlite"
JOURNAL_ENV = "DSE_SQLITE_JOURNAL"

NETWORK_FILESYSTEMS = frozenset({
    "9p", "afs", "beegfs", "ceph", "cifs", "fuse.ceph", "fuse.cephfs", "fuse.glusterfs",
    "fuse.sshfs", "gfs2", "glusterfs", "gpfs", "lustre", "ncpfs", "nfs", "nfs4", "ocfs2",
    "orangefs", "panfs", "pvfs2", "smb3", "smbfs", "wekafs",
})
"""File system types (as ``/proc/self/mountinfo`` names them) that get a rollback journal."""

_MOUNTINFO = "/proc/self/mountinfo"
_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: str | Path, mountinfo: str) -> tuple[str, str]:
    """The mount point and file system type holding *path* (absolute and resolved), read
    from the text of a ``/proc/<pid>/mountinfo`` file; ``("", "unknown")`` when none does."""
    target = str(path)
    best, fstype = "", "unknown"
    for line in mountinfo.splitlines():
        # Optional fields come before the " - " separator; the type is the first one after.
        head, sep, tail = line.partition(" - ")
        fields, tail_fields = head.split(), tail.split()
        if not sep or len(fields) < 5 or not tail_fields:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        # A later mount on the same point hides the earlier one: ">=" keeps the last.
        if inside and len(point) >= len(best):
            best, fstype = point, tail_fields[0]
    return best, fstype


def filesystem_type(path: str | Path) -> str:
    """The type of the file system holding *path* (``ext4``, ``nfs4``, ``lustre``…).

    *path* is resolved (symbolic links followed, it need not exist) and matched against the
    mount table of this process; ``"unknown"`` where there is none (not Linux).
    """
    target = Path(path).resolve()
    try:
        text = Path(_MOUNTINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    return mount_of(target, text)[1]


def _journal_mode(path: Path) -> str:
    """``wal`` or ``delete`` for the database at *path*."""
    wanted = os.environ.get(JOURNAL_ENV, "").strip().lower()
    if wanted:
        if wanted not in ("wal", "delete"):
            raise ConfigError(
                f"{JOURNAL_ENV}={os.environ[JOURNAL_ENV]!r}: expected 'wal' or 'delete'"
            )
        return wanted
    return "delete" if filesystem_type(path.parent) in NETWORK_FILESYSTEMS else "wal"


# -- reads: rows as values ---------------------------------------------------------------------

_loads = json.JSONDecoder().decode
_TRIAL_STATUS = {s.value: s for s in TrialStatus}
_FAILURE: dict[str | None, FailureClass | None] = {f.value: f for f in FailureClass}
_FAILURE[None] = None
_ATTEMPT_STATE = {s.value: s for s in AttemptState}
_CAMPAIGN_STATUS = {s.value: s for s in CampaignStatus}

_CAMPAIGN = ("id, name, source, spec, agent, backend, mode, max_parallelism, status,"
             " end_reason, created_at, ended_at")
_TRIAL = ("id, campaign_id, number, proposal, wave, config_hash, params, status, failure,"
          " message, metrics, score, cache_of, trial_dir, data_version, data_version_read,"
          " dependencies, replaces, invalidation, created_at, ended_at")
_ATTEMPT = ("id, trial_id, attempt, backend, job_id, state, exit_code, signal, node, reason,"
            " peak_rss_kb, resumed, work_lost_s, usage, spend, expected_s, submitted_at,"
            " started_at, ended_at")
_SCORE = "id, trial_id, scorer, scorer_version, score, baseline_trial, created_at, invalidation"


def _columns(names: str, table: str) -> str:
    """*names* (``"a, b"``) qualified by a table alias (``"t.a, t.b"``)."""
    return ", ".join(f"{table}.{name}" for name in names.split(", "))


_TRIAL_T = _columns(_TRIAL, "t")
_ATTEMPT_A = _columns(_ATTEMPT, "a")
_SCORE_S = _columns(_SCORE, "s")
_TRIAL_REF = "t.id, t.campaign_id, c.name, t.number"
_TRIAL_REF_FROM = "FROM trials t JOIN campaigns c ON c.id = t.campaign_id"

_TRIAL_FORM = re.compile(r"(?P<campaign>.+)-(?P<run>\d+)-(?P<number>\d+)")
_SHORT_FORM = re.compile(r"(?P<run>[^:]+):(?P<number>\d+)")
_FORMS = "<campaign>-<run>-<number>, <campaign>:<number> or <run>:<number>"


def _campaign(r: tuple[Any, ...]) -> CampaignRun:
    return CampaignRun(r[0], r[1], r[2], _loads(r[3]) if r[3] else {}, r[4], r[5], r[6], r[7],
                       _CAMPAIGN_STATUS[r[8]], r[9], r[10], r[11])


def _trial(r: tuple[Any, ...]) -> Trial:
    return Trial(r[0], r[1], r[2], r[3], r[4], r[5], r[6], _TRIAL_STATUS[r[7]], _FAILURE[r[8]],
                 r[9], r[10], r[11], r[12], r[13], r[14], r[15], r[16], r[17], r[18], r[19],
                 r[20])


def _spend(text: str) -> Spend:
    return Spend(**_loads(text))


def _attempt(r: tuple[Any, ...]) -> Attempt:
    return Attempt(r[0], r[1], r[2], r[3], r[4], _ATTEMPT_STATE[r[5]], r[6], r[7], r[8], r[9],
                   r[10], bool(r[11]), r[12], r[13], r[14], r[15], r[16], r[17], r[18])


def _score(r: tuple[Any, ...]) -> Score:
    return Score(*r)


def _trial_ref(r: tuple[Any, ...]) -> TrialRef:
    return TrialRef(*r)


class _Reads:
    """The read side of the :class:`Store`: every read returns the values of
    :mod:`dse._records`, never a driver row; the SQL stays here."""

    __slots__ = ()
    path: Path
    _db: sqlite3.Connection

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.execute(sql, params).fetchall()

    def _in(self, sql: str, ids: Iterable[int], *rest: Any) -> list[tuple[Any, ...]]:
        """*sql* with ``{marks}`` run once per chunk of *ids* (bound first, then *rest*)."""
        out: list[tuple[Any, ...]] = []
        for chunk in _chunks(sorted(set(ids))):
            marks = ",".join("?" * len(chunk))
            out += self._rows(sql.format(marks=marks), (*chunk, *rest))
        return out

    # -- campaign runs --------------------------------------------------------------------

    def campaigns(self) -> list[CampaignRun]:
        """Every run of the workspace, oldest first."""
        return [_campaign(r) for r in self._rows(f"SELECT {_CAMPAIGN} FROM campaigns ORDER BY id")]

    def campaign(self, campaign_id: int) -> CampaignRun | None:
        """Run *campaign_id*, or ``None`` when the record has none."""
        rows = self._rows(f"SELECT {_CAMPAIGN} FROM campaigns WHERE id = ?", (campaign_id,))
        return _campaign(rows[0]) if rows else None

    def find_campaign(self, name_or_id: str) -> CampaignRun | None:
        """The latest run of the campaign *name_or_id* (a name, or a numeric run id)."""
        if name_or_id.isdigit():
            return self.campaign(int(name_or_id))
        rows = self._rows(
            f"SELECT {_CAMPAIGN} FROM campaigns WHERE name = ? ORDER BY id DESC LIMIT 1",
            (name_or_id,),
        )
        return _campaign(rows[0]) if rows else None

    def campaign_started(self, campaign_id: int) -> float:
        """When run *campaign_id* was created (its wall-clock budget counts from there)."""
        rows = self._rows("SELECT created_at FROM campaigns WHERE id = ?", (campaign_id,))
        return float(rows[0][0]) if rows else 0.0

    # -- trials ---------------------------------------------------------------------------

    def trials(self, campaign_id: int) -> list[Trial]:
        """The trials of run *campaign_id*, by number."""
        return [_trial(r) for r in self._rows(
            f"SELECT {_TRIAL} FROM trials WHERE campaign_id = ? ORDER BY number", (campaign_id,)
        )]

    def find_trial(self, text: str) -> tuple[CampaignRun, Trial]:
        """The run and the trial *text* names: a trial id ``<campaign>-<run>-<number>``, or
        ``<campaign>:<number>`` (the latest run of the campaign) or ``<run>:<number>``.

        :raises ConfigError: when *text* has none of these forms or names nothing recorded.
        """
        short = _SHORT_FORM.fullmatch(text)
        full = None if short else _TRIAL_FORM.fullmatch(text)
        if short is not None:
            run = self.find_campaign(short["run"])
            if run is None:
                raise ConfigError(f"{self.path}: no campaign run named {short['run']!r}")
            number = int(short["number"])
        elif full is not None:
            run = self.campaign(int(full["run"]))
            if run is None or run.name != full["campaign"]:
                raise ConfigError(
                    f"{self.path}: no run {full['run']} of a campaign named {full['campaign']!r}"
                )
            number = int(full["number"])
        else:
            raise ConfigError(f"trial {text!r}: expected {_FORMS}")
        rows = self._rows(f"SELECT {_TRIAL} FROM trials WHERE campaign_id = ? AND number = ?",
                          (run.id, number))
        if not rows:
            raise ConfigError(f"{self.path}: run {run.id} of {run.name} has no trial {number}")
        return run, _trial(rows[0])

    def reusable(self) -> list[Trial]:
        """Finished, reusable trials (completed or failed, not invalidated) of the whole
        workspace, oldest first."""
        return [_trial(r) for r in self._rows(
            f"SELECT {_TRIAL} FROM trials WHERE status IN ('completed', 'failed')"
            " AND cache_of IS NULL AND invalidation IS NULL ORDER BY id"
        )]

    def trial_counts(self, campaign_id: int) -> dict[TrialStatus, int]:
        """How many trials of run *campaign_id* stand at each status (those with any)."""
        return {_TRIAL_STATUS[status]: n for status, n in self._rows(
            "SELECT status, COUNT(*) FROM trials WHERE campaign_id = ? GROUP BY status"
            " ORDER BY status", (campaign_id,),
        )}

    def trial_statuses(self, rows: Iterable[int]) -> dict[int, TrialStatus]:
        """The status of each trial row of *rows* the record has (of any run)."""
        return {row: _TRIAL_STATUS[status] for row, status in self._in(
            "SELECT id, status FROM trials WHERE id IN ({marks})", rows
        )}

    def trial_refs(self, rows: Iterable[int]) -> dict[int, TrialRef]:
        """Where each trial row of *rows* the record has is (of any run)."""
        return {r[0]: _trial_ref(r) for r in self._in(
            f"SELECT {_TRIAL_REF} {_TRIAL_REF_FROM} WHERE t.id IN ({{marks}})", rows
        )}

    def replacements(self, rows: Iterable[int]) -> dict[int, list[TrialRef]]:
        """The trials (of any run) that re-run each invalidated trial row of *rows*, oldest
        first; rows nothing replaces are left out."""
        out: dict[int, list[TrialRef]] = {}
        for r in self._in(f"SELECT {_TRIAL_REF}, t.replaces {_TRIAL_REF_FROM}"
                          " WHERE t.replaces IN ({marks}) ORDER BY t.id", rows):
            out.setdefault(r[4], []).append(_trial_ref(r[:4]))
        return out

    def dispatched(self, campaign_id: int) -> int:
        """Trials of run *campaign_id* that ran on the backend (not cache hits): what a
        trials ceiling counts."""
        ((n,),) = self._rows(
            "SELECT COUNT(*) FROM trials t WHERE t.campaign_id = ? AND t.cache_of IS NULL"
            " AND EXISTS (SELECT 1 FROM attempts a WHERE a.trial_id = t.id)", (campaign_id,),
        )
        return int(n)

    # -- attempts -------------------------------------------------------------------------

    def attempts(self, campaign_id: int) -> list[Attempt]:
        """The attempts of run *campaign_id*, by trial number then attempt."""
        return [_attempt(r) for r in self._rows(
            f"SELECT {_ATTEMPT_A} FROM attempts a JOIN trials t ON a.trial_id = t.id"
            " WHERE t.campaign_id = ? ORDER BY t.number, a.attempt", (campaign_id,),
        )]

    def spends(self, campaign_id: int) -> list[AttemptSpend]:
        """The recorded spend of every attempt of run *campaign_id* that has one."""
        return [AttemptSpend(trial, _spend(spend)) for trial, spend in self._rows(
            "SELECT a.trial_id, a.spend FROM attempts a JOIN trials t ON a.trial_id = t.id"
            " WHERE t.campaign_id = ? AND a.spend IS NOT NULL", (campaign_id,),
        )]

    def trial_spends(self, rows: Iterable[int]) -> list[AttemptSpend]:
        """The recorded spend of every attempt of the trial rows *rows* (of any run) that
        has one, by trial row then attempt."""
        found = self._in("SELECT trial_id, attempt, spend FROM attempts"
                         " WHERE trial_id IN ({marks}) AND spend IS NOT NULL", rows)
        return [AttemptSpend(trial, _spend(spend)) for trial, _, spend in sorted(found)]

    # -- what a run noted -----------------------------------------------------------------

    def events(self, campaign_id: int, kind: str | None = None) -> list[Event]:
        """The events of run *campaign_id* (only those of *kind*, when given), in order."""
        if kind is None:
            rows = self._rows("SELECT id, campaign_id, trial_id, at, kind, data FROM events"
                              " WHERE campaign_id = ? ORDER BY id", (campaign_id,))
        else:
            rows = self._rows("SELECT id, campaign_id, trial_id, at, kind, data FROM events"
                              " WHERE campaign_id = ? AND kind = ? ORDER BY id",
                              (campaign_id, kind))
        return [Event(r[0], r[1], r[2], r[3], r[4], _loads(r[5]) if r[5] else None)
                for r in rows]

    def agent_log(self, campaign_id: int) -> list[AgentCall]:
        """The agent's calls of run *campaign_id*, in the order they were made."""
        return [
            AgentCall(r[0], r[1], r[2], r[3], _loads(r[4]), _loads(r[5]) if r[5] else None)
            for r in self._rows("SELECT id, campaign_id, kind, n, proposals, in_flight"
                                " FROM agent_log WHERE campaign_id = ? ORDER BY id",
                                (campaign_id,))
        ]

    # -- conclusions and flags ------------------------------------------------------------

    def scores(self, campaign_id: int) -> list[Score]:
        """Every score given to a trial of run *campaign_id*, oldest first."""
        return [_score(r) for r in self._rows(
            f"SELECT {_SCORE_S} FROM scores s JOIN trials t ON t.id = s.trial_id"
            " WHERE t.campaign_id = ? ORDER BY s.id", (campaign_id,),
        )]

    def environments(self, digests: Iterable[str]) -> dict[str, EnvironmentRecord]:
        """The recorded environment of each digest of *digests* the record has."""
        wanted = sorted(set(digests))
        out: dict[str, EnvironmentRecord] = {}
        for chunk in (wanted[i : i + 500] for i in range(0, len(wanted), 500)):
            marks = ",".join("?" * len(chunk))
            for digest, python, distributions in self._rows(
                "SELECT digest, python, distributions FROM environments"
                f" WHERE digest IN ({marks})", chunk,
            ):
                out[digest] = EnvironmentRecord(digest, python, _loads(distributions))
        return out

    def invalidations(self) -> list[Invalidation]:
        """Every ``dse invalidate`` of the workspace, oldest first."""
        return [Invalidation(*r) for r in self._rows(
            "SELECT id, at, kind, target, reason, trials, scores FROM invalidations ORDER BY id"
        )]

    def invalid_trials(self) -> list[Trial]:
        """Trials of the workspace whose result, or whose score, is flagged invalid;
        :attr:`Trial.invalidation` is ``None`` when only a score is."""
        return [_trial(r) for r in self._rows(
            f"SELECT {_TRIAL} FROM trials WHERE invalidation IS NOT NULL"
            " OR id IN (SELECT trial_id FROM scores WHERE invalidation IS NOT NULL)"
        )]

    def invalid_reasons(self, campaign_id: int) -> dict[int, str]:
        """Trial row → why it is flagged invalid (its result's invalidation, else its
        score's), for the flagged trials of run *campaign_id*."""
        out: dict[int, str] = {}
        for row, reason in self._rows(
            "SELECT t.id, i.reason FROM trials t JOIN invalidations i ON i.id = t.invalidation"
            " WHERE t.campaign_id = ? UNION ALL"
            " SELECT t.id, i.reason FROM scores s JOIN trials t ON t.id = s.trial_id"
            " JOIN invalidations i ON i.id = s.invalidation WHERE t.campaign_id = ?",
            (campaign_id, campaign_id),
        ):
            out.setdefault(int(row), str(reason))
        return out

    def invalid_scores(self, campaign_id: int) -> set[int]:
        """The trial rows of run *campaign_id* with a score flagged invalid."""
        return {int(row) for (row,) in self._rows(
            "SELECT s.trial_id FROM scores s JOIN trials t ON t.id = s.trial_id"
            " WHERE t.campaign_id = ? AND s.invalidation IS NOT NULL", (campaign_id,),
        )}


_NEW_TABLES_7 = """
CREATE TABLE IF NOT EXISTS scores (
    id INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    scorer TEXT NOT NULL,
    scorer_version TEXT NOT NULL,
    score REAL NOT NULL,
    baseline_trial INTEGER REFERENCES trials(id),
    created_at REAL NOT NULL,
    invalidation INTEGER REFERENCES invalidations(id)
);
CREATE INDEX IF NOT EXISTS scores_trial ON scores(trial_id);
CREATE INDEX IF NOT EXISTS scores_baseline ON scores(baseline_trial);
CREATE TABLE IF NOT EXISTS invalidations (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    reason TEXT NOT NULL,
    trials INTEGER NOT NULL,
    scores INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS environments (
    digest TEXT PRIMARY KEY,
    python TEXT,
    distributions TEXT NOT NULL
)
"""

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    3: ("ALTER TABLE attempts ADD COLUMN usage TEXT",),
    4: ("ALTER TABLE attempts ADD COLUMN spend TEXT",),
    5: ("ALTER TABLE trials ADD COLUMN data_version TEXT",
        "ALTER TABLE trials ADD COLUMN data_version_read TEXT"),
    6: ("ALTER TABLE trials ADD COLUMN dependencies TEXT",
        "ALTER TABLE trials ADD COLUMN replaces INTEGER REFERENCES trials(id)",
        "ALTER TABLE trials ADD COLUMN invalidation INTEGER REFERENCES invalidations(id)",
        *_NEW_TABLES_7.split(";")),
    7: ("ALTER TABLE attempts ADD COLUMN expected_s REAL",),
}
"""Statements that take a record from schema version *key* to *key* + 1."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS campaigns (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    source TEXT,
    spec TEXT NOT NULL,
    agent TEXT NOT NULL,
    backend TEXT NOT NULL,
    mode TEXT NOT NULL,
    max_parallelism INTEGER NOT NULL,
    status TEXT NOT NULL,
    end_reason TEXT,
    created_at REAL NOT NULL,
    ended_at REAL
);
CREATE INDEX IF NOT EXISTS campaigns_name ON campaigns(name);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY,
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    number INTEGER NOT NULL,
    proposal INTEGER NOT NULL,
    wave INTEGER NOT NULL,
    config_hash TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    failure TEXT,
    message TEXT,
    metrics TEXT,
    score REAL,
    cache_of INTEGER REFERENCES trials(id),
    trial_dir TEXT,
    data_version TEXT,
    data_version_read TEXT,
    dependencies TEXT,
    replaces INTEGER REFERENCES trials(id),
    invalidation INTEGER REFERENCES invalidations(id),
    created_at REAL NOT NULL,
    ended_at REAL,
    UNIQUE (campaign_id, number)
);
CREATE INDEX IF NOT EXISTS trials_hash ON trials(config_hash);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    attempt INTEGER NOT NULL,
    backend TEXT NOT NULL,
    job_id TEXT,
    state TEXT NOT NULL,
    exit_code INTEGER,
    signal INTEGER,
    node TEXT,
    reason TEXT,
    peak_rss_kb INTEGER,
    resumed INTEGER NOT NULL DEFAULT 0,
    work_lost_s REAL,
    usage TEXT,
    spend TEXT,
    expected_s REAL,
    submitted_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    UNIQUE (trial_id, attempt)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    trial_id INTEGER REFERENCES trials(id),
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT
);
CREATE INDEX IF NOT EXISTS events_campaign ON events(campaign_id, kind);
CREATE TABLE IF NOT EXISTS agent_log (
    id INTEGER PRIMARY KEY,
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    kind TEXT NOT NULL,
    n INTEGER,
    proposals TEXT NOT NULL,
    in_flight TEXT
);
CREATE INDEX IF NOT EXISTS agent_log_campaign ON agent_log(campaign_id, id);
""" + _NEW_TABLES_7


dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
"""Compact JSON for record columns (one encoder, built once: this is on the hot path)."""


@dataclass(slots=True)
class Batch:
    """State changes of one polling pass, committed together by :meth:`Store.commit`."""

    trials: list[tuple[Any, ...]] = field(default_factory=list)
    trial_ends: list[tuple[Any, ...]] = field(default_factory=list)
    attempts: list[tuple[Any, ...]] = field(default_factory=list)
    attempt_updates: list[tuple[Any, ...]] = field(default_factory=list)
    attempt_ends: list[tuple[Any, ...]] = field(default_factory=list)
    attempt_usage: list[tuple[Any, ...]] = field(default_factory=list)
    """(usage JSON, attempt row): what the backend's accounting charged an attempt."""
    trial_data: list[tuple[Any, ...]] = field(default_factory=list)
    """(expected data version, version read, trial row): what data a trial ran against."""
    attempt_spend: list[tuple[Any, ...]] = field(default_factory=list)
    attempt_expected: list[tuple[Any, ...]] = field(default_factory=list)
    """(expected seconds, attempt row): the run time the scheduler expected when it started."""
    """(spend JSON, attempt row): what an attempt cost (wall, compute seconds, money)."""
    scores: list[tuple[Any, ...]] = field(default_factory=list)
    """(trial row, scorer, scorer version, score, baseline trial row, at): one conclusion."""
    environments: list[tuple[Any, ...]] = field(default_factory=list)
    """(digest, python, distributions JSON): an environment trials ran in, stored once."""
    trial_links: list[tuple[Any, ...]] = field(default_factory=list)
    """(dependencies digest, replaced trial row, trial row): what ran, what it re-runs."""
    events: list[tuple[Any, ...]] = field(default_factory=list)
    campaign_updates: list[tuple[Any, ...]] = field(default_factory=list)
    agent_log: list[tuple[Any, ...]] = field(default_factory=list)
    """The agent's propose and observe calls, replayed to rebuild it after a crash."""

    def __bool__(self) -> bool:
        return bool(
            self.trials or self.trial_ends or self.attempts or self.attempt_updates
            or self.attempt_ends or self.attempt_usage or self.attempt_spend
            or self.attempt_expected or self.trial_data
            or self.scores or self.environments or self.trial_links or self.events
            or self.campaign_updates or self.agent_log
        )


class Store(_Reads):
    """The SQLite record of a workspace (``<workspace>/dse.sqlite``).

    ``journal_mode`` is the journal SQLite runs with: ``wal`` on a local disk, ``delete``
    (a rollback journal) on a network file system or when ``DSE_SQLITE_JOURNAL`` says so.
    """

    def __init__(self, path: str | Path, *, durable: bool = True) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            wanted = _journal_mode(self.path)
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{self.path}: cannot open the record ({exc})") from None
        db = self._db
        try:
            try:
                row = db.execute(f"PRAGMA journal_mode={wanted}").fetchone()
            except sqlite3.OperationalError:
                # Leaving WAL needs the file to itself; another connection has it open.
                row = db.execute("PRAGMA journal_mode").fetchone()
            self.journal_mode: str = str(row[0]).lower()
            db.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a dse record ({exc})") from None
        self._next_trial = self._max_id("trials") + 1
        self._next_attempt = self._max_id("attempts") + 1

    def _init_schema(self) -> None:
        db = self._db
        try:
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError:
            row = None
        if row is not None:
            if int(row[0]) in _MIGRATIONS:
                self._migrate(int(row[0]))
            elif int(row[0]) != SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {row[0]}, this dse reads {SCHEMA_VERSION}"
                )
            return
        db.execute("BEGIN IMMEDIATE")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )
        db.execute("COMMIT")

    def _migrate(self, version: int) -> None:
        """Bring a record written by an older dse up to :data:`SCHEMA_VERSION`, in place."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        while version != SCHEMA_VERSION:
            for statement in _MIGRATIONS[version]:
                if statement.strip():
                    db.execute(statement)
            version += 1
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(version),))
        db.execute("COMMIT")

    def _max_id(self, table: str) -> int:
        row = self._db.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()
        return int(row[0])

    def close(self) -> None:
        self._db.close()

    # -- ids ------------------------------------------------------------------------------

    def new_trial_id(self) -> int:
        value = self._next_trial
        self._next_trial += 1
        return value

    def new_attempt_id(self) -> int:
        value = self._next_attempt
        self._next_attempt += 1
        return value

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

    def commit(self, batch: Batch) -> None:
        """Write every change of *batch* in one transaction, then clear it."""
        if not batch:
            return
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if batch.trials:
                db.executemany(
                    "INSERT INTO trials(id, campaign_id, number, proposal, wave, config_hash,"
                    " params, status, failure, message, metrics, score, cache_of, trial_dir,"
                    " created_at, ended_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    batch.trials,
                )
            if batch.attempts:
                db.executemany(
                    "INSERT INTO attempts(id, trial_id, attempt, backend, job_id, state,"
                    " submitted_at, resumed) VALUES (?,?,?,?,?,?,?,?)",
                    batch.attempts,
                )
            if batch.attempt_updates:
                db.executemany(
                    "UPDATE attempts SET job_id=?, state=?, started_at=COALESCE(?, started_at)"
                    " WHERE id=?",
                    batch.attempt_updates,
                )
            if batch.attempt_ends:
                db.executemany(
                    "UPDATE attempts SET job_id=?, state=?, exit_code=?, signal=?, node=?,"
                    " reason=?, peak_rss_kb=?, started_at=COALESCE(?, started_at), ended_at=?,"
                    " work_lost_s=? WHERE id=?",
                    batch.attempt_ends,
                )
            if batch.attempt_usage:
                db.executemany("UPDATE attempts SET usage=? WHERE id=?", batch.attempt_usage)
            if batch.trial_data:
                db.executemany(
                    "UPDATE trials SET data_version=COALESCE(?, data_version),"
                    " data_version_read=COALESCE(?, data_version_read) WHERE id=?",
                    batch.trial_data,
                )
            if batch.attempt_spend:
                db.executemany("UPDATE attempts SET spend=? WHERE id=?", batch.attempt_spend)
            if batch.attempt_expected:
                db.executemany(
                    "UPDATE attempts SET expected_s=? WHERE id=?", batch.attempt_expected
                )
            if batch.trial_ends:
                db.executemany(
                    "UPDATE trials SET status=?, failure=?, message=?, metrics=?, score=?,"
                    " ended_at=? WHERE id=?",
                    batch.trial_ends,
                )
            if batch.environments:
                db.executemany(
                    "INSERT OR IGNORE INTO environments(digest, python, distributions)"
                    " VALUES (?,?,?)",
                    batch.environments,
                )
            if batch.trial_links:
                db.executemany(
                    "UPDATE trials SET dependencies=COALESCE(?, dependencies),"
                    " replaces=COALESCE(?, replaces) WHERE id=?",
                    batch.trial_links,
                )
            if batch.scores:
                db.executemany(
                    "INSERT INTO scores(trial_id, scorer, scorer_version, score,"
                    " baseline_trial, created_at) VALUES (?,?,?,?,?,?)",
                    batch.scores,
                )
            if batch.events:
                db.executemany(
                    "INSERT INTO events(campaign_id, trial_id, at, kind, data)"
                    " VALUES (?,?,?,?,?)",
                    batch.events,
                )
            if batch.agent_log:
                db.executemany(
                    "INSERT INTO agent_log(campaign_id, kind, n, proposals, in_flight)"
                    " VALUES (?,?,?,?,?)",
                    batch.agent_log,
                )
            if batch.campaign_updates:
                db.executemany(
                    "UPDATE campaigns SET status=?, end_reason=?, ended_at=? WHERE id=?",
                    batch.campaign_updates,
                )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        batch.trials.clear()
        batch.trial_ends.clear()
        batch.attempts.clear()
        batch.attempt_updates.clear()
        batch.attempt_ends.clear()
        batch.attempt_usage.clear()
        batch.attempt_spend.clear()
        batch.attempt_expected.clear()
        batch.trial_data.clear()
        batch.scores.clear()
        batch.environments.clear()
        batch.trial_links.clear()
        batch.events.clear()
        batch.campaign_updates.clear()
        batch.agent_log.clear()

    # -- reads ----------------------------------------------------------------------------

    def last_invalidation(self) -> int:
        """The id of the latest invalidation (0: none); cheap enough to ask every pass."""
        return self._max_id("invalidations")

    # TRANSITION: removed once _engine asks trial_statuses() (its only caller); no other
    # module may run SQL through the store.
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        self._db.row_factory = sqlite3.Row
        try:
            return self._db.execute(sql, params).fetchall()
        finally:
            self._db.row_factory = None

    # -- changes outside a polling pass -------------------------------------------------

    def invalidate(
        self, kind: str, target: str, reason: str, now: float, *, trial_row: int | None = None
    ) -> tuple[int, int, int] | None:
        """Flag results invalid, and every comparison that used them; delete nothing.

        *kind* ``trial`` (*target*: the trial as the user named it, *trial_row*: its row)
        flags that trial and the cache hits that reuse it; ``data_version`` flags every trial
        that ran against, or read, version *target*; ``scorer_version`` flags the scores given
        by that scorer version (*target*: ``<version>`` or ``<scorer>==<version>``). The
        scores of flagged trials, and the scores compared against a flagged trial as their
        baseline, are flagged too. Something already flagged keeps its first reason.

        Returns (invalidation id, trials newly flagged, scores newly flagged), or ``None``
        when nothing in the record matches *target* (nothing is written then).
        """
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            trial_ids: list[int] = []
            score_ids: list[int] = []
            if kind == "trial":
                rows = db.execute(
                    "SELECT id FROM trials WHERE id = ? OR cache_of = ?", (trial_row, trial_row)
                ).fetchall()
                trial_ids = [int(r[0]) for r in rows]
            elif kind == "data_version":
                # The trials of that version, and the cache hits that reuse one of them.
                rows = db.execute(
                    "WITH v AS (SELECT id FROM trials WHERE data_version = ?1"
                    " OR data_version_read = ?1)"
                    " SELECT id FROM v UNION SELECT id FROM trials WHERE cache_of IN v",
                    (target,),
                ).fetchall()
                trial_ids = sorted(int(r[0]) for r in rows)
            elif kind == "scorer_version":
                rows = db.execute(
                    "SELECT id FROM scores WHERE scorer_version = ?"
                    " OR scorer || '==' || scorer_version = ?", (target, target),
                ).fetchall()
                score_ids = [int(r[0]) for r in rows]
            else:
                raise ValueError(f"unknown invalidation kind {kind!r}")
            if not trial_ids and not score_ids:
                db.execute("ROLLBACK")
                return None
            cursor = db.execute(
                "INSERT INTO invalidations(at, kind, target, reason, trials, scores)"
                " VALUES (?, ?, ?, ?, 0, 0)", (now, kind, target, reason),
            )
            mark = cursor.lastrowid
            flagged_trials = 0
            for chunk in _chunks(trial_ids):
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
            for chunk in _chunks(score_ids):
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
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        assert mark is not None
        return mark, flagged_trials, int(flagged_scores)

    def reopen_campaign(self, campaign_id: int) -> None:
        """Mark a run as running again (it is being resumed)."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "UPDATE campaigns SET status='running', end_reason=NULL, ended_at=NULL"
            " WHERE id=?",
            (campaign_id,),
        )
        db.execute("COMMIT")


def _chunks(ids: Sequence[int], size: int = 500) -> list[Sequence[int]]:
    """*ids* in pieces small enough for SQLite's limit on bound parameters."""
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def workspace_db(workspace: str | Path) -> Path:
    return Path(workspace) / DB_NAME


def open_existing(workspace: str | Path) -> Store:
    """Open the record of an existing workspace (for reading commands)."""
    path = workspace_db(workspace)
    if not path.is_file():
        raise StoreError(f"{path}: no dse record here (run `dse run CAMPAIGN.toml` first)")
    if not os.access(path, os.R_OK):
        raise StoreError(f"{path}: not readable")
    return Store(path)
