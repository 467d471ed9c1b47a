"""Reads whose cost does not grow with what they print: aggregates of one run, the best
trial of a data version, a run's trials a page at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.model._spend import Earlier, Spend
from dse.model._states import TrialStatus
from dse.record._records import VersionTally
from dse.record.sql._rows import (
    OPEN,
    SCORE,
    SPEND_KEYS,
    TRIAL,
    TRIAL_STATUS,
    Queries,
    as_score,
    as_trial,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from dse.record._records import Score, Trial


_VERSION = "COALESCE(NULLIF(data_version_read, ''), data_version)"


# `+t.campaign_id` below: the flagged scores are few (their partial index); the run's filter
# must not become the index SQLite walks instead (every trial of the run).
_VALID = ("invalidation IS NULL AND id NOT IN"
          " (SELECT trial_id FROM scores WHERE invalidation IS NOT NULL)")


_MISMATCH = ("data_version_read IS NOT NULL AND data_version_read <> '' AND data_version IS NOT"
             " NULL AND data_version <> '' AND data_version_read <> data_version")


class Summaries(Queries):
    """Implements :class:`dse.record._base.RecordSummaries` (each method's documentation is there).
    Reads whose cost does not grow with what they print: aggregates of one run, one trial,
    or the trials of a run a page at a time (``dse status``, ``report``, ``show``,
    ``export`` of a million-trial record)."""

    __slots__ = ()

    def run_time(self, campaign_id: int) -> float:
        rows = self.rows("SELECT run_s FROM campaigns WHERE id = ?", (campaign_id,))
        return max(float(rows[0][0] or 0.0), 0.0) if rows else 0.0

    def earlier_runs(self, name: str, before: int) -> Earlier:
        runs = self.rows("SELECT c.id, c.run_s, COALESCE(t.dispatched, 0), "
                          + ", ".join(f"COALESCE(t.{k}, 0)" for k in SPEND_KEYS)
                          + " FROM campaigns c LEFT JOIN run_totals t ON t.campaign_id = c.id"
                          " WHERE c.name = ? AND c.id < ? ORDER BY c.id", (name, before))
        spent = Spend()
        for row in runs:
            spent = spent + Spend(*(float(v) for v in row[3:]))
        return Earlier(runs=tuple(int(r[0]) for r in runs),
                       trials=sum(int(r[2]) for r in runs), spent=spent,
                       run_s=sum(max(float(r[1] or 0.0), 0.0) for r in runs))

    def failure_counts(self, campaign_id: int) -> dict[str, int]:
        return {str(failure): int(n) for failure, n in self.rows(
            "SELECT failure, SUM(trials) FROM run_tallies WHERE campaign_id = ? AND failure <> ''"
            " AND status <> ? GROUP BY failure HAVING SUM(trials) > 0 ORDER BY MIN(first)",
            (campaign_id, TrialStatus.CACHED.value),
        )}

    def first_failures(self, campaign_id: int) -> dict[str, tuple[int, str | None]]:
        return {str(failure): (int(number), message) for failure, number, message in self.rows(
            "SELECT f.failure, t.number, t.message FROM (SELECT failure, MIN(first) AS number"
            " FROM run_tallies WHERE campaign_id = ? AND status = ? AND failure <> ''"
            " AND trials > 0 GROUP BY failure) f JOIN trials t ON t.campaign_id = ?"
            " AND t.number = f.number AND t.failure = f.failure ORDER BY t.number",
            (campaign_id, TrialStatus.FAILED.value, campaign_id),
        )}

    def outcome_counts(self, campaign_id: int) -> dict[str, int]:
        return {str(status): int(n) for status, n in self.rows(
            "SELECT status, SUM(trials) FROM run_tallies WHERE campaign_id = ? GROUP BY status"
            " HAVING SUM(trials) > 0 ORDER BY MIN(first)", (campaign_id,),
        )}

    def unstarted(self, campaign_id: int) -> dict[TrialStatus, int]:
        return {TRIAL_STATUS[status]: int(n) for status, n in self.rows(
            f"SELECT t.status, COUNT(*) FROM trials t WHERE t.campaign_id = ? AND ({OPEN})"
            " AND t.status IN ('running', 'cancelled') AND NOT EXISTS (SELECT 1 FROM"
            " attempts a WHERE a.trial_id = t.id AND a.started_at IS NOT NULL AND"
            " (t.status = 'cancelled' OR a.ended_at IS NULL)) GROUP BY t.status",
            (campaign_id,))}

    def cache_links(self, campaign_id: int) -> list[tuple[int, int]]:
        return [(int(n), int(row)) for n, row in self.rows(
            "SELECT number, cache_of FROM trials WHERE campaign_id = ? AND cache_of IS NOT NULL"
            " ORDER BY number", (campaign_id,),
        )]

    def mismatched_numbers(self, campaign_id: int) -> list[int]:
        ((some,),) = self.rows("SELECT COUNT(*) FROM run_tallies WHERE campaign_id = ? AND"
                                " mismatched <> 0 AND trials > 0", (campaign_id,))
        if not some:
            return []
        return [int(n) for (n,) in self.rows(
            f"SELECT number FROM trials WHERE campaign_id = ? AND {_MISMATCH} ORDER BY number",
            (campaign_id,),
        )]

    def version_tallies(self, campaign_id: int) -> list[VersionTally]:
        flagged = dict(self.rows(
            f"SELECT IFNULL({_VERSION}, ''), COUNT(*) FROM trials WHERE id IN"
            " (SELECT id FROM trials WHERE campaign_id = ? AND invalidation IS NOT NULL UNION"
            " SELECT s.trial_id FROM scores s JOIN trials t ON t.id = s.trial_id"
            " WHERE s.invalidation IS NOT NULL AND +t.campaign_id = ?)"
            f" AND status = ? AND score IS NOT NULL GROUP BY 1",
            (campaign_id, campaign_id, TrialStatus.COMPLETED.value),
        ))
        return [
            VersionTally(v or None, int(n), int(done) - int(flagged.get(v, 0)), int(odd))
            for v, n, done, odd in self.rows(
                "SELECT version, SUM(trials), TOTAL(CASE WHEN status = ? AND scored <> 0"
                " THEN trials ELSE 0 END),"
                " TOTAL(trials * mismatched) FROM run_tallies WHERE campaign_id = ?"
                " GROUP BY version HAVING SUM(trials) > 0 ORDER BY MIN(first)",
                (TrialStatus.COMPLETED.value, campaign_id),
            )
        ]

    def best_of_version(self, campaign_id: int, version: str | None, *,
                        maximize: bool) -> Trial | None:
        order = "DESC" if maximize else "ASC"
        rows = self.rows(
            f"SELECT {TRIAL} FROM trials WHERE campaign_id = ? AND score IS NOT NULL AND"
            f" IFNULL({_VERSION}, '') = IFNULL(?, '') AND status IN (?, ?) AND {_VALID}"
            f" ORDER BY score {order}, number LIMIT 1",
            (campaign_id, version, TrialStatus.COMPLETED.value, TrialStatus.CACHED.value),
        )
        return as_trial(rows[0], self.root) if rows else None

    def pareto_trials(self, campaign_id: int) -> list[Trial]:
        return [as_trial(r, self.root) for r in self.rows(
            f"SELECT {TRIAL} FROM trials WHERE campaign_id = ? AND scores IS NOT NULL AND"
            f" status IN (?, ?) AND {_VALID} ORDER BY ended_at, number",
            (campaign_id, TrialStatus.COMPLETED.value, TrialStatus.CACHED.value),
        )]

    def trial_pages(self, campaign_id: int, size: int = 1000) -> Iterator[list[Trial]]:
        after = -1
        while True:
            page = [as_trial(r, self.root) for r in self.rows(
                f"SELECT {TRIAL} FROM trials WHERE campaign_id = ? AND number > ?"
                " ORDER BY number LIMIT ?", (campaign_id, after, size),
            )]
            if not page:
                return
            yield page
            after = page[-1].number

    def trial_scores(self, rows: Iterable[int]) -> list[Score]:
        found = self.rows_in(f"SELECT {SCORE} FROM scores WHERE trial_id IN ({{marks}})", rows)
        return [as_score(r) for r in sorted(found)]
