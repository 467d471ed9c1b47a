"""The summaries (``run_tallies``, ``run_totals``, ``stop_totals``) kept by a pass's commit,
in its transaction: what the rows a batch touches added to them is read before its writes and
again after, and the difference is added, a few upserts per pass (triggers did it before
schema 20: several statements per trial).

Every summary is a sum over rows of what each row adds (a trial its tally key, its directory
and wave; an attempt its dispatch, spend and seconds; an ended trial of a run with stopping
decisions its end key and its attempts' spend): a row's share is the same SQL expression the
rebuild (:data:`dse.record.sql._schema.REBUILD`) sums, so the kept summaries are the rebuilt
ones. Each upsert adds to the row it finds, so controllers sharing a record never lose one
another's changes. Whatever else writes trials, attempts or decisions outside a pass (a copy,
a salvage, a migration) rebuilds the summaries after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.record.sql._rows import SPEND_KEYS, chunks
from dse.record.sql._schema import (
    STOP_COLUMNS,
    TALLY_COLUMNS,
    UPSERT_STOP,
    attempt_seconds,
    end_key,
    ended_trials,
    made_dir,
    tally_key,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dse.record._batch import Touched
    from dse.record.sql._rows import Connection

_TRIALS = (f"SELECT {tally_key('t')}, COUNT(*), MIN(t.number), SUM({made_dir('t')}),"
           " MAX(t.wave) FROM trials t WHERE t.id IN ({marks}) GROUP BY 1, 2, 3, 4, 5, 6")
"""The trials' share, by tally key (6 columns): how many, the first number, directories
made, the latest wave."""


_ATTEMPTS = ("SELECT t.campaign_id, SUM(CASE WHEN a.attempt = 1 THEN 1 ELSE 0 END), "
             + ", ".join(f"TOTAL(json_extract(a.spend, '$.{k}'))" for k in SPEND_KEYS)
             + f", TOTAL({attempt_seconds('a')}) FROM attempts a JOIN trials t ON"
             " t.id = a.trial_id WHERE a.id IN ({marks}) GROUP BY 1")
"""The attempts' share, by run: first attempts (dispatched), spend (5 columns), seconds."""


_ATTEMPT_TRIALS = "SELECT DISTINCT trial_id FROM attempts WHERE id IN ({marks})"


_ENDS = ("SELECT t.campaign_id, " + end_key("t", "t.status") + ", COUNT(DISTINCT t.id), "
         + ", ".join(f"TOTAL(json_extract(a.spend, '$.{k}'))" for k in SPEND_KEYS)
         + " FROM trials t LEFT JOIN attempts a ON a.trial_id = t.id WHERE t.id IN ({marks})"
         " AND t.status IN ('stopped', 'completed') AND t.campaign_id IN ({runs})"
         " GROUP BY 1, 2, 3, 4")
"""The ended trials' ``stop_totals`` share, by run and end key (kind, rung, step): how
many, their attempts' spend (5 columns)."""


_TRACKED = ("SELECT DISTINCT campaign_id FROM stop_totals WHERE campaign_id IN ({marks})")


_ENTER_TALLY = (f"INSERT INTO run_tallies({TALLY_COLUMNS}, trials, first)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT"
                f" ({TALLY_COLUMNS}) DO UPDATE SET trials = trials + excluded.trials,"
                " first = MIN(first, excluded.first)")


_LEAVE_TALLY = ("UPDATE run_tallies SET trials = trials + ? WHERE campaign_id = ? AND"
                " version = ? AND status = ? AND failure = ? AND scored = ? AND mismatched = ?")


_TOTALS = ("attempt_s", "trial_dirs", "dispatched", *SPEND_KEYS)


_ADD_TOTALS = (f"INSERT INTO run_totals(campaign_id, wave, {', '.join(_TOTALS)}) VALUES"
               f" (?, ?, {', '.join('?' * len(_TOTALS))}) ON CONFLICT (campaign_id) DO UPDATE"
               " SET wave = MAX(wave, excluded.wave), "
               + ", ".join(f"{k} = {k} + excluded.{k}" for k in _TOTALS))


_ADD_STOPS = (f"INSERT INTO stop_totals({STOP_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
              + UPSERT_STOP)


_DECIDED = ("INSERT INTO stop_totals(campaign_id, kind, rung, step, trials) VALUES"
            " (?, ?, ?, 0, ?) ON CONFLICT (campaign_id, kind, rung, step) DO UPDATE SET"
            " trials = trials + excluded.trials")


_NEWLY_TRACKED = ended_trials("t.campaign_id = ?")


def _padded(ids: list[int]) -> Iterable[tuple[str, list[Any]]]:
    """*ids* in chunks, each as its ``?`` marks and parameters, padded with ``NULL`` (which
    matches no id) to a few lengths: the statements stay few, each prepared once."""
    for chunk in chunks(ids):
        size = next(n for n in (8, 64, 256, 500) if n >= len(chunk))
        yield ",".join("?" * size), [*chunk, *([None] * (size - len(chunk)))]


def _select(db: Connection, sql: str, ids: Iterable[int], **more: str
            ) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    for marks, params in _padded(sorted(set(ids))):
        found.extend(tuple(r) for r in db.execute(sql.format(marks=marks, **more), params))
    return found


def _add(into: dict[Any, list[Any]], key: Any, values: Iterable[Any], sign: int) -> None:
    entry = into.get(key)
    if entry is None:
        into[key] = [sign * v for v in values]
    else:
        for i, v in enumerate(values):
            entry[i] += sign * v


class Tallies:
    """The summaries' share of the rows a batch touches, read before its writes
    (:meth:`before`), then added to the summaries after them (:meth:`after`), in the commit's
    transaction."""

    __slots__ = ("_attempts", "_db", "_ends", "_touched", "_tracked", "_trials")

    def __init__(self, db: Connection, touched: Touched) -> None:
        self._db = db
        self._touched = touched
        self._trials: list[tuple[Any, ...]] = []
        self._attempts: list[tuple[Any, ...]] = []
        self._ends: list[tuple[Any, ...]] = []
        self._tracked: set[int] = set()

    def before(self) -> None:
        """Read the share of the touched rows as they stand (rows made by the batch have
        none yet)."""
        db, touched = self._db, self._touched
        self._trials = _select(db, _TRIALS, touched.trials_changed)
        self._attempts = _select(db, _ATTEMPTS, touched.attempts_changed)
        runs = {r[0] for r in self._trials} | {r[0] for r in self._attempts}
        runs.update(touched.trial_runs)
        runs.update(run for run, _, _ in touched.decided)
        self._tracked = {int(r[0]) for r in _select(db, _TRACKED, runs)}
        if self._tracked:
            self._ends = self._stop_ends()

    def _stop_ends(self) -> list[tuple[Any, ...]]:
        """The ``stop_totals`` share of the trials whose share the batch may change (those it
        writes, those whose attempts it writes, those it records a decision about) in the
        runs that keep it."""
        touched = self._touched
        rows = set(touched.trials_changed) | set(touched.trials_new)
        rows.update(touched.attempt_trials)
        rows.update(r[0] for r in _select(self._db, _ATTEMPT_TRIALS, touched.attempts_changed))
        rows.update(row for _, row, _ in touched.decided)
        runs = ",".join(str(int(run)) for run in sorted(self._tracked))
        return _select(self._db, _ENDS, rows, runs=runs)

    def after(self) -> None:
        """Read the share of the touched rows as the batch left them, and add the
        difference to the summaries."""
        db, touched = self._db, self._touched
        trials = _select(db, _TRIALS, [*touched.trials_changed, *touched.trials_new])
        attempts = _select(db, _ATTEMPTS, [*touched.attempts_changed, *touched.attempts_new])
        self._tally(trials)
        self._total(trials, attempts)
        decided = touched.decided
        if not self._tracked and not decided:
            return
        for run in sorted({run for run, _, _ in decided} - self._tracked):
            db.execute(_NEWLY_TRACKED, (run,))  # a run's first decisions: its ended trials
        if self._tracked:
            sums: dict[tuple[Any, ...], list[float]] = {}
            for sign, rows in ((-1, self._ends), (1, self._stop_ends())):
                for r in rows:
                    _add(sums, r[:4], r[4:], sign)
            db.executemany(_ADD_STOPS, [(*key, int(entry[0]), *entry[1:])
                                        for key, entry in sums.items() if any(entry)])
        counts: dict[tuple[int, str, int], int] = {}
        for run, _, key in decided:
            counts[(run, *key)] = counts.get((run, *key), 0) + 1
        db.executemany(_DECIDED, [(*key, n) for key, n in counts.items()])

    def _tally(self, after: list[tuple[Any, ...]]) -> None:
        """Each tally's count moves by its rows after less before; one the batch's rows are
        in after it keeps the first number of them, if smaller."""
        net: dict[tuple[Any, ...], int] = {}
        first: dict[tuple[Any, ...], int] = {}
        for r in self._trials:  # a key may come back from several chunks of rows
            net[r[:6]] = net.get(r[:6], 0) - int(r[6])
        for r in after:
            net[r[:6]] = net.get(r[:6], 0) + int(r[6])
            first[r[:6]] = min(first.get(r[:6], r[7]), r[7])
        enter = [(*key, net[key], number) for key, number in first.items()]
        leave = [(n, *key) for key, n in net.items() if n and key not in first]
        if enter:
            self._db.executemany(_ENTER_TALLY, enter)
        if leave:
            self._db.executemany(_LEAVE_TALLY, leave)

    def _total(self, trials: list[tuple[Any, ...]], attempts: list[tuple[Any, ...]]) -> None:
        """Each run's totals move by its rows' share after less before."""
        sums: dict[int, list[Any]] = {}
        waves: dict[int, int] = {}
        zero = (0,) * (1 + len(SPEND_KEYS))
        for sign, rows in ((-1, self._trials), (1, trials)):
            for r in rows:
                _add(sums, r[0], (0.0, int(r[8]), *zero), sign)  # attempt_s, trial_dirs, ...
        for r in trials:
            waves[r[0]] = max(waves.get(r[0], 0), r[9])
        for sign, rows in ((-1, self._attempts), (1, attempts)):
            for r in rows:
                _add(sums, r[0], (r[-1], 0, int(r[1]), *r[2:-1]), sign)
        self._db.executemany(_ADD_TOTALS, [
            (run, waves.get(run, 0), e[0], int(e[1]), int(e[2]), *e[3:])
            for run, e in sums.items()])
