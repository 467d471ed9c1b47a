"""What a stopping rule decided and what it read: decisions, learning curves, what stopping
spent and saved."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.model._spend import Spend
from dse.record._records import DecisionRow, LineageRow, ProgressRow, StopTally, Trial
from dse.record.sql._rows import SPEND_KEYS, TRIAL, Queries, as_trial, loads
from dse.record.sql._writes import DECISION

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence


def as_decision(r: tuple[Any, ...]) -> DecisionRow:
    return DecisionRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
                       [(int(n), None if v is None else float(v)) for n, v in loads(r[11])],
                       r[12], r[13], r[14])  # a null value: not a finite number (the worst)


class Stops(Queries):
    """Implements :class:`dse.record._base.RecordStops` (each method's documentation is there).
    Reads of early stopping: the stopping rule's decisions, the learning curves a resumed
    run's rule is rebuilt from, the trials stopped at a rung."""

    def decisions(self, trial_row: int) -> list[DecisionRow]:
        return [as_decision(r) for r in self.rows(
            f"SELECT {DECISION} FROM decisions d JOIN trials t ON t.id = d.trial_id"
            " WHERE d.trial_id = ? ORDER BY d.id", (trial_row,))]

    def run_decisions(self, campaign_id: int, verdicts: Sequence[str] = ("stop", "promote")
                      ) -> list[DecisionRow]:
        marks = ",".join("?" * len(verdicts))
        return [as_decision(r) for r in self.rows(
            f"SELECT {DECISION} FROM decisions d JOIN trials t ON t.id = d.trial_id"
            f" WHERE d.campaign_id = ? AND d.verdict IN ({marks}) ORDER BY d.id",
            (campaign_id, *verdicts))]

    def decision_counts(self, campaign_id: int) -> dict[tuple[str, int], int]:
        return {(v, rung): n for v, rung, n in self.rows(
            "SELECT kind, rung, trials FROM stop_totals WHERE campaign_id = ? AND kind"
            " IN ('stop', 'promote', 'exploit') AND trials > 0", (campaign_id,))}

    def run_progress(self, campaign_id: int) -> Iterator[tuple[int, int, int, str]]:
        yield from self.db.execute(
            "SELECT t.number, t.proposal, p.step, p.metrics FROM trials t JOIN progress p"
            " ON p.trial_id = t.id WHERE t.campaign_id = ? ORDER BY p.at, t.number, p.step",
            (campaign_id,))

    def trial_by_row(self, row: int) -> Trial | None:
        found = self.rows(f"SELECT {TRIAL} FROM trials WHERE id = ?", (row,))
        return as_trial(found[0], self.root) if found else None

    def stopped_trials(self, campaign_id: int) -> list[Trial]:
        return [as_trial(r, self.root) for r in self.rows(
            f"SELECT {TRIAL} FROM trials WHERE campaign_id = ? AND status = 'stopped' AND"
            " cache_of IS NULL ORDER BY number", (campaign_id,))]

    def trial_decisions(self, trial_rows: Iterable[int]) -> list[DecisionRow]:
        return [as_decision(r[1:]) for r in sorted(self.rows_in(
            f"SELECT d.id, {DECISION} FROM decisions d JOIN trials t ON t.id = d.trial_id"
            " WHERE d.trial_id IN ({marks})", trial_rows))]

    def first_steps(self, trial_rows: Iterable[int]) -> dict[tuple[int, int], int]:
        return {(row, attempt): step for row, attempt, step in self.rows_in(
            "SELECT trial_id, attempt, MIN(step) FROM progress WHERE trial_id IN ({marks})"
            " GROUP BY trial_id, attempt", trial_rows)}

    def trial_progress(self, trial_rows: Iterable[int]) -> dict[int, list[ProgressRow]]:
        out: dict[int, list[ProgressRow]] = {}
        for row, attempt, step, metrics, at in sorted(self.rows_in(
                "SELECT trial_id, attempt, step, metrics, at FROM progress"
                " WHERE trial_id IN ({marks})", trial_rows)):
            out.setdefault(row, []).append(ProgressRow(attempt, step, loads(metrics), at))
        return out

    def stop_tallies(self, campaign_id: int) -> list[StopTally]:
        return [StopTally(rung, step, trials, Spend(*spend)) for rung, step, trials, *spend
                in self.rows(
            f"SELECT rung, step, trials, {', '.join(SPEND_KEYS)} FROM stop_totals"
            " WHERE campaign_id = ? AND kind = 'ended_stopped' AND trials > 0"
            " ORDER BY rung, step", (campaign_id,))]

    def completed_spend(self, campaign_id: int) -> tuple[int, Spend]:
        found = self.rows(
            f"SELECT trials, {', '.join(SPEND_KEYS)} FROM stop_totals WHERE campaign_id = ?"
            " AND kind = 'ended_completed'", (campaign_id,))
        if not found and not self.rows(
                "SELECT 1 FROM stop_totals WHERE campaign_id = ? LIMIT 1", (campaign_id,)):
            found = self.rows(
                "SELECT COUNT(DISTINCT t.id), "
                + ", ".join(f"TOTAL(json_extract(a.spend, '$.{k}'))" for k in SPEND_KEYS)
                + " FROM trials t LEFT JOIN attempts a ON a.trial_id = t.id"
                " WHERE t.campaign_id = ? AND t.status = 'completed'", (campaign_id,))
        if not found:
            return 0, Spend()
        trials, *spend = found[0]
        return int(trials), Spend(*spend)

    def lineage(self, campaign_id: int) -> list[LineageRow]:
        return [LineageRow(*r) for r in self.rows(
            "SELECT l.trial_id, t.number, l.parent_id, p.number, l.parent_step, l.member_id,"
            " m.number, l.created_at FROM lineage l JOIN trials t ON t.id = l.trial_id"
            " JOIN trials p ON p.id = l.parent_id LEFT JOIN trials m ON m.id = l.member_id"
            " WHERE l.campaign_id = ? ORDER BY t.number", (campaign_id,))]

    def stopping_rule(self, campaign_id: int) -> tuple[str, str] | None:
        for verdict in ("stop", "promote", "exploit", "continue"):
            found = self.rows("SELECT rule, rule_version FROM decisions WHERE campaign_id = ?"
                               " AND verdict = ? ORDER BY id DESC LIMIT 1",
                               (campaign_id, verdict))
            if found:
                return str(found[0][0]), str(found[0][1])
        return None


