"""The durable record: one SQLite file per workspace.

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
import functools
import json
import os
import re
import sqlite3
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from dse.model._errors import ConfigError, DamagedRecordError, StorageError, StoreError
from dse.model._numbers import is_int64, record_number
from dse.model._spend import Earlier, Spend
from dse.model._states import (
    REUSED_FAILURES,
    AttemptState,
    CampaignStatus,
    FailureClass,
    TrialStatus,
)
from dse.record._busy import BusyWait
from dse.record._records import (
    AgentCall,
    AgentSnapshot,
    Attempt,
    AttemptSpend,
    CampaignRun,
    Claim,
    DecisionRow,
    EnvironmentRecord,
    Event,
    Invalidation,
    ProgressRow,
    Score,
    Trial,
    TrialRef,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

_T = TypeVar("_T")
if TYPE_CHECKING:
    Orphan: TypeAlias = Callable[[str | None, Path, int], bool]
    """Whether an attempt (job id, trial directory, attempt number) a gone controller
    started still runs: :meth:`dse.Backend.still_running`."""

SCHEMA_VERSION = 17
TRY_S = 0.5
"""How long one try of a statement waits for a record another process holds (SQLite's busy
timeout) before dse looks who holds it, sees a Ctrl+C, and tries again."""
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
REUSABLE = ("(status IN ('completed', 'stopped') OR (status = 'failed' AND failure IN ("
            + ", ".join(sorted(f"'{f.value}'" for f in REUSED_FAILURES)) + ")))")
"""The trials whose result a later identical proposal may reuse (:func:`dse.model._types.reusable`,
in SQL): the one place the record says so."""

_TRIAL = ("id, campaign_id, number, proposal, wave, config_hash, params, status, failure,"
          " message, metrics, score, cache_of, trial_dir, data_version, data_version_read,"
          " dependencies, replaces, invalidation, created_at, ended_at, stop_step, scores")
_ATTEMPT = ("id, trial_id, attempt, backend, job_id, state, exit_code, signal, node, reason,"
            " peak_rss_kb, resumed, work_lost_s, usage, spend, expected_s, submitted_at,"
            " started_at, ended_at")
_SCORE = ("id, trial_id, scorer, scorer_version, score, baseline_trial, created_at, invalidation,"
          " scores")


def _columns(names: str, table: str) -> str:
    """*names* (``"a, b"``) qualified by a table alias (``"t.a, t.b"``)."""
    return ", ".join(f"{table}.{name}" for name in names.split(", "))


_TRIAL_T = _columns(_TRIAL, "t")
_ATTEMPT_A = _columns(_ATTEMPT, "a")
_SCORE_S = _columns(_SCORE, "s")
REUSABLE_ROW = f"{REUSABLE} AND cache_of IS NULL AND invalidation IS NULL"
"""THE test of whether a finished trial row's result may be reused by an identical proposal
(a SQL condition on ``trials``, unqualified columns): every lookup of a reusable result —
:meth:`Store.claim` above all — goes through it."""

_TRIAL_REF = "t.id, t.campaign_id, c.name, t.number"
_TRIAL_REF_FROM = "FROM trials t JOIN campaigns c ON c.id = t.campaign_id"

_TRIAL_FORM = re.compile(r"(?P<campaign>.+)-(?P<run>[0-9]+)-(?P<number>[0-9]+)")
_SHORT_FORM = re.compile(r"(?P<run>[^:]+):(?P<number>[0-9]+)")
_FORMS = "<campaign>-<run>-<number>, <campaign>:<number> or <run>:<number>"


def _campaign(r: tuple[Any, ...]) -> CampaignRun:
    return CampaignRun(r[0], r[1], r[2], _loads(r[3]) if r[3] else {}, r[4], r[5], r[6], r[7],
                       _CAMPAIGN_STATUS[r[8]], r[9], r[10], r[11])


def _trial(r: tuple[Any, ...], root: Path) -> Trial:
    return Trial(r[0], r[1], r[2], r[3], r[4], r[5], r[6], _TRIAL_STATUS[r[7]], _FAILURE[r[8]],
                 r[9], r[10], r[11], r[12], _absolute(r[13], root), r[14], r[15], r[16], r[17],
                 r[18], r[19], r[20], r[21], r[22])


def _absolute(stored: str | None, root: Path) -> str | None:
    """A trial directory the record keeps, as a path of this machine: one recorded where the
    workspace *root* lay before it moved (or was copied) whole is read where it is now, since
    every run puts its trials in ``<campaign>/run-<run>/<number>`` of its workspace."""
    if not stored or stored.startswith(f"{root}{os.sep}") or not os.path.isabs(stored):
        return stored
    head, number = os.path.split(stored)
    head, run = os.path.split(head)
    campaign = os.path.basename(head)
    if not (number.isdigit() and run.startswith("run-") and campaign):
        return stored  # not where dse puts trials: as recorded
    return os.path.join(root, campaign, run, number)


def _spend(text: str) -> Spend:
    return Spend(**_loads(text))


def _attempt(r: tuple[Any, ...]) -> Attempt:
    return Attempt(r[0], r[1], r[2], r[3], r[4], _ATTEMPT_STATE[r[5]], r[6], r[7], r[8], r[9],
                   r[10], bool(r[11]), r[12], r[13], r[14], r[15], r[16], r[17], r[18])


def _score(r: tuple[Any, ...]) -> Score:
    return Score(*r)


def _trial_ref(r: tuple[Any, ...]) -> TrialRef:
    return TrialRef(*r)


@dataclass(frozen=True, slots=True)
class RunCounts:
    """A run's counts as the record holds them (:meth:`Store.run_counts`)."""

    steps: int
    """Trials made of the agent's proposals."""
    proposal: int
    """The largest proposal number a trial answers."""
    number: int
    """The largest trial number."""
    wave: int
    """The largest dispatch batch."""
    dispatched: int
    """Trials given a directory (not cache hits)."""
    statuses: dict[TrialStatus, int]
    """Trials (not cache hits) by status."""
    cached: int
    """Cache hits that ended."""
    best: tuple[int, dict[str, Any], float] | None
    """(number, params, score) of the best completed trial."""


class _Reads:
    """The read side of the :class:`Store`: every read returns the values of
    :mod:`dse.record._records`, never a driver row; the SQL stays here."""

    __slots__ = ()
    path: Path
    _db: sqlite3.Connection
    _root: Path
    """The workspace where it is now (its trial directories are read there)."""

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
        if name_or_id.isascii() and name_or_id.isdigit():
            number = record_number(name_or_id)  # past 64 bits: no run has that id
            return None if number is None else self.campaign(number)
        rows = self._rows(
            f"SELECT {_CAMPAIGN} FROM campaigns WHERE name = ? ORDER BY id DESC LIMIT 1",
            (name_or_id,),
        )
        return _campaign(rows[0]) if rows else None

    # -- trials ---------------------------------------------------------------------------

    def trials(self, campaign_id: int) -> list[Trial]:
        """The trials of run *campaign_id*, by number."""
        return [_trial(r, self._root) for r in self._rows(
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
            number = record_number(short["number"])
        elif full is not None:
            run_id = record_number(full["run"])
            run = None if run_id is None else self.campaign(run_id)
            if run is None or run.name != full["campaign"]:
                raise ConfigError(
                    f"{self.path}: no run {full['run']} of a campaign named {full['campaign']!r}"
                )
            number = record_number(full["number"])
        else:
            raise ConfigError(f"trial {text!r}: expected {_FORMS}")
        # A number past 64 bits (None) is no trial's.
        rows = [] if number is None else self._rows(
            f"SELECT {_TRIAL} FROM trials WHERE campaign_id = ? AND number = ?", (run.id, number))
        if not rows:
            raise ConfigError(f"{self.path}: run {run.id} of {run.name} has no trial"
                              f" {text.rpartition(':' if short else '-')[2]}")
        return run, _trial(rows[0], self._root)

    def resume_rows(self, campaign_id: int, proposals: Iterable[int]) -> list[Trial]:
        """The trials of run *campaign_id* a resume rebuilds when its agent's snapshot stands
        for the rest: the unfinished (running, cancelled), the baseline runs, the cache hits
        still waiting, and those of *proposals*; by number (both found by index)."""
        rows = {r[0]: r for r in self._rows(
            f"SELECT {_TRIAL} FROM trials WHERE campaign_id = ? AND ({_OPEN})", (campaign_id,))}
        for r in self._in(f"SELECT {_TRIAL} FROM trials WHERE proposal IN ({{marks}})"
                          " AND campaign_id = ?", proposals, campaign_id):
            rows[r[0]] = r
        return [_trial(r, self._root) for r in sorted(rows.values(), key=lambda r: int(r[2]))]

    def stale_trials(self, campaign_id: int, version: str) -> int:
        """Trials of run *campaign_id* whose result is about other data than *version* (the
        version they read, else the one they were dispatched against)."""
        ((n,),) = self._rows(
            "SELECT COALESCE(SUM(trials), 0) FROM run_tallies WHERE campaign_id = ?"
            " AND version != '' AND version != ?", (campaign_id, version))
        return int(n)

    def run_counts(self, campaign_id: int, *, lower_is_better: bool) -> RunCounts:
        """What a resumed run's counts are rebuilt from when every result is ranked (none
        invalidated, all about the current data): see :class:`RunCounts`. Every figure is
        a summary or an index lookup: the same cost at a million trials as at ten."""
        ((trials, baselines, proposal, number),) = self._rows(
            "SELECT (SELECT COALESCE(SUM(trials), 0) FROM run_tallies WHERE campaign_id = ?1),"
            " (SELECT COUNT(*) FROM trials WHERE campaign_id = ?1 AND proposal = 0),"
            " (SELECT COALESCE(MAX(proposal), 0) FROM trials WHERE campaign_id = ?1),"
            " (SELECT COALESCE(MAX(number), 0) FROM trials WHERE campaign_id = ?1)",
            (campaign_id,))
        totals = self._rows("SELECT wave, trial_dirs FROM run_totals WHERE campaign_id = ?",
                            (campaign_id,))
        wave, dispatched = totals[0] if totals else (0, 0)
        statuses = {_TRIAL_STATUS[status]: int(n) for status, n in self._rows(
            "SELECT status, SUM(trials) FROM run_tallies WHERE campaign_id = ? AND status !="
            " 'cached' GROUP BY status HAVING SUM(trials) > 0", (campaign_id,))}
        ((cached,),) = self._rows(
            "SELECT COUNT(*) FROM trials t LEFT JOIN trials o ON o.id = t.cache_of"
            " WHERE t.campaign_id = ? AND t.cache_of IS NOT NULL AND t.status = 'cached'"
            " AND t.ended_at IS NOT NULL AND COALESCE(o.status, '') != 'running'",
            (campaign_id,))
        order = "ASC" if lower_is_better else "DESC"
        best = self._rows(
            "SELECT number, params, score FROM trials WHERE campaign_id = ? AND status ="
            f" 'completed' AND score IS NOT NULL ORDER BY score {order}, number LIMIT 1",
            (campaign_id,))
        return RunCounts(
            int(trials) - int(baselines), int(proposal), int(number), int(wave),
            int(dispatched), statuses, int(cached),
            None if not best else (int(best[0][0]), _loads(best[0][1]), float(best[0][2])))

    def trial_counts(self, campaign_id: int) -> dict[TrialStatus, int]:
        """How many trials of run *campaign_id* stand at each status (those with any)."""
        return {_TRIAL_STATUS[status]: int(n) for status, n in self._rows(
            "SELECT status, SUM(trials) FROM run_tallies WHERE campaign_id = ? GROUP BY status"
            " HAVING SUM(trials) > 0 ORDER BY status", (campaign_id,),
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

    def trial_dependencies(self, rows: Iterable[int]) -> dict[int, str]:
        """The dependency digest each trial row of *rows* reported (rows without one are left
        out)."""
        return {int(r[0]): str(r[1]) for r in self._in(
            "SELECT id, dependencies FROM trials WHERE id IN ({marks})"
            " AND dependencies IS NOT NULL", rows
        )}

    def earlier_measurement(self, name: str, params_json: str, before: int) -> Trial | None:
        """The latest trial before row *before*, of a run of campaign *name*, that measured
        the params *params_json* (canonical JSON) itself — not a cache hit — and ended with a
        result about the design, whatever its identity (what ``dse show`` compares a trial
        that was not a cache hit with)."""
        rows = self._rows(
            f"SELECT {_TRIAL} FROM trials WHERE params = ? AND id < ? AND cache_of IS NULL"
            " AND status IN ('completed', 'failed', 'stopped') AND campaign_id IN"
            " (SELECT id FROM campaigns WHERE name = ?) ORDER BY id DESC LIMIT 1",
            (params_json, before, name))
        return _trial(rows[0], self._root) if rows else None

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
        found = self._rows("SELECT dispatched FROM run_totals WHERE campaign_id = ?",
                           (campaign_id,))
        return int(found[0][0]) if found else 0

    # -- attempts -------------------------------------------------------------------------

    def attempts(self, campaign_id: int, *, trials: Iterable[int] | None = None
                 ) -> list[Attempt]:
        """The attempts of run *campaign_id* (only those of the trial rows *trials*, when
        given), by trial number then attempt."""
        if trials is not None:
            # `+`: the run's filter is no index to walk (SQLite would scan the whole run
            # for a few hundred trial rows); each row is found by its id.
            found = self._in(
                f"SELECT {_ATTEMPT_A}, t.number FROM attempts a JOIN trials t"
                " ON a.trial_id = t.id WHERE a.trial_id IN ({marks}) AND +t.campaign_id = ?",
                trials, campaign_id,
            )
            found.sort(key=lambda r: (r[-1], r[2]))
            return [_attempt(r[:-1]) for r in found]
        return [_attempt(r) for r in self._rows(
            f"SELECT {_ATTEMPT_A} FROM attempts a JOIN trials t ON a.trial_id = t.id"
            " WHERE t.campaign_id = ? ORDER BY t.number, a.attempt", (campaign_id,),
        )]

    def attempt_times(self, campaign_id: int) -> list[tuple[float, float, AttemptState, int]]:
        """(ended at, started at, state, trial row) of each attempt of run *campaign_id* that
        started and ended: what a resumed pool learns durations and usage from."""
        return [(end, start, _ATTEMPT_STATE[state], trial) for end, start, state, trial in
                self._rows(
                    "SELECT a.ended_at, a.started_at, a.state, a.trial_id FROM attempts a"
                    " JOIN trials t ON a.trial_id = t.id WHERE t.campaign_id = ?"
                    " AND a.started_at IS NOT NULL AND a.ended_at IS NOT NULL", (campaign_id,),
                )]

    def attempt_durations(self, campaign_id: int, *, last: int) -> tuple[float, list[float]]:
        """Of the attempts of run *campaign_id* that started and ended: their seconds summed
        (a summary), and the seconds of the *last* that succeeded or failed, in the order
        they ended (walked back along an index of ends)."""
        found = self._rows("SELECT attempt_s FROM run_totals WHERE campaign_id = ?",
                           (campaign_id,))
        # `+`: the run's filter is no index to walk; the ends are walked newest first.
        recent = [max(float(s), 0.0) for (s,) in reversed(self._rows(
            "SELECT a.ended_at - a.started_at FROM attempts a JOIN trials t ON a.trial_id = t.id"
            f" WHERE +t.campaign_id = ? AND {_ENDED} ORDER BY a.ended_at DESC, a.id DESC"
            " LIMIT ?", (campaign_id, last)))]
        return float(found[0][0]) if found else 0.0, recent

    def trial_params(self, campaign_id: int) -> dict[int, dict[str, Any]]:
        """The params of each trial of run *campaign_id*, by trial row."""
        return {row: _loads(params) for row, params in self._rows(
            "SELECT id, params FROM trials WHERE campaign_id = ?", (campaign_id,))}

    def spends(self, campaign_id: int) -> list[AttemptSpend]:
        """The recorded spend of every attempt of run *campaign_id* that has one."""
        return [AttemptSpend(trial, _spend(spend)) for trial, spend in self._rows(
            "SELECT a.trial_id, a.spend FROM attempts a JOIN trials t ON a.trial_id = t.id"
            " WHERE t.campaign_id = ? AND a.spend IS NOT NULL", (campaign_id,),
        )]

    def spend_total(self, campaign_id: int) -> Spend:
        """The summed spend of every attempt of run *campaign_id* (kept by SQLite as each
        attempt's spend is recorded: a run of a million attempts reads one row)."""
        found = self._rows(f"SELECT {', '.join(_SPEND_KEYS)} FROM run_totals"
                           " WHERE campaign_id = ?", (campaign_id,))
        return Spend(*(float(v) for v in found[0])) if found else Spend()

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

    def progress(self, trial_row: int) -> list[ProgressRow]:
        """The learning curve of trial *trial_row*: its points by attempt and step."""
        return [ProgressRow(a, step, _loads(metrics), at) for a, step, metrics, at in self._rows(
            "SELECT attempt, step, metrics, at FROM progress WHERE trial_id = ?"
            " ORDER BY attempt, step", (trial_row,))]

    def progress_tails(self, trial_rows: Iterable[int]) -> dict[int, tuple[int, ProgressRow]]:
        """For each of *trial_rows* with a learning curve: how many points it has, and its
        last (the highest step of the latest attempt)."""
        out: dict[int, tuple[int, ProgressRow]] = {}
        for chunk in _chunks(list(trial_rows)):
            for row, n, _, attempt, step, metrics, at in self._rows(
                "SELECT trial_id, COUNT(*), MAX((attempt << 40) | step), attempt, step, metrics,"
                f" at FROM progress WHERE trial_id IN ({','.join('?' * len(chunk))})"
                " GROUP BY trial_id", tuple(chunk)):
                out[row] = (n, ProgressRow(attempt, step, _loads(metrics), at))
        return out

    def rejections(self, campaign_id: int, *, down_to: float
                   ) -> tuple[int, dict[int, tuple[dict[str, Any], str]]]:
        """How many proposals of run *campaign_id* were rejected, and the params and reason of
        the newest rejections: those of proposals numbered *down_to* and up, and the last
        rejections in a row (walked back from the newest along the events' index: a resume
        reads what follows its agent's snapshot, never every rejection of the run)."""
        ((count,),) = self._rows("SELECT COUNT(*) FROM events WHERE campaign_id = ?"
                                 " AND kind = 'rejected'", (campaign_id,))
        found: dict[int, tuple[dict[str, Any], str]] = {}
        expected: int | None = None  # the next proposal of the newest rejections in a row
        cursor = self._db.execute("SELECT data FROM events WHERE campaign_id = ?"
                                  " AND kind = 'rejected' ORDER BY id DESC", (campaign_id,))
        try:
            for (data,) in cursor:
                event = _loads(data)
                proposal = int(event["proposal"])
                if expected is None or proposal == expected:
                    expected = proposal - 1
                elif proposal < down_to:
                    break
                else:
                    expected = -1  # the run in a row ended
                found[proposal] = (event["params"], event["reason"])
        finally:
            cursor.close()
        return int(count), found

    def agent_log(self, campaign_id: int, *, after: int = 0) -> list[AgentCall]:
        """The agent's calls of run *campaign_id* (those logged after row *after*), in the
        order they were made."""
        return [
            AgentCall(r[0], r[1], r[2], r[3], _loads(r[4]), _loads(r[5]) if r[5] else None,
                      {int(k): v for k, v in _loads(r[6]).items()} if r[6] else None)
            for r in self._rows("SELECT id, campaign_id, kind, n, proposals, in_flight, stops"
                                " FROM agent_log WHERE campaign_id = ? AND id > ? ORDER BY id",
                                (campaign_id, after))
        ]

    def agent_snapshot(self, campaign_id: int) -> AgentSnapshot | None:
        """Run *campaign_id*'s latest agent snapshot; ``None`` when it has none."""
        rows = self._rows("SELECT log_id, state, unobserved FROM agent_snapshots"
                          " WHERE campaign_id = ?", (campaign_id,))
        if not rows:
            return None
        log_id, state, unobserved = rows[0]
        return AgentSnapshot(int(log_id), str(state), None if unobserved is None
                             else frozenset(int(n) for n in _loads(unobserved)))

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
        # Two selects, not an OR: each walks its partial index of the flagged rows, never
        # the workspace's trials.
        return [_trial(r, self._root) for r in self._rows(
            f"SELECT {_TRIAL} FROM trials INDEXED BY trials_invalid WHERE invalidation IS NOT"
            " NULL UNION"
            f" SELECT {_TRIAL} FROM trials WHERE id IN"
            " (SELECT trial_id FROM scores WHERE invalidation IS NOT NULL) ORDER BY id"
        )]

    def invalid_reasons(self, campaign_id: int) -> dict[int, str]:
        """Trial row → why it is flagged invalid (its result's invalidation, else its
        score's), for the flagged trials of run *campaign_id*."""
        out: dict[int, str] = {}
        for row, reason in self._rows(
            "SELECT t.id, i.reason FROM trials t JOIN invalidations i ON i.id = t.invalidation"
            " WHERE t.campaign_id = ? AND t.invalidation IS NOT NULL UNION ALL"
            " SELECT t.id, i.reason FROM scores s JOIN trials t ON t.id = s.trial_id"
            " JOIN invalidations i ON i.id = s.invalidation"
            " WHERE +t.campaign_id = ? AND s.invalidation IS NOT NULL",
            (campaign_id, campaign_id),
        ):
            out.setdefault(int(row), str(reason))
        return out

    def invalid_scores(self, campaign_id: int) -> set[int]:
        """The trial rows of run *campaign_id* with a score flagged invalid."""
        return {int(row) for (row,) in self._rows(
            "SELECT s.trial_id FROM scores s JOIN trials t ON t.id = s.trial_id"
            " WHERE +t.campaign_id = ? AND s.invalidation IS NOT NULL", (campaign_id,),
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

_NEW_TABLES_9 = """
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    next INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    config_hash TEXT PRIMARY KEY,
    trial_id INTEGER NOT NULL,
    campaign TEXT NOT NULL,
    claimed_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS claims_trial ON claims(trial_id)
"""
"""Schema 9: row ids handed out by the record (``counters``: the next free id of ``trials``
and ``attempts``) and the configurations being run (``claims``: config hash → the trial that
runs it and the campaign whose lock says whether its controller lives)."""

_NEW_TABLES_10 = """
CREATE TABLE IF NOT EXISTS agent_snapshots (
    campaign_id INTEGER PRIMARY KEY REFERENCES campaigns(id),
    log_id INTEGER NOT NULL,
    state TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS trials_proposal ON trials(campaign_id, proposal)
"""
"""Schema 10: each run's latest agent snapshot (its ``snapshot()``, as JSON) and the last
``agent_log`` row it covers: a resume restores it and replays only the calls after it, and
reads the trials those calls name (by proposal)."""


_NEW_TABLES_13 = """
CREATE TABLE IF NOT EXISTS progress (
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    attempt INTEGER NOT NULL,
    step INTEGER NOT NULL,
    metrics TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (trial_id, attempt, step)
) WITHOUT ROWID
"""
"""Schema 13: each trial's learning curve, the points its attempts reported as they ran
(``dse.trial.report_progress``: one row per attempt and step; a point read twice — by a
restarted controller — is kept once)."""


_NEW_COLUMNS_16 = """
ALTER TABLE trials ADD COLUMN scores TEXT;
ALTER TABLE scores ADD COLUMN scores TEXT
"""
"""Schema 16: a Pareto campaign's score of each objective (a JSON list), on the trial (its
latest) and on each conclusion."""

_NEW_COLUMNS_17 = (
    "ALTER TABLE campaigns ADD COLUMN run_s REAL",
    # An older run's time: its span on the wall clock, to its end or its last event.
    "UPDATE campaigns SET run_s = MAX(COALESCE(ended_at, (SELECT MAX(at) FROM events e"
    " WHERE e.campaign_id = campaigns.id), created_at) - created_at, 0) WHERE run_s IS NULL",
)
"""Schema 17: the time controllers drove each run (``campaigns.run_s``, seconds measured on
each controller's monotonic clock, kept at every pass that writes and at least every
:data:`dse.engine._journal.RUN_TIME_EVERY` seconds): what a wall-clock ceiling counts, across a
resume and the campaign's runs."""

_NEW_TABLES_14 = """
ALTER TABLE trials ADD COLUMN stop_step INTEGER;
ALTER TABLE agent_log ADD COLUMN stops TEXT;
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY,
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    attempt INTEGER NOT NULL,
    rule TEXT NOT NULL,
    rule_version TEXT NOT NULL,
    verdict TEXT NOT NULL,
    rung INTEGER NOT NULL,
    step INTEGER NOT NULL,
    value REAL,
    cutoff REAL,
    peers INTEGER NOT NULL,
    compared TEXT NOT NULL,
    reason TEXT NOT NULL,
    bracket INTEGER,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_trial ON decisions(trial_id);
CREATE INDEX IF NOT EXISTS decisions_run ON decisions(campaign_id, verdict);
CREATE INDEX IF NOT EXISTS trials_stopped ON trials(campaign_id) WHERE status = 'stopped'
"""
"""Schema 14: the decisions of a campaign's stopping rule (``[stopping]``): which trial, at
which rung, compared with which peers, by which rule and version, and what it decided; and
the step a trial stopped at (``trials.stop_step``: its metrics are from that step); and, for an
``observe`` call, the step each stopped trial it told was stopped at (``agent_log.stops``: a
trial promoted since is replayed as it was told)."""


_SPEND_KEYS = ("wall_s", "cpu_s", "gpu_s", "node_s", "money")


def _last_stop(trial: str, column: str, before: str | None = None) -> str:
    """The *column* (``rung`` or ``step``) of the latest stop decision about trial *trial*
    (an SQL expression of its row id; made before decision *before*, if given), else -1."""
    earlier = "" if before is None else f" AND id < {before}"
    return (f"IFNULL((SELECT {column} FROM decisions WHERE trial_id = {trial} AND verdict ="
            f" 'stop'{earlier} ORDER BY id DESC LIMIT 1), -1)")


def _end_key(row: str, status: str, id_row: str | None = None) -> str:
    """The ``stop_totals`` kind, rung and step of trial *row* (``NEW``, ``OLD``, ``t``: its
    ``stop_step``; its id is *id_row*'s) as ended with *status*: a stopped trial's is its
    latest stop's rung and the step it stopped at (``stop_step``, else that stop's)."""
    trial = f"{id_row or row}.id"
    return (f"'ended_' || {status}, CASE WHEN {status} = 'stopped' THEN"
            f" {_last_stop(trial, 'rung')} ELSE 0 END, CASE WHEN {status} = 'stopped' THEN"
            f" COALESCE({row}.stop_step, {_last_stop(trial, 'step')}) ELSE 0 END")


_UPSERT_STOP = (" ON CONFLICT (campaign_id, kind, rung, step) DO UPDATE SET trials = trials +"
                " excluded.trials, " + ", ".join(f"{k} = {k} + excluded.{k}" for k in _SPEND_KEYS))
_STOP_COLUMNS = "campaign_id, kind, rung, step, trials, wall_s, cpu_s, gpu_s, node_s, money"


def _end_delta(sign: str, campaign: str, trial: str, key: str, when: str = "1") -> str:
    """Add (*sign* ``+``) or take away (``-``) trial *trial*'s count and its attempts' spend
    at ``stop_totals`` *key* (kind, rung, step), when *when* holds."""
    spend = ", ".join(f"TOTAL(json_extract(spend, '$.{k}')) AS {k}" for k in _SPEND_KEYS)
    return (f"INSERT INTO stop_totals({_STOP_COLUMNS}) SELECT {campaign}, {key}, {sign}1, "
            + ", ".join(f"{sign}{k}" for k in _SPEND_KEYS)
            + f" FROM (SELECT {spend} FROM attempts WHERE trial_id = {trial}) WHERE {when}"
            + _UPSERT_STOP)


def _ended_trials(runs: str) -> str:
    """Add, whole, the trials that ended stopped or completed of the runs *runs* selects (an
    SQL condition on ``t``), with their attempts' spend (a run's first decision; a
    migration)."""
    spend = ", ".join(f"TOTAL(json_extract(a.spend, '$.{k}'))" for k in _SPEND_KEYS)
    return (f"INSERT INTO stop_totals({_STOP_COLUMNS}) SELECT t.campaign_id,"
            f" {_end_key('t', 't.status')}, COUNT(DISTINCT t.id), {spend} FROM trials t"
            " LEFT JOIN attempts a ON a.trial_id = t.id WHERE t.status IN ('stopped',"
            f" 'completed') AND {runs} GROUP BY 1, 2, 3, 4")


_TRACKED = "EXISTS (SELECT 1 FROM stop_totals WHERE campaign_id = {run})"
"""Whether run ``{run}`` has ``stop_totals`` rows: from its first decision on."""
_STOPPED_NOW = "(SELECT status FROM trials WHERE id = NEW.trial_id) = 'stopped'"
_SUMMARIES_15: tuple[str, ...] = (
    # What `dse report` says of early stopping, kept by SQLite as decisions, trials and
    # attempts are written: per run, the decisions by verdict and rung (kind = the verdict,
    # step 0), and the trials that ended stopped (kind 'ended_stopped', by the rung and step
    # of their latest stop) or ran to the end ('ended_completed') with their attempts' spend.
    # A run has rows from its first decision on (its ended trials are added then): a run
    # without a stopping rule costs one index probe per trial end.
    "CREATE TABLE IF NOT EXISTS stop_totals (campaign_id INTEGER NOT NULL, kind TEXT NOT NULL,"
    " rung INTEGER NOT NULL, step INTEGER NOT NULL, trials INTEGER NOT NULL DEFAULT 0, "
    + ", ".join(f"{k} REAL NOT NULL DEFAULT 0" for k in _SPEND_KEYS)
    + ", PRIMARY KEY (campaign_id, kind, rung, step)) WITHOUT ROWID",
    # A run's first decision adds its ended trials first, as they stand before it (by a
    # WHEN clause: a condition in the statement would not spare each decision a scan).
    "CREATE TRIGGER IF NOT EXISTS stop_first BEFORE INSERT ON decisions WHEN NOT "
    + _TRACKED.format(run="NEW.campaign_id") + " BEGIN "
    + _ended_trials("t.campaign_id = NEW.campaign_id") + "; END",
    # A decision: a stopped trial's latest stop moves it, then the decision is counted.
    "CREATE TRIGGER IF NOT EXISTS stop_decided AFTER INSERT ON decisions BEGIN "
    + _end_delta("-", "NEW.campaign_id", "NEW.trial_id",
                 "'ended_stopped', " + _last_stop("NEW.trial_id", "rung", "NEW.id")
                 + ", COALESCE((SELECT stop_step FROM trials WHERE id = NEW.trial_id), "
                 + _last_stop("NEW.trial_id", "step", "NEW.id") + ")",
                 f"NEW.verdict = 'stop' AND {_STOPPED_NOW} AND "
                 + _TRACKED.format(run="NEW.campaign_id")) + "; "
    + _end_delta("+", "NEW.campaign_id", "NEW.trial_id", "'ended_stopped', NEW.rung,"
                 " COALESCE((SELECT stop_step FROM trials WHERE id = NEW.trial_id), NEW.step)",
                 f"NEW.verdict = 'stop' AND {_STOPPED_NOW} AND "
                 + _TRACKED.format(run="NEW.campaign_id")) + "; "
    + "INSERT INTO stop_totals(campaign_id, kind, rung, step, trials) VALUES (NEW.campaign_id,"
    " NEW.verdict, NEW.rung, 0, 1) ON CONFLICT (campaign_id, kind, rung, step) DO UPDATE SET"
    " trials = trials + 1; END",
    "CREATE TRIGGER IF NOT EXISTS stop_left AFTER UPDATE OF status, stop_step ON trials WHEN"
    " OLD.status IN ('stopped', 'completed') AND (NEW.status IS NOT OLD.status OR"
    " NEW.stop_step IS NOT OLD.stop_step) AND "
    + _TRACKED.format(run="NEW.campaign_id") + " BEGIN "
    + _end_delta("-", "NEW.campaign_id", "NEW.id", _end_key("OLD", "OLD.status", "NEW"))
    + "; END",
    "CREATE TRIGGER IF NOT EXISTS stop_entered AFTER UPDATE OF status, stop_step ON trials WHEN"
    " NEW.status IN ('stopped', 'completed') AND (NEW.status IS NOT OLD.status OR"
    " NEW.stop_step IS NOT OLD.stop_step) AND "
    + _TRACKED.format(run="NEW.campaign_id") + " BEGIN "
    + _end_delta("+", "NEW.campaign_id", "NEW.id", _end_key("NEW", "NEW.status")) + "; END",
    "CREATE TRIGGER IF NOT EXISTS stop_inserted AFTER INSERT ON trials WHEN NEW.status IN"
    " ('stopped', 'completed') AND " + _TRACKED.format(run="NEW.campaign_id") + " BEGIN "
    + _end_delta("+", "NEW.campaign_id", "NEW.id", _end_key("NEW", "NEW.status")) + "; END",
    "CREATE TRIGGER IF NOT EXISTS stop_spend AFTER UPDATE OF spend ON attempts WHEN EXISTS"
    " (SELECT 1 FROM trials t WHERE t.id = NEW.trial_id AND t.status IN ('stopped',"
    " 'completed') AND " + _TRACKED.format(run="t.campaign_id") + ") BEGIN"
    f" INSERT INTO stop_totals({_STOP_COLUMNS}) SELECT t.campaign_id, {_end_key('t', 't.status')},"
    " 0, "
    + ", ".join(f"IFNULL(json_extract(NEW.spend, '$.{k}'), 0) -"
                f" IFNULL(json_extract(OLD.spend, '$.{k}'), 0)" for k in _SPEND_KEYS)
    + " FROM trials t WHERE t.id = NEW.trial_id" + _UPSERT_STOP + "; END",
)
"""The summary of schema 15 (statements that hold ``;``: never split)."""

_BACKFILL_15: tuple[str, ...] = (
    "DELETE FROM stop_totals",
    "INSERT INTO stop_totals(campaign_id, kind, rung, step, trials) SELECT campaign_id,"
    " verdict, rung, 0, COUNT(*) FROM decisions GROUP BY 1, 2, 3",
    _ended_trials("t.campaign_id IN (SELECT DISTINCT campaign_id FROM decisions)"),
)


def _tally_key(row: str) -> str:
    """The ``run_tallies`` key columns of trial *row* (``NEW`` or ``OLD`` in a trigger)."""
    version = f"IFNULL(COALESCE(NULLIF({row}.data_version_read, ''), {row}.data_version), '')"
    mismatch = (f"IFNULL({row}.data_version_read IS NOT NULL AND {row}.data_version_read <> ''"
                f" AND {row}.data_version IS NOT NULL AND {row}.data_version <> '' AND"
                f" {row}.data_version_read <> {row}.data_version, 0)")
    return (f"{row}.campaign_id, {version}, {row}.status, IFNULL({row}.failure, ''),"
            f" {row}.score IS NOT NULL, {mismatch}")


_TALLY_COLUMNS = "campaign_id, version, status, failure, scored, mismatched"
_SUMMARIES: tuple[str, ...] = (
    # What `dse status` and `dse report` print, kept by SQLite as trials are written (by any
    # controller, `dse invalidate` or a migration alike): the trials of each run by data
    # version, status, failure, whether scored and whether the data read differs; and each
    # run's dispatched trials and summed spend. Reading them costs the same at a million
    # trials as at ten.
    "CREATE TABLE IF NOT EXISTS run_tallies (campaign_id INTEGER NOT NULL, version TEXT NOT"
    " NULL, status TEXT NOT NULL, failure TEXT NOT NULL, scored INTEGER NOT NULL, mismatched"
    " INTEGER NOT NULL, trials INTEGER NOT NULL, first INTEGER NOT NULL,"
    f" PRIMARY KEY ({_TALLY_COLUMNS})) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS run_totals (campaign_id INTEGER PRIMARY KEY, dispatched"
    " INTEGER NOT NULL DEFAULT 0, "
    + ", ".join(f"{k} REAL NOT NULL DEFAULT 0" for k in _SPEND_KEYS) + ")",
    "CREATE TRIGGER IF NOT EXISTS tally_trial AFTER INSERT ON trials BEGIN"
    f" INSERT INTO run_tallies VALUES ({_tally_key('NEW')}, 1, NEW.number)"
    f" ON CONFLICT ({_TALLY_COLUMNS}) DO UPDATE SET trials = trials + 1,"
    " first = MIN(first, excluded.first); END",
    "CREATE TRIGGER IF NOT EXISTS tally_change AFTER UPDATE OF status, failure, score,"
    " data_version, data_version_read ON trials"
    f" WHEN ({_tally_key('OLD')}) IS NOT ({_tally_key('NEW')}) BEGIN"
    " UPDATE run_tallies SET trials = trials - 1"
    f" WHERE ({_TALLY_COLUMNS}) = ({_tally_key('OLD')});"
    f" INSERT INTO run_tallies VALUES ({_tally_key('NEW')}, 1, NEW.number)"
    f" ON CONFLICT ({_TALLY_COLUMNS}) DO UPDATE SET trials = trials + 1,"
    " first = MIN(first, excluded.first); END",
    "CREATE TRIGGER IF NOT EXISTS total_dispatched AFTER INSERT ON attempts"
    " WHEN NEW.attempt = 1 BEGIN"
    " INSERT INTO run_totals(campaign_id, dispatched)"
    " SELECT campaign_id, 1 FROM trials WHERE id = NEW.trial_id"
    " ON CONFLICT (campaign_id) DO UPDATE SET dispatched = dispatched + 1; END",
    "CREATE TRIGGER IF NOT EXISTS total_spend AFTER UPDATE OF spend ON attempts"
    " WHEN NEW.spend IS NOT NULL BEGIN"
    f" INSERT INTO run_totals(campaign_id, {', '.join(_SPEND_KEYS)}) SELECT campaign_id, "
    + ", ".join(f"IFNULL(json_extract(NEW.spend, '$.{k}'), 0) -"
                f" IFNULL(json_extract(OLD.spend, '$.{k}'), 0)" for k in _SPEND_KEYS)
    + " FROM trials WHERE id = NEW.trial_id ON CONFLICT (campaign_id) DO UPDATE SET "
    + ", ".join(f"{k} = {k} + excluded.{k}" for k in _SPEND_KEYS) + "; END",
    # Indexes of what a report lists: flagged, cache hits, mismatched trials, the best.
    "CREATE INDEX IF NOT EXISTS trials_invalid ON trials(campaign_id)"
    " WHERE invalidation IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS scores_invalid ON scores(trial_id)"
    " WHERE invalidation IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS trials_cache_of ON trials(campaign_id, number)"
    " WHERE cache_of IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS trials_score ON trials(campaign_id, score, number)"
    " WHERE score IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS trials_replaces ON trials(replaces)"
    " WHERE replaces IS NOT NULL",
)
"""The summaries and indexes of schema 11 (statements that hold ``;``: never split)."""

_BACKFILL_11: tuple[str, ...] = (
    "DELETE FROM run_tallies",  # rebuilt whole from the rows (a record may hold some)
    "DELETE FROM run_totals",
    f"INSERT INTO run_tallies SELECT {_tally_key('trials')}, COUNT(*), MIN(number)"
    " FROM trials GROUP BY 1, 2, 3, 4, 5, 6",
    f"INSERT INTO run_totals(campaign_id, dispatched, {', '.join(_SPEND_KEYS)})"
    " SELECT t.campaign_id, SUM(a.attempt = 1 AND t.cache_of IS NULL), "
    + ", ".join(f"TOTAL(json_extract(a.spend, '$.{k}'))" for k in _SPEND_KEYS)
    + " FROM attempts a JOIN trials t ON t.id = a.trial_id GROUP BY t.campaign_id",
)

_OPEN = ("status IN ('running', 'cancelled') OR proposal = 0"
         " OR (cache_of IS NOT NULL AND ended_at IS NULL)")
"""The trials a resume rebuilds whatever its agent's snapshot says (unfinished, baseline
runs, cache hits still waiting): a query naming this very condition reads them by the
partial index ``trials_open``."""
_ENDED = ("a.state IN ('succeeded', 'failed') AND a.started_at IS NOT NULL"
          " AND a.ended_at IS NOT NULL")
"""Attempts a duration estimate learns from (``attempts_ended`` indexes them by their end)."""


def _seconds(row: str) -> str:
    """The seconds attempt *row* (``NEW`` or ``OLD`` in a trigger) ran, once started and
    ended; else 0."""
    return (f"(CASE WHEN {row}.started_at IS NOT NULL AND {row}.ended_at IS NOT NULL"
            f" THEN MAX({row}.ended_at - {row}.started_at, 0) ELSE 0 END)")


def _made_dir(row: str) -> str:
    """Whether trial *row* (``NEW`` or ``OLD``) was given a directory (not a cache hit)."""
    return f"({row}.cache_of IS NULL AND IFNULL({row}.trial_dir, '') != '')"


_SUMMARIES_12: tuple[str, ...] = (
    # What a resume reads besides the trials it rebuilds, kept like schema 11's summaries:
    # each run's attempt seconds, trials given a directory and latest wave; the trials
    # still open; the ends of the attempts a duration estimate learns from. A resume then
    # reads the same few rows at a million trials as at ten.
    "ALTER TABLE agent_snapshots ADD COLUMN unobserved TEXT",
    "ALTER TABLE run_totals ADD COLUMN attempt_s REAL NOT NULL DEFAULT 0",
    "ALTER TABLE run_totals ADD COLUMN trial_dirs INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE run_totals ADD COLUMN wave INTEGER NOT NULL DEFAULT 0",
    "CREATE TRIGGER IF NOT EXISTS total_trial AFTER INSERT ON trials BEGIN"
    " INSERT INTO run_totals(campaign_id, trial_dirs, wave)"
    f" VALUES (NEW.campaign_id, {_made_dir('NEW')}, NEW.wave)"
    " ON CONFLICT (campaign_id) DO UPDATE SET trial_dirs = trial_dirs + excluded.trial_dirs,"
    " wave = MAX(wave, excluded.wave); END",
    "CREATE TRIGGER IF NOT EXISTS total_dirs AFTER UPDATE OF cache_of, trial_dir ON trials"
    f" WHEN {_made_dir('OLD')} IS NOT {_made_dir('NEW')} BEGIN"
    " INSERT INTO run_totals(campaign_id, trial_dirs)"
    f" VALUES (NEW.campaign_id, {_made_dir('NEW')} - {_made_dir('OLD')})"
    " ON CONFLICT (campaign_id) DO UPDATE SET trial_dirs = trial_dirs + excluded.trial_dirs;"
    " END",
    "CREATE TRIGGER IF NOT EXISTS total_seconds AFTER UPDATE OF started_at, ended_at"
    f" ON attempts WHEN {_seconds('OLD')} != {_seconds('NEW')} BEGIN"
    " INSERT INTO run_totals(campaign_id, attempt_s)"
    f" SELECT campaign_id, {_seconds('NEW')} - {_seconds('OLD')} FROM trials"
    " WHERE id = NEW.trial_id"
    " ON CONFLICT (campaign_id) DO UPDATE SET attempt_s = attempt_s + excluded.attempt_s; END",
    f"CREATE INDEX IF NOT EXISTS trials_open ON trials(campaign_id) WHERE {_OPEN}",
    "CREATE INDEX IF NOT EXISTS attempts_ended ON attempts(ended_at)"
    f" WHERE {_ENDED.replace('a.', '')}",
)
"""The summaries and indexes of schema 12 (statements that hold ``;``: never split)."""

_BACKFILL_12: tuple[str, ...] = (
    "INSERT OR IGNORE INTO run_totals(campaign_id) SELECT DISTINCT campaign_id FROM trials",
    f"UPDATE run_totals SET trial_dirs = (SELECT COUNT(*) FROM trials t WHERE"
    f" t.campaign_id = run_totals.campaign_id AND {_made_dir('t')}),"
    " wave = (SELECT COALESCE(MAX(wave), 0) FROM trials t"
    " WHERE t.campaign_id = run_totals.campaign_id),"
    f" attempt_s = (SELECT TOTAL({_seconds('a')}) FROM attempts a JOIN trials t"
    " ON t.id = a.trial_id WHERE t.campaign_id = run_totals.campaign_id)",
)

_ADD_COLUMN = re.compile(r"ALTER TABLE (?P<table>\w+) ADD COLUMN (?P<column>\w+)")


def _bring_up_to_date(db: sqlite3.Connection, path: Path) -> None:
    """Make a new record's tables, or migrate one an older dse wrote to :data:`SCHEMA_VERSION`
    in place, in one write transaction; :class:`StoreError` for a version this dse does not
    read. The version is read again under the write lock: another controller may have made or
    migrated the record while this one waited for it (adding a column twice fails)."""
    if _schema_version(db) == str(SCHEMA_VERSION):
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        found = _schema_version(db)
        if found is None:
            for statement in (*_SCHEMA.split(";"), *_SUMMARIES, *_SUMMARIES_12,
                              *_SUMMARIES_15):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                       (str(SCHEMA_VERSION),))
            db.execute("INSERT OR IGNORE INTO counters(name, next) VALUES ('trials', 1),"
                       " ('attempts', 1)")
        elif int(found) in _MIGRATIONS:
            version = int(found)
            while version != SCHEMA_VERSION:
                for statement in _MIGRATIONS[version]:
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


def _schema_version(db: sqlite3.Connection) -> str | None:
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
    8: (*_NEW_TABLES_9.split(";"),
        "INSERT OR IGNORE INTO counters(name, next)"
        " SELECT 'trials', COALESCE(MAX(id), 0) + 1 FROM trials",
        "INSERT OR IGNORE INTO counters(name, next)"
        " SELECT 'attempts', COALESCE(MAX(id), 0) + 1 FROM attempts"),
    9: tuple(_NEW_TABLES_10.split(";")),
    10: (*_SUMMARIES, *_BACKFILL_11),
    11: (*_SUMMARIES_12, *_BACKFILL_12),
    12: tuple(_NEW_TABLES_13.split(";")),
    13: tuple(_NEW_TABLES_14.split(";")),
    14: (*_SUMMARIES_15, *_BACKFILL_15),
    15: tuple(_NEW_COLUMNS_16.split(";")),
    16: _NEW_COLUMNS_17,
}
"""Statements that take a record from schema version *key* to *key* + 1."""
OLDEST_SCHEMA = min(_MIGRATIONS)
"""The oldest schema version this dse migrates. Every step leaves what a record has already
as it is (a column there, a table there, a summary rebuilt whole), so a record whose version
cannot be read (``dse doctor --salvage``) is migrated from here."""

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
    ended_at REAL,
    run_s REAL
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
""" + ";".join((_NEW_TABLES_7, _NEW_TABLES_9, _NEW_TABLES_10, _NEW_TABLES_13, _NEW_TABLES_14,
                _NEW_COLUMNS_16))


_INSERT_PROGRESS = (
    "INSERT OR IGNORE INTO progress(trial_id, attempt, step, metrics, at) VALUES (?,?,?,?,?)"
)
_INSERT_DECISION = (
    "INSERT INTO decisions(campaign_id, trial_id, attempt, rule, rule_version, verdict, rung,"
    " step, value, cutoff, peers, compared, reason, bracket, at)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
_DECISION = ("d.trial_id, t.number, d.attempt, d.rule, d.rule_version, d.verdict, d.rung,"
             " d.step, d.value, d.cutoff, d.peers, d.compared, d.reason, d.bracket, d.at")
_INSERT_TRIAL = (
    "INSERT INTO trials(id, campaign_id, number, proposal, wave, config_hash, params, status,"
    " failure, message, metrics, score, cache_of, trial_dir, created_at, ended_at,"
    " data_version, stop_step, scores) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
_INSERT_ATTEMPT = (
    "INSERT INTO attempts(id, trial_id, attempt, backend, job_id, state, submitted_at,"
    " resumed) VALUES (?,?,?,?,?,?,?,?)"
)
_UPDATE_ATTEMPT = (
    "UPDATE attempts SET job_id=?, state=?, started_at=COALESCE(?, started_at) WHERE id=?"
)
_END_ATTEMPT = (
    "UPDATE attempts SET job_id=?, state=?, exit_code=?, signal=?, node=?, reason=?,"
    " peak_rss_kb=?, started_at=COALESCE(?, started_at), ended_at=?, work_lost_s=?,"
    " spend=COALESCE(?, spend) WHERE id=?"
)
_TRIAL_DATA = (
    "UPDATE trials SET data_version=COALESCE(?, data_version),"
    " data_version_read=COALESCE(?, data_version_read) WHERE id=?"
)
_END_TRIAL = (
    "UPDATE trials SET status=?, failure=?, message=?, metrics=?, score=?, ended_at=?, stop_step=?,"
    " scores=? WHERE id=?"
)
_INSERT_ENVIRONMENT = (
    "INSERT OR IGNORE INTO environments(digest, python, distributions) VALUES (?,?,?)"
)
_LINK_TRIAL = (
    "UPDATE trials SET dependencies=COALESCE(?, dependencies), replaces=COALESCE(?, replaces)"
    " WHERE id=?"
)
_INSERT_SCORE = (
    "INSERT INTO scores(trial_id, scorer, scorer_version, score, baseline_trial, created_at,"
    " scores) VALUES (?,?,?,?,?,?,?)"
)
_INSERT_EVENT = "INSERT INTO events(campaign_id, trial_id, at, kind, data) VALUES (?,?,?,?,?)"
_INSERT_AGENT_CALL = (
    "INSERT INTO agent_log(campaign_id, kind, n, proposals, in_flight, stops)"
    " VALUES (?,?,?,?,?,?)"
)
_SNAPSHOT = (
    "INSERT OR REPLACE INTO agent_snapshots(campaign_id, log_id, state, unobserved)"
    " VALUES (?,?,?,?)"
)
_END_CAMPAIGN = "UPDATE campaigns SET status=?, end_reason=?, ended_at=? WHERE id=?"
_RUN_INSTEAD = (
    "UPDATE trials SET status=?, failure=?, message=?, cache_of=NULL, trial_dir=?, ended_at=?"
    " WHERE id=?"
)
_RELINK = "UPDATE trials SET cache_of=? WHERE id=?"
_RELEASE = "DELETE FROM claims WHERE trial_id=?"
_CLAIM = (
    "INSERT OR REPLACE INTO claims(config_hash, trial_id, campaign, claimed_at) VALUES (?,?,?,?)"
)
_RESERVE = (
    "UPDATE counters SET next = MAX(next, (SELECT COALESCE(MAX(id), 0) + 1 FROM {table})) + ?"
    " WHERE name = ? RETURNING next"
)
_FIRST_BLOCK, _LAST_BLOCK = 64, 4096


dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _vector(scores: Sequence[float] | None) -> str | None:
    """A score vector as stored (a JSON list), or ``None``."""
    return None if scores is None else dumps([float(x) for x in scores])
"""Compact JSON for record columns (one encoder, built once: this is on the hot path)."""


class Batch:
    """The changes of one polling pass, committed together by :meth:`Store.commit`.

    Each method records one change, by keyword; the columns they fill are this module's
    business. Changes are kept as plain tuples in the order :meth:`Store.commit` writes
    them: a frozen dataclass per change cost about a fifth of the engine's time per trial
    (measured with ``benchmarks/engine_overhead.py``), for nothing a caller could see.
    """

    __slots__ = (  # noqa: RUF023 - in the order Store.commit writes them
        "_trials", "_trial_ends", "_attempts", "_attempt_updates", "_attempt_ends",
        "_attempt_usage", "_trial_data", "_attempt_spend", "_attempt_expected", "_scores",
        "_environments", "_trial_links", "_events", "_campaign_updates", "_agent_log",
        "_agent_snapshots", "_reruns", "_relinks", "_releases", "_progress", "_decisions",
        "_run_times",
    )

    def __init__(self) -> None:
        self._trials: list[tuple[Any, ...]] = []
        self._trial_ends: list[tuple[Any, ...]] = []
        self._attempts: list[tuple[Any, ...]] = []
        self._attempt_updates: list[tuple[Any, ...]] = []
        self._attempt_ends: list[tuple[Any, ...]] = []
        self._attempt_usage: list[tuple[Any, ...]] = []
        self._trial_data: list[tuple[Any, ...]] = []
        self._attempt_spend: list[tuple[Any, ...]] = []
        self._attempt_expected: list[tuple[Any, ...]] = []
        self._scores: list[tuple[Any, ...]] = []
        self._environments: list[tuple[Any, ...]] = []
        self._trial_links: list[tuple[Any, ...]] = []
        self._events: list[tuple[Any, ...]] = []
        self._campaign_updates: list[tuple[Any, ...]] = []
        self._agent_log: list[tuple[Any, ...]] = []
        self._agent_snapshots: dict[int, tuple[int, str, str]] = {}
        self._reruns: list[tuple[Any, ...]] = []
        self._relinks: list[tuple[Any, ...]] = []
        self._releases: list[tuple[Any, ...]] = []
        self._progress: list[tuple[Any, ...]] = []
        self._decisions: list[tuple[Any, ...]] = []
        self._run_times: list[tuple[Any, ...]] = []

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name in self.__slots__)

    def clear(self) -> None:
        """Forget every change (they were committed)."""
        for name in self.__slots__:
            getattr(self, name).clear()

    # -- trials ---------------------------------------------------------------------------

    def add_trial(
        self, *, row: int, campaign: int, number: int, proposal: int, wave: int,
        config_hash: str, params_json: str, status: TrialStatus, created_at: float,
        failure: FailureClass | None = None, message: str | None = None,
        metrics: Mapping[str, float] | None = None, score: float | None = None,
        cache_of: int | None = None, trial_dir: str | None = None,
        ended_at: float | None = None, data_version: str | None = None,
        step: int | None = None, scores: Sequence[float] | None = None,
    ) -> None:
        """A new trial (or cache hit: *cache_of* is the trial it reuses; *step*: the step of
        the stopped trial it reuses), with the data version it is dispatched against (as
        :meth:`trial_data` would record it)."""
        self._trials.append((
            row, campaign, number, proposal, wave, config_hash, params_json, status.value,
            failure.value if failure is not None else None, message,
            dumps(metrics) if metrics is not None else None, score, cache_of, trial_dir,
            created_at, ended_at, data_version, step, _vector(scores),
        ))

    def run_instead(
        self, *, row: int, status: TrialStatus, trial_dir: str, ended_at: float | None = None,
        failure: FailureClass | None = None, message: str | None = None,
    ) -> None:
        """A cache hit that waited on another controller's trial runs the config itself
        (that trial ended without a result to reuse): it becomes a trial of its own."""
        self._reruns.append((status.value, failure.value if failure is not None else None,
                             message, trial_dir, ended_at, row))

    def relink(self, *, row: int, cache_of: int) -> None:
        """A cache hit waits on, or reuses, trial *cache_of* instead of the one it named."""
        self._relinks.append((cache_of, row))

    def release_claim(self, *, row: int) -> None:
        """Trial *row* will not run after all: its claim on its config goes (a trial's claim
        also goes, by itself, in the transaction that records its end)."""
        self._releases.append((row,))

    def end_trial(
        self, *, row: int, status: TrialStatus, ended_at: float | None,
        failure: FailureClass | None = None, message: str | None = None,
        metrics: Mapping[str, float] | None = None, score: float | None = None,
        step: int | None = None, scores: Sequence[float] | None = None,
    ) -> None:
        """A trial's outcome (``running`` with no end again: a cancelled trial resumed, a
        stopped one promoted); *step*: the step a stopped trial's *metrics* are from."""
        self._trial_ends.append((
            status.value, failure.value if failure is not None else None, message,
            dumps(metrics) if metrics is not None else None, score, ended_at, step,
            _vector(scores), row,
        ))

    def trial_data(
        self, *, row: int, expected: str | None = None, read: str | None = None
    ) -> None:
        """The data version a trial was dispatched against (*expected*) or says it *read*."""
        self._trial_data.append((expected, read, row))

    def link_trial(
        self, *, row: int, dependencies: str | None = None, replaces: int | None = None
    ) -> None:
        """What a trial ran with (its dependency digest) or the invalidated trial it re-runs."""
        self._trial_links.append((dependencies, replaces, row))

    def add_score(
        self, *, trial: int, scorer: str, version: str, score: float, baseline: int | None,
        at: float, scores: Sequence[float] | None = None,
    ) -> None:
        """One conclusion: *scorer* gave *trial* *score* (and, in a Pareto campaign, *scores*:
        one per objective), compared against *baseline*."""
        self._scores.append((trial, scorer, version, score, baseline, at, _vector(scores)))

    def add_environment(
        self, *, digest: str, python: str | None, distributions: Mapping[str, Any]
    ) -> None:
        """An environment trials ran in (stored once per digest)."""
        self._environments.append((digest, python, dumps(dict(distributions))))

    # -- attempts -------------------------------------------------------------------------

    def add_attempt(
        self, *, row: int, trial: int, attempt: int, backend: str, state: AttemptState,
        submitted_at: float, resumed: bool = False,
    ) -> None:
        """A new attempt of *trial*, recorded before it is submitted (intent first)."""
        self._attempts.append(
            (row, trial, attempt, backend, None, state.value, submitted_at, int(resumed))
        )

    def update_attempt(
        self, *, row: int, state: AttemptState, job_id: str | None = None,
        started_at: float | None = None,
    ) -> None:
        """An attempt moved on (granted, submitted, started); *job_id* ``None`` clears it."""
        self._attempt_updates.append((job_id, state.value, started_at, row))

    def end_attempt(
        self, *, row: int, state: AttemptState, ended_at: float, job_id: str | None = None,
        exit_code: int | None = None, signal: int | None = None, node: str | None = None,
        reason: str | None = None, peak_rss_kb: int | None = None,
        started_at: float | None = None, work_lost_s: float | None = None,
        spend: Mapping[str, float] | None = None,
    ) -> None:
        """How an attempt ended (and what it cost, as :meth:`attempt_spend` records it)."""
        self._attempt_ends.append((
            job_id, state.value, exit_code, signal, node, reason, peak_rss_kb, started_at,
            ended_at, work_lost_s, None if spend is None else dumps(spend), row,
        ))

    def attempt_usage(self, *, row: int, usage: Mapping[str, float]) -> None:
        """What the backend's accounting charged an attempt."""
        self._attempt_usage.append((dumps(dict(usage)), row))

    def attempt_spend(self, *, row: int, spend: Mapping[str, float]) -> None:
        """What an attempt cost (wall, compute seconds, money)."""
        self._attempt_spend.append((dumps(spend), row))

    def attempt_expected(self, *, row: int, seconds: float) -> None:
        """The run time the scheduler expected when it started an attempt."""
        self._attempt_expected.append((seconds, row))

    # -- campaigns, events, the agent -----------------------------------------------------

    def add_progress(
        self, *, row: int, attempt: int, step: int, metrics: str, at: float
    ) -> None:
        """A point of trial *row*'s learning curve (*metrics*: its JSON object)."""
        self._progress.append((row, attempt, step, metrics, at))

    def add_decision(
        self, *, campaign: int, row: int, attempt: int, rule: str, version: str,
        verdict: str, rung: int, step: int, value: float | None, cutoff: float | None,
        peers: int,
        compared: str, reason: str, bracket: int | None, at: float,
    ) -> None:
        """A stopping rule's decision about trial *row* (*compared*: its peers, as JSON)."""
        self._decisions.append((campaign, row, attempt, rule, version, verdict, rung, step,
                                value, cutoff, peers, compared, reason, bracket, at))

    def add_event(
        self, *, campaign: int, trial: int | None, at: float, kind: str,
        data: Mapping[str, Any],
    ) -> None:
        """Something that happened in a run (a retry, an alert, a pass's commands)."""
        self._events.append((campaign, trial, at, kind, dumps(data)))

    def end_campaign(
        self, *, campaign: int, status: CampaignStatus, reason: str, ended_at: float
    ) -> None:
        """A run ended with *status*, for *reason* (:meth:`EndReason.text`)."""
        self._campaign_updates.append((status.value, reason, ended_at, campaign))

    def run_time(self, *, campaign: int, seconds: float) -> None:
        """Run *campaign* has been driven *seconds* in all (its controllers' time, measured on
        each one's monotonic clock): what its wall-clock ceiling counts after a resume."""
        self._run_times.append((seconds, campaign))

    def agent_call(
        self, *, campaign: int, kind: str, proposals: Sequence[int], n: int | None = None,
        in_flight: Sequence[int] | None = None, slot: int | None = None,
        stops: Mapping[int, int] | None = None,
    ) -> int:
        """One ``propose`` (asked for *n*, with the proposals *in_flight*) or ``observe``
        call of the agent, replayed to rebuild it after a crash; returns its slot. A call
        given the *slot* of :meth:`agent_slot` fills it in, keeping its place in order."""
        entry = (campaign, kind, n, dumps(list(proposals)),
                 None if in_flight is None else dumps(list(in_flight)),
                 dumps(dict(stops)) if stops else None)
        if slot is not None:
            self._agent_log[slot] = entry
            return slot
        self._agent_log.append(entry)
        return len(self._agent_log) - 1

    def agent_snapshot(self, *, campaign: int, state: str, unobserved: Iterable[int]) -> None:
        """The agent's state (JSON) after every agent call logged so far, the run's latest,
        with the proposals numbered by then and not yet told back (*unobserved*)."""
        self._agent_snapshots[campaign] = (len(self._agent_log), state,
                                           dumps(sorted(unobserved)))

    def agent_slot(self) -> int:
        """Hold the place of an agent call that :meth:`agent_call` fills in later (a
        ``propose`` whose numbers are known once its proposals were taken, after the calls
        made while taking them)."""
        self._agent_log.append(())
        return len(self._agent_log) - 1


_Method = TypeVar("_Method", bound="Callable[..., Any]")


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """A write SQLite refuses (a full disk, a read-only file or directory) as one
    :class:`StorageError` naming the record; the transaction it was in is rolled back."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise StorageError(
            f"{path}: cannot write the record ({exc}); nothing already recorded is lost"
        ) from None


def _writes(method: _Method) -> _Method:
    """A :class:`Store` method that writes: see :func:`_writing`."""

    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
        with _writing(self.path):
            return method(self, *args, **kwargs)

    return cast("_Method", wrapper)


@dataclass(frozen=True, slots=True)
class VersionTally:
    """The trials of a run about one data version (the version read, else the expected),
    counted by the record (:meth:`Store.version_tallies`)."""

    version: str | None
    trials: int
    completed: int
    """Completed and scored trials whose result and score are valid."""
    mismatched: int
    """Trials that read another version than the one they were dispatched against."""


_VERSION = "COALESCE(NULLIF(data_version_read, ''), data_version)"
# `+t.campaign_id` below: the flagged scores are few (their partial index); the run's filter
# must not become the index SQLite walks instead (every trial of the run).
_VALID = ("invalidation IS NULL AND id NOT IN"
          " (SELECT trial_id FROM scores WHERE invalidation IS NOT NULL)")
_MISMATCH = ("data_version_read IS NOT NULL AND data_version_read <> '' AND data_version IS NOT"
             " NULL AND data_version <> '' AND data_version_read <> data_version")


class _Summaries(_Reads):
    """Reads whose cost does not grow with what they print: aggregates of one run, one
    trial, or the trials of a run a page at a time (``dse status``, ``report``, ``show``,
    ``export`` of a million-trial record)."""

    __slots__ = ()

    def run_time(self, campaign_id: int) -> float:
        """The time controllers drove run *campaign_id* (seconds, as last recorded; 0 for a
        run not recorded yet): what its wall-clock ceiling has counted."""
        rows = self._rows("SELECT run_s FROM campaigns WHERE id = ?", (campaign_id,))
        return max(float(rows[0][0] or 0.0), 0.0) if rows else 0.0

    def earlier_runs(self, name: str, before: int) -> Earlier:
        """What the runs of the campaign *name* before run *before* spent: their ids, the
        trials they dispatched, their attempts' spend and their run time (summaries: a few
        rows whatever their size)."""
        runs = self._rows("SELECT c.id, c.run_s, COALESCE(t.dispatched, 0), "
                          + ", ".join(f"COALESCE(t.{k}, 0)" for k in _SPEND_KEYS)
                          + " FROM campaigns c LEFT JOIN run_totals t ON t.campaign_id = c.id"
                          " WHERE c.name = ? AND c.id < ? ORDER BY c.id", (name, before))
        spent = Spend()
        for row in runs:
            spent = spent + Spend(*(float(v) for v in row[3:]))
        return Earlier(runs=tuple(int(r[0]) for r in runs),
                       trials=sum(int(r[2]) for r in runs), spent=spent,
                       run_s=sum(max(float(r[1] or 0.0), 0.0) for r in runs))

    def failure_counts(self, campaign_id: int) -> dict[str, int]:
        """Failure class → trials of run *campaign_id* (not cache hits) that carry it."""
        return {str(failure): int(n) for failure, n in self._rows(
            "SELECT failure, SUM(trials) FROM run_tallies WHERE campaign_id = ? AND failure <> ''"
            " AND status <> ? GROUP BY failure HAVING SUM(trials) > 0 ORDER BY MIN(first)",
            (campaign_id, TrialStatus.CACHED.value),
        )}

    def first_failures(self, campaign_id: int) -> dict[str, tuple[int, str | None]]:
        """Failure class → (number, message) of the first failed trial of run *campaign_id*
        that carries it (its lowest number, by the tallies, then one indexed lookup each)."""
        return {str(failure): (int(number), message) for failure, number, message in self._rows(
            "SELECT f.failure, t.number, t.message FROM (SELECT failure, MIN(first) AS number"
            " FROM run_tallies WHERE campaign_id = ? AND status = ? AND failure <> ''"
            " AND trials > 0 GROUP BY failure) f JOIN trials t ON t.campaign_id = ?"
            " AND t.number = f.number AND t.failure = f.failure ORDER BY t.number",
            (campaign_id, TrialStatus.FAILED.value, campaign_id),
        )}

    def outcome_counts(self, campaign_id: int) -> dict[str, int]:
        """Trial status → trials of run *campaign_id*, in the order each status first
        appeared."""
        return {str(status): int(n) for status, n in self._rows(
            "SELECT status, SUM(trials) FROM run_tallies WHERE campaign_id = ? GROUP BY status"
            " HAVING SUM(trials) > 0 ORDER BY MIN(first)", (campaign_id,),
        )}

    def unstarted(self, campaign_id: int) -> dict[TrialStatus, int]:
        """Of run *campaign_id*'s ``running`` trials, how many have no attempt running now
        (submitted and not started yet, or waiting to be retried): queued; of its
        ``cancelled`` ones, how many never started. Read by the partial index of the open
        trials: its cost grows with what is unfinished, never with the run."""
        return {_TRIAL_STATUS[status]: int(n) for status, n in self._rows(
            f"SELECT t.status, COUNT(*) FROM trials t WHERE t.campaign_id = ? AND ({_OPEN})"
            " AND t.status IN ('running', 'cancelled') AND NOT EXISTS (SELECT 1 FROM"
            " attempts a WHERE a.trial_id = t.id AND a.started_at IS NOT NULL AND"
            " (t.status = 'cancelled' OR a.ended_at IS NULL)) GROUP BY t.status",
            (campaign_id,))}

    def cache_links(self, campaign_id: int) -> list[tuple[int, int]]:
        """(number, trial row it reuses) of each cache hit of run *campaign_id*, by number."""
        return [(int(n), int(row)) for n, row in self._rows(
            "SELECT number, cache_of FROM trials WHERE campaign_id = ? AND cache_of IS NOT NULL"
            " ORDER BY number", (campaign_id,),
        )]

    def mismatched_numbers(self, campaign_id: int) -> list[int]:
        """The trials (numbers) of run *campaign_id* that read another data version than
        they were dispatched against."""
        ((some,),) = self._rows("SELECT COUNT(*) FROM run_tallies WHERE campaign_id = ? AND"
                                " mismatched AND trials > 0", (campaign_id,))
        if not some:
            return []
        return [int(n) for (n,) in self._rows(
            f"SELECT number FROM trials WHERE campaign_id = ? AND {_MISMATCH} ORDER BY number",
            (campaign_id,),
        )]

    def version_tallies(self, campaign_id: int) -> list[VersionTally]:
        """The trials of run *campaign_id* grouped by the data version they are about, in
        the order each version first appeared."""
        flagged = dict(self._rows(
            f"SELECT IFNULL({_VERSION}, ''), COUNT(*) FROM trials WHERE id IN"
            " (SELECT id FROM trials WHERE campaign_id = ? AND invalidation IS NOT NULL UNION"
            " SELECT s.trial_id FROM scores s JOIN trials t ON t.id = s.trial_id"
            " WHERE s.invalidation IS NOT NULL AND +t.campaign_id = ?)"
            f" AND status = ? AND score IS NOT NULL GROUP BY 1",
            (campaign_id, campaign_id, TrialStatus.COMPLETED.value),
        ))
        return [
            VersionTally(v or None, int(n), int(done) - int(flagged.get(v, 0)), int(odd))
            for v, n, done, odd in self._rows(
                "SELECT version, SUM(trials), TOTAL(trials * (status = ? AND scored)),"
                " TOTAL(trials * mismatched) FROM run_tallies WHERE campaign_id = ?"
                " GROUP BY version HAVING SUM(trials) > 0 ORDER BY MIN(first)",
                (TrialStatus.COMPLETED.value, campaign_id),
            )
        ]

    def best_of_version(self, campaign_id: int, version: str | None, *,
                        maximize: bool) -> Trial | None:
        """The best valid scored trial (completed, or a cache hit of one) of run
        *campaign_id* about data *version*; the lowest number among equals (through the
        index of scores: the first rows it walks are the answer)."""
        order = "DESC" if maximize else "ASC"
        rows = self._rows(
            f"SELECT {_TRIAL} FROM trials WHERE campaign_id = ? AND score IS NOT NULL AND"
            f" IFNULL({_VERSION}, '') = IFNULL(?, '') AND status IN (?, ?) AND {_VALID}"
            f" ORDER BY score {order}, number LIMIT 1",
            (campaign_id, version, TrialStatus.COMPLETED.value, TrialStatus.CACHED.value),
        )
        return _trial(rows[0], self._root) if rows else None

    def pareto_trials(self, campaign_id: int) -> list[Trial]:
        """The valid trials of run *campaign_id* scored on each objective of a Pareto campaign
        (completed, or a cache hit of one), in the order they ended: its fronts' material."""
        return [_trial(r, self._root) for r in self._rows(
            f"SELECT {_TRIAL} FROM trials WHERE campaign_id = ? AND scores IS NOT NULL AND"
            f" status IN (?, ?) AND {_VALID} ORDER BY ended_at, number",
            (campaign_id, TrialStatus.COMPLETED.value, TrialStatus.CACHED.value),
        )]

    def trial_pages(self, campaign_id: int, size: int = 1000) -> Iterator[list[Trial]]:
        """The trials of run *campaign_id* by number, *size* at a time (each page one
        indexed query: memory holds one page, never the run)."""
        after = -1
        while True:
            page = [_trial(r, self._root) for r in self._rows(
                f"SELECT {_TRIAL} FROM trials WHERE campaign_id = ? AND number > ?"
                " ORDER BY number LIMIT ?", (campaign_id, after, size),
            )]
            if not page:
                return
            yield page
            after = page[-1].number

    def trial_scores(self, rows: Iterable[int]) -> list[Score]:
        """Every score given to the trial rows *rows*, oldest first."""
        found = self._in(f"SELECT {_SCORE} FROM scores WHERE trial_id IN ({{marks}})", rows)
        return [_score(r) for r in sorted(found)]


def _decision(r: tuple[Any, ...]) -> DecisionRow:
    return DecisionRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
                       [(int(n), None if v is None else float(v)) for n, v in _loads(r[11])],
                       r[12], r[13], r[14])  # a null value: not a finite number (the worst)


class _Stops(_Summaries):
    """Reads of early stopping: the stopping rule's decisions, the learning curves a resumed
    run's rule is rebuilt from, the trials stopped at a rung."""

    def decisions(self, trial_row: int) -> list[DecisionRow]:
        """The decisions about trial *trial_row*, in the order they were made."""
        return [_decision(r) for r in self._rows(
            f"SELECT {_DECISION} FROM decisions d JOIN trials t ON t.id = d.trial_id"
            " WHERE d.trial_id = ? ORDER BY d.id", (trial_row,))]

    def run_decisions(self, campaign_id: int, verdicts: Sequence[str] = ("stop", "promote")
                      ) -> list[DecisionRow]:
        """The decisions of run *campaign_id* with one of *verdicts*, in the order made."""
        marks = ",".join("?" * len(verdicts))
        return [_decision(r) for r in self._rows(
            f"SELECT {_DECISION} FROM decisions d JOIN trials t ON t.id = d.trial_id"
            f" WHERE d.campaign_id = ? AND d.verdict IN ({marks}) ORDER BY d.id",
            (campaign_id, *verdicts))]

    def decision_counts(self, campaign_id: int) -> dict[tuple[str, int], int]:
        """How many trials of run *campaign_id* were stopped or promoted at each rung:
        ``(verdict, rung) -> count`` (read from ``stop_totals``, which SQLite keeps as
        decisions are written: a few rows at a million trials as at ten)."""
        return {(v, rung): n for v, rung, n in self._rows(
            "SELECT kind, rung, trials FROM stop_totals WHERE campaign_id = ? AND kind"
            " IN ('stop', 'promote') AND trials > 0", (campaign_id,))}

    def run_progress(self, campaign_id: int) -> Iterator[tuple[int, int, int, str]]:
        """Every point of run *campaign_id*'s learning curves as ``(trial number, proposal,
        step, metrics JSON)``, in the order they were reported."""
        yield from self._db.execute(
            "SELECT t.number, t.proposal, p.step, p.metrics FROM trials t JOIN progress p"
            " ON p.trial_id = t.id WHERE t.campaign_id = ? ORDER BY p.at, t.number, p.step",
            (campaign_id,))

    def trial_by_row(self, row: int) -> Trial | None:
        """Trial row *row*, or ``None``."""
        found = self._rows(f"SELECT {_TRIAL} FROM trials WHERE id = ?", (row,))
        return _trial(found[0], self._root) if found else None

    def stopped_trials(self, campaign_id: int) -> list[Trial]:
        """The trials of run *campaign_id* that ended stopped by its rule (not cache hits)."""
        return [_trial(r, self._root) for r in self._rows(
            f"SELECT {_TRIAL} FROM trials WHERE campaign_id = ? AND status = 'stopped' AND"
            " cache_of IS NULL ORDER BY number", (campaign_id,))]

    def trial_decisions(self, trial_rows: Iterable[int]) -> list[DecisionRow]:
        """The decisions about each of *trial_rows*, in the order they were made."""
        return [_decision(r[1:]) for r in sorted(self._in(
            f"SELECT d.id, {_DECISION} FROM decisions d JOIN trials t ON t.id = d.trial_id"
            " WHERE d.trial_id IN ({marks})", trial_rows))]

    def first_steps(self, trial_rows: Iterable[int]) -> dict[tuple[int, int], int]:
        """``(trial row, attempt) -> the first step that attempt reported``, for each attempt
        of *trial_rows* with a learning curve (where a promoted trial resumed)."""
        return {(row, attempt): step for row, attempt, step in self._in(
            "SELECT trial_id, attempt, MIN(step) FROM progress WHERE trial_id IN ({marks})"
            " GROUP BY trial_id, attempt", trial_rows)}

    def trial_progress(self, trial_rows: Iterable[int]) -> dict[int, list[ProgressRow]]:
        """The learning curves of *trial_rows* (each by attempt and step)."""
        out: dict[int, list[ProgressRow]] = {}
        for row, attempt, step, metrics, at in sorted(self._in(
                "SELECT trial_id, attempt, step, metrics, at FROM progress"
                " WHERE trial_id IN ({marks})", trial_rows)):
            out.setdefault(row, []).append(ProgressRow(attempt, step, _loads(metrics), at))
        return out

    def stop_tallies(self, campaign_id: int) -> list[StopTally]:
        """The trials of run *campaign_id* that ended stopped, by the rung and step of the
        decision that last stopped each, with what their attempts spent (read from
        ``stop_totals``)."""
        return [StopTally(rung, step, trials, Spend(*spend)) for rung, step, trials, *spend
                in self._rows(
            f"SELECT rung, step, trials, {', '.join(_SPEND_KEYS)} FROM stop_totals"
            " WHERE campaign_id = ? AND kind = 'ended_stopped' AND trials > 0"
            " ORDER BY rung, step", (campaign_id,))]

    def completed_spend(self, campaign_id: int) -> tuple[int, Spend]:
        """How many trials of run *campaign_id* ran to their end (completed) and what their
        attempts spent: from ``stop_totals`` once the run has a decision, else summed from
        its rows."""
        found = self._rows(
            f"SELECT trials, {', '.join(_SPEND_KEYS)} FROM stop_totals WHERE campaign_id = ?"
            " AND kind = 'ended_completed'", (campaign_id,))
        if not found and not self._rows(
                "SELECT 1 FROM stop_totals WHERE campaign_id = ? LIMIT 1", (campaign_id,)):
            found = self._rows(
                "SELECT COUNT(DISTINCT t.id), "
                + ", ".join(f"TOTAL(json_extract(a.spend, '$.{k}'))" for k in _SPEND_KEYS)
                + " FROM trials t LEFT JOIN attempts a ON a.trial_id = t.id"
                " WHERE t.campaign_id = ? AND t.status = 'completed'", (campaign_id,))
        if not found:
            return 0, Spend()
        trials, *spend = found[0]
        return int(trials), Spend(*spend)

    def stopping_rule(self, campaign_id: int) -> tuple[str, str] | None:
        """The rule and version of run *campaign_id*'s latest decision of one verdict (stop,
        else promote, else continue: each one probe of the index ``decisions_run``), or
        ``None``."""
        for verdict in ("stop", "promote", "continue"):
            found = self._rows("SELECT rule, rule_version FROM decisions WHERE campaign_id = ?"
                               " AND verdict = ? ORDER BY id DESC LIMIT 1",
                               (campaign_id, verdict))
            if found:
                return str(found[0][0]), str(found[0][1])
        return None


@dataclass(frozen=True, slots=True)
class StopTally:
    """The trials of a run that ended stopped at one rung and step, and their spend."""

    rung: int
    step: int
    """The step the stopping decision compared (the trial's metrics are from it)."""
    trials: int
    spend: Spend
    """What every attempt of those trials spent."""


# -- the connection: a busy record waited out, a damaged one named, a read-only one read -------

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


class _Cursor(sqlite3.Cursor):
    """A cursor of a :class:`_Connection`: its statements wait out a busy record, and a
    damaged page met while reading rows is a :class:`DamagedRecordError`."""

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        cast("_Connection", self.connection).attempt(sql, super().execute, sql, parameters)
        return self

    def executemany(self, sql: str, seq: Any, /) -> _Cursor:
        cast("_Connection", self.connection).attempt(sql, super().executemany, sql, seq)
        return self

    def _named(self, exc: sqlite3.DatabaseError) -> Exception:
        return cast("_Connection", self.connection).named(exc)

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


class _Connection(sqlite3.Connection):
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

    def cursor(self, factory: Any = _Cursor) -> Any:  # ours by default
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        return cast("_Cursor", self.cursor()).execute(sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> _Cursor:
        return cast("_Cursor", self.cursor()).executemany(sql, seq)

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


def _connect(target: str | Path, path: Path, say: Callable[[str], None] | None, *,
             uri: bool = False) -> _Connection:
    db = sqlite3.connect(target, isolation_level=None, timeout=TRY_S, uri=uri,
                         factory=_Connection)
    db.path = path
    db.wait = BusyWait(path, say)
    return db


def header_damage(path: Path) -> str | None:
    """What the first 100 bytes and the size of the file at *path* say is wrong with it as a
    SQLite file (not one, truncated), or ``None`` (a sound header, an empty file, no file):
    a read of 100 bytes, cheap enough for every open. The size is checked against the
    header's page count only without a ``-wal`` or ``-journal`` (a writer at work)."""
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


def _open(path: Path, *, durable: bool, say: Callable[[str], None] | None
          ) -> tuple[_Connection, str, str]:
    """The record at *path* opened for writing, made or migrated, with its journal mode and
    ``synchronous`` setting; a damaged file refused before anything is written."""
    check_writable(path)
    problem = header_damage(path)
    if problem is not None:
        raise damaged(path, problem)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existing = path.is_file() and path.stat().st_size > 0
        wanted = _journal_mode(path)
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
        with _writing(path):
            _bring_up_to_date(db, path)
    except BaseException as exc:
        # A transaction left open would hold the record's write lock for this process's
        # life (a Python API caller that catches the error goes on).
        db.close()
        if isinstance(exc, sqlite3.DatabaseError):
            raise StoreError(f"{path}: not a dse record ({exc})") from None
        raise
    return db, str(row[0]).lower(), sync


def _quick_check(db: _Connection, path: Path) -> None:
    """SQLite's ``quick_check`` of every page (about 0.2 s for 50 MB; not the indexes'
    contents, which ``dse doctor`` checks): a damaged record is refused before a write."""
    found = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)").fetchall()]
    if found != ["ok"]:
        raise damaged(path, "; ".join(found))


def _open_read_only(path: Path, say: Callable[[str], None] | None) -> _Connection | None:
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
        found = _schema_version(db)
        if found is None and not db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall():
            # A SQLite file with no table yet: a `dse run` starting now is making its record.
            raise StoreError(f"{path}: no dse record here yet (no table in it: no run is"
                             " recorded; a `dse run` starting now makes them)")
        if found is None:
            raise StoreError(f"{path}: not a dse record (it holds no dse schema)")
        if found != str(SCHEMA_VERSION) and found.isdigit() and int(found) in _MIGRATIONS:
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


class Store(_Stops):
    """The SQLite record of a workspace (``<workspace>/dse.sqlite``).

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
        """Open the record, creating the file and its schema if need be (read only: as it
        is); a damaged one is a :class:`DamagedRecordError`, before anything is written."""
        db = _open_read_only(self.path, self.say) if self.read_only else None
        if db is None:
            db, self.journal_mode, self._sync = _open(self.path, durable=self.durable,
                                                      say=self.say)
        else:
            self.journal_mode = str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            self._sync = "OFF"
        self._db = db
        # Ids are handed out from blocks the record reserved for this Store: [next, end).
        self._next_trial = self._end_trial = self._next_attempt = self._end_attempt = 0
        self._blocks = {"trials": _FIRST_BLOCK, "attempts": _FIRST_BLOCK}
        self._claiming = False
        """Whether this Store claimed configs (its trials' ends then release them)."""

    def _max_id(self, table: str) -> int:
        row = self._db.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the database connection; the store is not to be used after."""
        self._db.close()

    # -- ids ------------------------------------------------------------------------------

    def new_trial_id(self) -> int:
        """A trial row id no other Store of this record hands out."""
        if self._next_trial >= self._end_trial:
            self._next_trial, self._end_trial = self._reserve("trials")
        value = self._next_trial
        self._next_trial += 1
        return value

    def new_attempt_id(self) -> int:
        """An attempt row id no other Store of this record hands out."""
        if self._next_attempt >= self._end_attempt:
            self._next_attempt, self._end_attempt = self._reserve("attempts")
        value = self._next_attempt
        self._next_attempt += 1
        return value

    def _reserve(self, table: str) -> tuple[int, int]:
        """Reserve the next block of ids of *table* in the record: ``[first, end)``. Blocks
        double up to a limit, so a long run asks rarely and a short one wastes little."""
        size = self._blocks[table]
        self._blocks[table] = min(size * 2, _LAST_BLOCK)
        with self._light_write():
            # Past every row, too: rows written without the counter (a test's SQL) are skipped.
            (end,) = self._db.execute(_RESERVE.format(table=table), (size, table)).fetchone()
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

    @_writes
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
        """Record a new run (status ``running``, created at *now*) in its own transaction;
        return its id. *agent* and *backend* are ``"name==version"``; *spec* is the campaign
        as the record keeps it."""
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

    @_writes
    def commit(self, batch: Batch) -> None:
        """Write every change of *batch* in one transaction, then clear it."""
        if not batch:
            return
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            for sql, rows in (
                (_INSERT_TRIAL, batch._trials),
                (_RUN_INSTEAD, batch._reruns),
                (_RELINK, batch._relinks),
                (_INSERT_ATTEMPT, batch._attempts),
                (_UPDATE_ATTEMPT, batch._attempt_updates),
                (_END_ATTEMPT, batch._attempt_ends),
                ("UPDATE attempts SET usage=? WHERE id=?", batch._attempt_usage),
                (_TRIAL_DATA, batch._trial_data),
                ("UPDATE attempts SET spend=? WHERE id=?", batch._attempt_spend),
                ("UPDATE attempts SET expected_s=? WHERE id=?", batch._attempt_expected),
                (_END_TRIAL, batch._trial_ends),
                (_INSERT_ENVIRONMENT, batch._environments),
                (_LINK_TRIAL, batch._trial_links),
                (_INSERT_SCORE, batch._scores),
                (_INSERT_EVENT, batch._events),
                (_INSERT_PROGRESS, batch._progress),
                (_INSERT_DECISION, batch._decisions),
                (_INSERT_AGENT_CALL, batch._agent_log),
                (_END_CAMPAIGN, batch._campaign_updates),
                ("UPDATE campaigns SET run_s=? WHERE id=?", batch._run_times),
            ):
                if sql is _INSERT_AGENT_CALL and batch._agent_snapshots:
                    # Rows get ids one past the largest, in order: the k-th of this batch's
                    # calls is row last + k (the snapshot names the last call it covers).
                    (last,) = db.execute("SELECT COALESCE(MAX(id), 0) FROM agent_log").fetchone()
                    db.executemany(_SNAPSHOT, [(c, last + k, state, unobserved)
                                               for c, (k, state, unobserved)
                                               in batch._agent_snapshots.items()])
                if rows:
                    db.executemany(sql, rows)
            if self._claiming:
                db.executemany(_RELEASE, _released(batch))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        batch.clear()

    # -- reads ----------------------------------------------------------------------------

    def last_invalidation(self) -> int:
        """The id of the latest invalidation (0: none); cheap enough to ask every pass."""
        return self._max_id("invalidations")

    # -- changes outside a polling pass -------------------------------------------------

    @_writes
    def invalidate(
        self, kind: str, target: str, reason: str, now: float, *, trial_row: int | None = None,
        select: TrialSelection | None = None, dry_run: bool = False,
    ) -> tuple[int, int, int] | None:
        """Flag results invalid, and every comparison that used them; delete nothing.

        *kind* ``trial`` (*target*: the trial as the user named it, *trial_row*: its row)
        flags that trial and the cache hits that reuse it; ``data_version`` flags every trial
        that ran against, or read, version *target*; ``scorer_version`` flags the scores given
        by that scorer version (*target*: ``<version>`` or ``<scorer>==<version>``);
        ``trials`` flags the trials *select* picks (*target* says which, for the record) and
        the cache hits that reuse them. The scores of flagged trials, and the scores compared
        against a flagged trial as their baseline, are flagged too. Something already flagged
        keeps its first reason. With *dry_run* the counts are the same and nothing is kept.

        Returns (invalidation id, trials newly flagged, scores newly flagged), or ``None``
        when nothing in the record matches *target* (nothing is written then).
        """
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
        """The runs of campaign *name* left ``running``, each with the controller the record
        says drives it (the latest ``controller`` event: host, pid, its start): a run's
        ownership that a deleted lock file does not erase."""
        out = []
        for run, data in self._rows(
            "SELECT c.id, (SELECT e.data FROM events e WHERE e.campaign_id = c.id AND"
            " e.kind = 'controller' ORDER BY e.id DESC LIMIT 1) FROM campaigns c"
            " WHERE c.name = ? AND c.status = 'running'", (name,),
        ):
            owner = _loads(data) if data else None
            if isinstance(owner, dict):
                out.append((int(run), owner))
        return out

    @_writes
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

    # -- configurations shared with other controllers --------------------------------------

    def claim(self, wanted: Mapping[str, int], campaign: str, now: float, *,
              reuse: bool = True, run: int | None = None,
              orphan: Orphan | None = None) -> dict[str, Claim]:
        """Claim each config hash of *wanted* for the trial row it maps to, on behalf of
        *campaign*, in one short transaction; what the record says of each.

        A config with a reusable finished result (:data:`REUSABLE_ROW`; when not *reuse*, only
        a result of run *run*, the claimant's own) is not claimed: its :class:`Claim` names
        that result. A config claimed by the trial of a
        live controller of another campaign (its lock is held, see
        :func:`dse.record._lock.lock_held`)
        names that trial, to wait on. Otherwise the claim is this one's — taken over from a
        controller that is gone, from a trial whose result has been invalidated, or from a trial
        of *campaign* itself (whose own table knows better: that trial has ended) — until the
        transaction that records the trial's end (or :meth:`Batch.release_claim`). A claim of
        a controller that is gone is still waited on while *orphan* says its trial's last
        attempt runs on (``orphan(job_id, trial_dir, attempt)``:
        :meth:`dse.Backend.still_running`).
        """
        # Only a run claims: the commands that read the record never import the lock module.
        from dse.record._lock import lock_held

        self._claiming = True
        out: dict[str, Claim] = {}
        db = self._db
        digests = list(wanted)
        own = "" if reuse else " AND campaign_id = ?"
        with self._light_write():
            for chunk in _chunks(digests if reuse or run is not None else []):
                marks = ",".join("?" * len(chunk))
                for found in db.execute(
                    f"SELECT {_TRIAL} FROM trials WHERE config_hash IN ({marks}) AND"
                    f" {REUSABLE_ROW}{own} ORDER BY id DESC",
                    chunk if reuse else [*chunk, run],
                ):
                    out[found[5]] = Claim(found[0], mine=False, result=_trial(found, self._root))
            free = [d for d in digests if d not in out]
            held: dict[str, tuple[Any, ...]] = {}
            for chunk in _chunks(free):
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
            db.executemany(_CLAIM, [(d, wanted[d], campaign, now)
                                    for d in free if out[d].mine])
        return out

    def _orphan(self, orphan: Orphan | None, job_id: str | None, trial_dir: str | None,
                attempt: int | None) -> bool:
        """Whether the last attempt of a gone controller's trial still runs (*orphan*
        asked)."""
        path = _absolute(trial_dir, self._root)
        return bool(orphan and path and attempt
                    and orphan(job_id, Path(path), int(attempt)))

    def reset_claims(self, campaign: str, live: Mapping[str, int], now: float) -> None:
        """Drop every claim of *campaign* (its controller, this one, holds its lock: they are
        left by a run that is gone) and claim again, where nobody else has, the configs of
        its *live* trials (config hash → trial row)."""
        self._claiming = True
        with self._light_write():
            self._db.execute("DELETE FROM claims WHERE campaign = ?", (campaign,))
            self._db.executemany(
                "INSERT OR IGNORE INTO claims(config_hash, trial_id, campaign, claimed_at)"
                " VALUES (?, ?, ?, ?)",
                [(digest, row, campaign, now) for digest, row in live.items()],
            )


def _released(batch: Batch) -> Iterator[tuple[int]]:
    """The trial rows whose claims a commit of *batch* releases: those it ends (or records
    ended as they are made), and those released outright."""
    yield from batch._releases
    for change in batch._trial_ends:
        if change[5] is not None:
            yield (change[-1],)  # the row id ends the statement's parameters
    for change in batch._trials:
        if change[15] is not None:
            yield (change[0],)
    for change in batch._reruns:
        if change[4] is not None:
            yield (change[5],)


@dataclass(frozen=True, slots=True)
class TrialSelection:
    """Which trials ``dse invalidate`` flags by selector; every set field must hold."""

    failed: str | None = None
    """``""``: every failed trial; a failure class: those that failed so; ``None``: any."""
    run: int | None = None
    """Only the trials of this run."""
    campaign: str | None = None
    """Only the trials of the runs of this campaign."""

    def describe(self) -> str:
        """How the record names it: ``failed=out_of_memory run=3``."""
        parts = []
        if self.failed is not None:
            parts.append(f"failed={self.failed or 'any'}")
        if self.run is not None:
            parts.append(f"run={self.run}")
        if self.campaign is not None:
            parts.append(f"campaign={self.campaign}")
        return " ".join(parts)


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


def _chunks(ids: Sequence[_T], size: int = 500) -> list[Sequence[_T]]:
    """*ids* in pieces small enough for SQLite's limit on bound parameters."""
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def workspace_db(workspace: str | Path) -> Path:
    return Path(workspace) / DB_NAME


_REBUILD = (*_BACKFILL_11, *_BACKFILL_12, *_BACKFILL_15)
"""Every summary SQLite keeps as rows are written, built again from the rows (a summary of a
new schema adds its backfill here)."""


@_writes
def rebuild_summaries(store: Store) -> None:
    """Build the summaries (``run_tallies``, ``run_totals``, ``stop_totals``) of *store*
    again from its rows, in one transaction: ``dse doctor --salvage`` keeps the rows of a
    damaged record that read, and its summaries counted the rows that did not too."""
    db = store._db
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in _REBUILD:
            db.execute(statement)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


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
