"""The record's rows as values: the columns each read selects, the conditions shared by
reads and the schema, the row converters, and :class:`Queries`, the base of every read."""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from dse.model._spend import Spend
from dse.model._states import (
    REUSED_FAILURES,
    AttemptState,
    CampaignStatus,
    FailureClass,
    TrialStatus,
)
from dse.record._records import Attempt, CampaignRun, Score, Trial, TrialRef

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from pathlib import Path


loads = json.JSONDecoder().decode


TRIAL_STATUS = {s.value: s for s in TrialStatus}


_FAILURE: dict[str | None, FailureClass | None] = {f.value: f for f in FailureClass}


_FAILURE[None] = None


ATTEMPT_STATE = {s.value: s for s in AttemptState}


_CAMPAIGN_STATUS = {s.value: s for s in CampaignStatus}


CAMPAIGN = ("id, name, source, spec, agent, backend, mode, max_parallelism, status,"
             " end_reason, created_at, ended_at")


REUSABLE = ("(status IN ('completed', 'stopped') OR (status = 'failed' AND failure IN ("
            + ", ".join(sorted(f"'{f.value}'" for f in REUSED_FAILURES)) + ")))")


"""The trials whose result a later identical proposal may reuse (:func:`dse.model._types.reusable`,
in SQL): the one place the record says so."""


TRIAL = ("id, campaign_id, number, proposal, wave, config_hash, params, status, failure,"
          " message, metrics, score, cache_of, trial_dir, data_version, data_version_read,"
          " dependencies, replaces, invalidation, created_at, ended_at, stop_step, scores")


_ATTEMPT = ("id, trial_id, attempt, backend, job_id, state, exit_code, signal, node, reason,"
            " peak_rss_kb, resumed, work_lost_s, usage, spend, expected_s, submitted_at,"
            " started_at, ended_at, left_files")


SCORE = ("id, trial_id, scorer, scorer_version, score, baseline_trial, created_at, invalidation,"
          " scores")


def _columns(names: str, table: str) -> str:
    """*names* (``"a, b"``) qualified by a table alias (``"t.a, t.b"``)."""
    return ", ".join(f"{table}.{name}" for name in names.split(", "))


_TRIAL_T = _columns(TRIAL, "t")


ATTEMPT_A = _columns(_ATTEMPT, "a")


SCORE_S = _columns(SCORE, "s")


REUSABLE_ROW = f"{REUSABLE} AND cache_of IS NULL AND invalidation IS NULL"


"""THE test of whether a finished trial row's result may be reused by an identical proposal
(a SQL condition on ``trials``, unqualified columns): every lookup of a reusable result —
:meth:`Store.claim` above all — goes through it."""


TRIAL_REF = "t.id, t.campaign_id, c.name, t.number"


TRIAL_REF_FROM = "FROM trials t JOIN campaigns c ON c.id = t.campaign_id"


TRIAL_FORM = re.compile(r"(?P<campaign>.+)-(?P<run>[0-9]+)-(?P<number>[0-9]+)")


SHORT_FORM = re.compile(r"(?P<run>[^:]+):(?P<number>[0-9]+)")


FORMS = "<campaign>-<run>-<number>, <campaign>:<number> or <run>:<number>"


def as_campaign(r: tuple[Any, ...]) -> CampaignRun:
    return CampaignRun(r[0], r[1], r[2], loads(r[3]) if r[3] else {}, r[4], r[5], r[6], r[7],
                       _CAMPAIGN_STATUS[r[8]], r[9], r[10], r[11])


def as_trial(r: tuple[Any, ...], root: Path | None) -> Trial:
    return Trial(r[0], r[1], r[2], r[3], r[4], r[5], r[6], TRIAL_STATUS[r[7]], _FAILURE[r[8]],
                 r[9], r[10], r[11], r[12], absolute_dir(r[13], root), r[14], r[15], r[16], r[17],
                 r[18], r[19], r[20], r[21], r[22])


def absolute_dir(stored: str | None, root: Path | None) -> str | None:
    """A trial directory the record keeps, as a path of this machine: one recorded where the
    workspace *root* lay before it moved (or was copied) whole is read where it is now, since
    every run puts its trials in ``<campaign>/run-<run>/<number>`` of its workspace."""
    if (not stored or root is None or stored.startswith(f"{root}{os.sep}")
            or not os.path.isabs(stored)):
        return stored
    head, number = os.path.split(stored)
    head, run = os.path.split(head)
    campaign = os.path.basename(head)
    if not (number.isdigit() and run.startswith("run-") and campaign):
        return stored  # not where dse puts trials: as recorded
    return os.path.join(root, campaign, run, number)


def as_spend(text: str) -> Spend:
    return Spend(**loads(text))


def as_attempt(r: tuple[Any, ...]) -> Attempt:
    return Attempt(r[0], r[1], r[2], r[3], r[4], ATTEMPT_STATE[r[5]], r[6], r[7], r[8], r[9],
                   r[10], bool(r[11]), r[12], r[13], r[14], r[15], r[16], r[17], r[18], r[19])


def as_score(r: tuple[Any, ...]) -> Score:
    return Score(*r)


def as_trial_ref(r: tuple[Any, ...]) -> TrialRef:
    return TrialRef(*r)


OPEN = ("status IN ('running', 'cancelled') OR proposal = 0"
         " OR (cache_of IS NOT NULL AND ended_at IS NULL)")


"""The trials a resume rebuilds whatever its agent's snapshot says (unfinished, baseline
runs, cache hits still waiting): a query naming this very condition reads them by the
partial index ``trials_open``."""


ENDED = ("a.state IN ('succeeded', 'failed') AND a.started_at IS NOT NULL"
          " AND a.ended_at IS NOT NULL")


"""Attempts a duration estimate learns from (``attempts_ended`` indexes them by their end)."""


def chunks(ids: Sequence[_T], size: int = 500) -> list[Sequence[_T]]:
    """*ids* in pieces small enough for SQLite's limit on bound parameters."""
    return [ids[i : i + size] for i in range(0, len(ids), size)]


_T = TypeVar("_T")


SPEND_KEYS = ("wall_s", "cpu_s", "gpu_s", "node_s", "money")


class Cursor(Protocol):
    """What a statement run on a :class:`Connection` gives back (a DB-API cursor)."""

    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchmany(self, size: int = ..., /) -> list[Any]: ...

    def close(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """The connection :class:`Queries` read through: SQLite's, or one that takes the same SQL
    (``?`` marks, SQLite's functions) to another database
    (:class:`dse.record.postgres._dialect.Translating`)."""

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor: ...

    def executemany(self, sql: str, rows: Any, /) -> Cursor: ...


class Queries:
    """Reads on one connection of the record: rows in, values of :mod:`dse.record._records`
    out. :class:`~dse.record.sql._reads.Reads`, ``Summaries`` and ``Stops`` are its kinds;
    a :class:`~dse.record.sqlite._store.Store` holds one of each."""

    __slots__ = ("db", "path", "root")

    def __init__(self, db: Connection, path: Path, root: Path | None) -> None:
        self.db = db
        self.path = path
        """Where the record is (its file; for a database server, its workspace)."""
        self.root = root
        """The workspace where a record file is now (its trial directories are read there);
        ``None`` for a database server's record, whose trial directories are as recorded."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row *sql* reads."""
        return self.db.execute(sql, params).fetchall()

    def rows_in(self, sql: str, ids: Iterable[int], *rest: Any) -> list[tuple[Any, ...]]:
        """*sql* with ``{marks}`` run once per chunk of *ids* (bound first, then *rest*)."""
        out: list[tuple[Any, ...]] = []
        for chunk in chunks(sorted(set(ids))):
            marks = ",".join("?" * len(chunk))
            out += self.rows(sql.format(marks=marks), (*chunk, *rest))
        return out
