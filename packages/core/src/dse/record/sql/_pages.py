"""Reads for a live view of the record (``dse dashboard``): a sorted, filtered page of a run's
trials, and the stamp that says the record changed."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError
from dse.record._records import TrialPage
from dse.record.sql._rows import TRIAL, Queries, as_trial

if TYPE_CHECKING:
    from dse.record._records import Trial, TrialQuery

COLUMNS = ("number", "status", "score", "created_at", "ended_at", "data_version")
"""The trial columns a page sorts by (besides a param's or a metric's number)."""

NEVER_NULL = ("number", "status", "created_at")
"""The columns every trial has."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")

STAMP = ("SELECT (SELECT MAX(id) FROM trials), (SELECT MAX(id) FROM attempts),"
         " (SELECT MAX(id) FROM events), (SELECT COUNT(*) FROM campaigns),"
         " (SELECT COUNT(ended_at) FROM campaigns),"
         " (SELECT TOTAL(trials) FROM run_tallies WHERE status <> 'running'),"
         " (SELECT TOTAL(dispatched) FROM run_totals)")
"""Each part grows with one kind of change: a trial made, an attempt started, an event, a run
started or ended, a trial ended, an attempt dispatched."""


def _number_of(kind: str, name: str) -> str:
    """The SQL of the number NAME of a trial's params or metrics JSON (*kind*)."""
    if not _NAME.match(name):
        raise ConfigError(f"dashboard: {kind} {name!r}: not a name a page sorts or filters by"
                          " (letters, digits and '_')")
    column = "params" if kind == "param" else "metrics"
    return f"json_extract({column}, '$.{name}')"


class Pages(Queries):
    """Implements :class:`dse.record._base.RecordPages`."""

    def trial_page(self, campaign_id: int, query: TrialQuery) -> TrialPage:
        where, params = self._where(campaign_id, query)
        if query.sort in COLUMNS:
            key = query.sort
        elif query.sort.startswith(("param:", "metric:")):
            kind, _, name = query.sort.partition(":")
            key = _number_of(kind, name)
        else:
            raise ConfigError(f"dashboard: cannot sort trials by {query.sort!r}; by one of"
                              f" {', '.join(COLUMNS)}, param:NAME or metric:NAME")
        order = "DESC" if query.descending else "ASC"
        # NULLs last either way: a trial without the value is not the best nor the worst. A
        # number is never NULL: its order alone reads the (campaign_id, number) index, so a
        # page of a run of a million trials is a page's worth of rows read.
        nulls = "" if key in NEVER_NULL else f"CASE WHEN {key} IS NULL THEN 1 ELSE 0 END, "
        sql = (f"SELECT {TRIAL} FROM trials WHERE {where}"
               f" ORDER BY {nulls}{key} {order}, number {order} LIMIT ? OFFSET ?")
        rows = self.rows(sql, (*params, max(int(query.limit), 0), max(int(query.offset), 0)))
        (total,) = self.db.execute(f"SELECT COUNT(*) FROM trials WHERE {where}",
                                   params).fetchone()
        return TrialPage(int(total), [as_trial(r, self.root) for r in rows])

    @staticmethod
    def _where(campaign_id: int, query: TrialQuery) -> tuple[str, list[Any]]:
        parts, params = ["campaign_id = ?"], list[Any]([campaign_id])
        for column, values in (("status", query.statuses), ("failure", query.failures)):
            if values:
                parts.append(f"{column} IN ({','.join('?' * len(values))})")
                params += list(values)
        if query.data_version is not None:
            parts.append("data_version = ?")
            params.append(query.data_version)
        for name, low, high in query.ranges:
            value = _number_of("param", name)
            if low is not None:
                parts.append(f"{value} >= ?")
                params.append(float(low))
            if high is not None:
                parts.append(f"{value} <= ?")
                params.append(float(high))
        return " AND ".join(parts), params

    def sample(self, campaign_id: int, limit: int, *, best: int = 100,
               maximize: bool = False) -> list[Trial]:
        # The run's tallies (kept as it is recorded), not a count of its trial rows.
        total = self.db.execute("SELECT COALESCE(SUM(trials), 0) FROM run_tallies"
                                " WHERE campaign_id = ?", (campaign_id,)).fetchone()[0]
        # Every trial of a run no larger than *limit*; else every k-th besides the best.
        step = 1 if total <= limit else max(-(-int(total) // max(limit - best, 1)), 1)
        order = "DESC" if maximize else "ASC"
        rows = self.rows(f"SELECT {TRIAL} FROM trials WHERE campaign_id = ? AND score IS NOT"
                         f" NULL ORDER BY score {order}, number LIMIT ?", (campaign_id, best))
        rows += self.rows(f"SELECT {TRIAL} FROM trials WHERE campaign_id = ? AND number % ? = 0"
                          " ORDER BY number", (campaign_id, step))
        found = {r[0]: r for r in rows}
        return sorted((as_trial(r, self.root) for r in found.values()), key=lambda t: t.number)

    def stamp(self) -> tuple[Any, ...]:
        return tuple(self.db.execute(STAMP).fetchone())
