"""The record's rows: runs, trials, attempts, spend, events, progress, the agent's log,
scores, environments and invalidations, as :mod:`dse.record._records` values."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError
from dse.model._numbers import record_number
from dse.model._spend import Spend
from dse.record._records import (
    AgentCall,
    AgentSnapshot,
    Attempt,
    AttemptSpend,
    CampaignRun,
    Enqueued,
    EnvironmentRecord,
    Event,
    Invalidation,
    ProgressRow,
    RunCounts,
    Score,
    Trial,
    TrialRef,
)
from dse.record.sql._rows import (
    ATTEMPT_A,
    ATTEMPT_STATE,
    CAMPAIGN,
    ENDED,
    FORMS,
    OPEN,
    SCORE_S,
    SHORT_FORM,
    SPEND_KEYS,
    TRIAL,
    TRIAL_FORM,
    TRIAL_REF,
    TRIAL_REF_FROM,
    TRIAL_STATUS,
    Queries,
    as_attempt,
    as_campaign,
    as_score,
    as_spend,
    as_trial,
    as_trial_ref,
    chunks,
    loads,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dse.model._states import AttemptState, TrialStatus


class Reads(Queries):
    """Implements :class:`dse.record._base.RecordReads` (each method's documentation is there). The
    read side of the :class:`Store`: every read returns the values of
    :mod:`dse.record._records`, never a driver row; the SQL stays here."""

    # -- campaign runs --------------------------------------------------------------------

    def campaigns(self) -> list[CampaignRun]:
        return [as_campaign(r) for r in self.rows(f"SELECT {CAMPAIGN} FROM campaigns ORDER BY id")]

    def campaign(self, campaign_id: int) -> CampaignRun | None:
        rows = self.rows(f"SELECT {CAMPAIGN} FROM campaigns WHERE id = ?", (campaign_id,))
        return as_campaign(rows[0]) if rows else None

    def find_campaign(self, name_or_id: str) -> CampaignRun | None:
        if name_or_id.isascii() and name_or_id.isdigit():
            number = record_number(name_or_id)  # past 64 bits: no run has that id
            return None if number is None else self.campaign(number)
        rows = self.rows(
            f"SELECT {CAMPAIGN} FROM campaigns WHERE name = ? ORDER BY id DESC LIMIT 1",
            (name_or_id,),
        )
        return as_campaign(rows[0]) if rows else None

    # -- trials ---------------------------------------------------------------------------

    def trials(self, campaign_id: int) -> list[Trial]:
        return [as_trial(r, self.root) for r in self.rows(
            f"SELECT {TRIAL} FROM trials WHERE campaign_id = ? ORDER BY number", (campaign_id,)
        )]

    def find_trial(self, text: str) -> tuple[CampaignRun, Trial]:
        short = SHORT_FORM.fullmatch(text)
        full = None if short else TRIAL_FORM.fullmatch(text)
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
            raise ConfigError(f"trial {text!r}: expected {FORMS}")
        # A number past 64 bits (None) is no trial's.
        rows = [] if number is None else self.rows(
            f"SELECT {TRIAL} FROM trials WHERE campaign_id = ? AND number = ?", (run.id, number))
        if not rows:
            raise ConfigError(f"{self.path}: run {run.id} of {run.name} has no trial"
                              f" {text.rpartition(':' if short else '-')[2]}")
        return run, as_trial(rows[0], self.root)

    def resume_rows(self, campaign_id: int, proposals: Iterable[int]) -> list[Trial]:
        rows = {r[0]: r for r in self.rows(
            f"SELECT {TRIAL} FROM trials WHERE campaign_id = ? AND ({OPEN})", (campaign_id,))}
        for r in self.rows_in(f"SELECT {TRIAL} FROM trials WHERE proposal IN ({{marks}})"
                          " AND campaign_id = ?", proposals, campaign_id):
            rows[r[0]] = r
        return [as_trial(r, self.root) for r in sorted(rows.values(), key=lambda r: int(r[2]))]

    def stale_trials(self, campaign_id: int, version: str) -> int:
        ((n,),) = self.rows(
            "SELECT COALESCE(SUM(trials), 0) FROM run_tallies WHERE campaign_id = ?"
            " AND version != '' AND version != ?", (campaign_id, version))
        return int(n)

    def run_counts(self, campaign_id: int, *, lower_is_better: bool) -> RunCounts:
        ((trials, baselines, proposal, number),) = self.rows(
            "SELECT (SELECT COALESCE(SUM(trials), 0) FROM run_tallies WHERE campaign_id = ?1),"
            " (SELECT COUNT(*) FROM trials WHERE campaign_id = ?1 AND proposal = 0),"
            " (SELECT COALESCE(MAX(proposal), 0) FROM trials WHERE campaign_id = ?1),"
            " (SELECT COALESCE(MAX(number), 0) FROM trials WHERE campaign_id = ?1)",
            (campaign_id,))
        totals = self.rows("SELECT wave, trial_dirs FROM run_totals WHERE campaign_id = ?",
                            (campaign_id,))
        wave, dispatched = totals[0] if totals else (0, 0)
        statuses = {TRIAL_STATUS[status]: int(n) for status, n in self.rows(
            "SELECT status, SUM(trials) FROM run_tallies WHERE campaign_id = ? AND status !="
            " 'cached' GROUP BY status HAVING SUM(trials) > 0", (campaign_id,))}
        ((cached,),) = self.rows(
            "SELECT COUNT(*) FROM trials t LEFT JOIN trials o ON o.id = t.cache_of"
            " WHERE t.campaign_id = ? AND t.cache_of IS NOT NULL AND t.status = 'cached'"
            " AND t.ended_at IS NOT NULL AND COALESCE(o.status, '') != 'running'",
            (campaign_id,))
        order = "ASC" if lower_is_better else "DESC"
        best = self.rows(
            "SELECT number, params, score FROM trials WHERE campaign_id = ? AND status ="
            f" 'completed' AND score IS NOT NULL ORDER BY score {order}, number LIMIT 1",
            (campaign_id,))
        return RunCounts(
            int(trials) - int(baselines), int(proposal), int(number), int(wave),
            int(dispatched), statuses, int(cached),
            None if not best else (int(best[0][0]), loads(best[0][1]), float(best[0][2])))

    def trial_counts(self, campaign_id: int) -> dict[TrialStatus, int]:
        return {TRIAL_STATUS[status]: int(n) for status, n in self.rows(
            "SELECT status, SUM(trials) FROM run_tallies WHERE campaign_id = ? GROUP BY status"
            " HAVING SUM(trials) > 0 ORDER BY status", (campaign_id,),
        )}

    def trial_statuses(self, rows: Iterable[int]) -> dict[int, TrialStatus]:
        return {row: TRIAL_STATUS[status] for row, status in self.rows_in(
            "SELECT id, status FROM trials WHERE id IN ({marks})", rows
        )}

    def trial_refs(self, rows: Iterable[int]) -> dict[int, TrialRef]:
        return {r[0]: as_trial_ref(r) for r in self.rows_in(
            f"SELECT {TRIAL_REF} {TRIAL_REF_FROM} WHERE t.id IN ({{marks}})", rows
        )}

    def trial_dependencies(self, rows: Iterable[int]) -> dict[int, str]:
        return {int(r[0]): str(r[1]) for r in self.rows_in(
            "SELECT id, dependencies FROM trials WHERE id IN ({marks})"
            " AND dependencies IS NOT NULL", rows
        )}

    def earlier_measurement(self, name: str, params_json: str, before: int) -> Trial | None:
        rows = self.rows(
            f"SELECT {TRIAL} FROM trials WHERE params = ? AND id < ? AND cache_of IS NULL"
            " AND status IN ('completed', 'failed', 'stopped') AND campaign_id IN"
            " (SELECT id FROM campaigns WHERE name = ?) ORDER BY id DESC LIMIT 1",
            (params_json, before, name))
        return as_trial(rows[0], self.root) if rows else None

    def replacements(self, rows: Iterable[int]) -> dict[int, list[TrialRef]]:
        out: dict[int, list[TrialRef]] = {}
        for r in self.rows_in(f"SELECT {TRIAL_REF}, t.replaces {TRIAL_REF_FROM}"
                          " WHERE t.replaces IN ({marks}) ORDER BY t.id", rows):
            out.setdefault(r[4], []).append(as_trial_ref(r[:4]))
        return out

    def dispatched(self, campaign_id: int) -> int:
        found = self.rows("SELECT dispatched FROM run_totals WHERE campaign_id = ?",
                           (campaign_id,))
        return int(found[0][0]) if found else 0

    # -- attempts -------------------------------------------------------------------------

    def attempts(self, campaign_id: int, *, trials: Iterable[int] | None = None
                 ) -> list[Attempt]:
        if trials is not None:
            # `+`: the run's filter is no index to walk (SQLite would scan the whole run
            # for a few hundred trial rows); each row is found by its id.
            found = self.rows_in(
                f"SELECT {ATTEMPT_A}, t.number FROM attempts a JOIN trials t"
                " ON a.trial_id = t.id WHERE a.trial_id IN ({marks}) AND +t.campaign_id = ?",
                trials, campaign_id,
            )
            found.sort(key=lambda r: (r[-1], r[2]))
            return [as_attempt(r[:-1]) for r in found]
        return [as_attempt(r) for r in self.rows(
            f"SELECT {ATTEMPT_A} FROM attempts a JOIN trials t ON a.trial_id = t.id"
            " WHERE t.campaign_id = ? ORDER BY t.number, a.attempt", (campaign_id,),
        )]

    def attempt_times(self, campaign_id: int) -> list[tuple[float, float, AttemptState, int]]:
        return [(end, start, ATTEMPT_STATE[state], trial) for end, start, state, trial in
                self.rows(
                    "SELECT a.ended_at, a.started_at, a.state, a.trial_id FROM attempts a"
                    " JOIN trials t ON a.trial_id = t.id WHERE t.campaign_id = ?"
                    " AND a.started_at IS NOT NULL AND a.ended_at IS NOT NULL", (campaign_id,),
                )]

    def attempt_durations(self, campaign_id: int, *, last: int) -> tuple[float, list[float]]:
        found = self.rows("SELECT attempt_s FROM run_totals WHERE campaign_id = ?",
                           (campaign_id,))
        # `+`: the run's filter is no index to walk; the ends are walked newest first.
        recent = [max(float(s), 0.0) for (s,) in reversed(self.rows(
            "SELECT a.ended_at - a.started_at FROM attempts a JOIN trials t ON a.trial_id = t.id"
            f" WHERE +t.campaign_id = ? AND {ENDED} ORDER BY a.ended_at DESC, a.id DESC"
            " LIMIT ?", (campaign_id, last)))]
        return float(found[0][0]) if found else 0.0, recent

    def trial_params(self, campaign_id: int) -> dict[int, dict[str, Any]]:
        return {row: loads(params) for row, params in self.rows(
            "SELECT id, params FROM trials WHERE campaign_id = ?", (campaign_id,))}

    def spends(self, campaign_id: int) -> list[AttemptSpend]:
        return [AttemptSpend(trial, as_spend(spend)) for trial, spend in self.rows(
            "SELECT a.trial_id, a.spend FROM attempts a JOIN trials t ON a.trial_id = t.id"
            " WHERE t.campaign_id = ? AND a.spend IS NOT NULL", (campaign_id,),
        )]

    def spend_total(self, campaign_id: int) -> Spend:
        found = self.rows(f"SELECT {', '.join(SPEND_KEYS)} FROM run_totals"
                           " WHERE campaign_id = ?", (campaign_id,))
        return Spend(*(float(v) for v in found[0])) if found else Spend()

    def trial_spends(self, rows: Iterable[int]) -> list[AttemptSpend]:
        found = self.rows_in("SELECT trial_id, attempt, spend FROM attempts"
                         " WHERE trial_id IN ({marks}) AND spend IS NOT NULL", rows)
        return [AttemptSpend(trial, as_spend(spend)) for trial, _, spend in sorted(found)]

    # -- what a run noted -----------------------------------------------------------------

    def events(self, campaign_id: int, kind: str | None = None) -> list[Event]:
        if kind is None:
            rows = self.rows("SELECT id, campaign_id, trial_id, at, kind, data FROM events"
                              " WHERE campaign_id = ? ORDER BY id", (campaign_id,))
        else:
            rows = self.rows("SELECT id, campaign_id, trial_id, at, kind, data FROM events"
                              " WHERE campaign_id = ? AND kind = ? ORDER BY id",
                              (campaign_id, kind))
        return [Event(r[0], r[1], r[2], r[3], r[4], loads(r[5]) if r[5] else None)
                for r in rows]

    def progress(self, trial_row: int) -> list[ProgressRow]:
        return [ProgressRow(a, step, loads(metrics), at) for a, step, metrics, at in self.rows(
            "SELECT attempt, step, metrics, at FROM progress WHERE trial_id = ?"
            " ORDER BY attempt, step", (trial_row,))]

    def progress_tails(self, trial_rows: Iterable[int]) -> dict[int, tuple[int, ProgressRow]]:
        out: dict[int, tuple[int, ProgressRow]] = {}
        for chunk in chunks(list(trial_rows)):
            for row, n, _, attempt, step, metrics, at in self.rows(
                # The last point (highest step of the latest attempt) by its key, then read.
                "SELECT p.trial_id, l.n, l.k, p.attempt, p.step, p.metrics, p.at FROM"
                " (SELECT trial_id, COUNT(*) AS n, MAX((attempt << 40) | step) AS k FROM"
                f" progress WHERE trial_id IN ({','.join('?' * len(chunk))}) GROUP BY trial_id)"
                " AS l JOIN progress p ON p.trial_id = l.trial_id AND p.attempt = l.k >> 40"
                " AND p.step = l.k & 1099511627775", tuple(chunk)):
                out[row] = (n, ProgressRow(attempt, step, loads(metrics), at))
        return out

    def rejections(self, campaign_id: int, *, down_to: float
                   ) -> tuple[int, dict[int, tuple[dict[str, Any], str]]]:
        ((count,),) = self.rows("SELECT COUNT(*) FROM events WHERE campaign_id = ?"
                                 " AND kind = 'rejected'", (campaign_id,))
        found: dict[int, tuple[dict[str, Any], str]] = {}
        expected: int | None = None  # the next proposal of the newest rejections in a row
        cursor = self.db.execute("SELECT data FROM events WHERE campaign_id = ?"
                                  " AND kind = 'rejected' ORDER BY id DESC", (campaign_id,))
        try:
            for (data,) in cursor:
                event = loads(data)
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
        return [
            AgentCall(r[0], r[1], r[2], r[3], loads(r[4]), loads(r[5]) if r[5] else None,
                      {int(k): v for k, v in loads(r[6]).items()} if r[6] else None)
            for r in self.rows("SELECT id, campaign_id, kind, n, proposals, in_flight, stops"
                                " FROM agent_log WHERE campaign_id = ? AND id > ? ORDER BY id",
                                (campaign_id, after))
        ]

    def enqueued(self, campaign: str) -> list[Enqueued]:
        return [Enqueued(int(r[0]), loads(r[1]), str(r[2]), float(r[3]))
                for r in self.rows("SELECT id, params, source, added_at FROM enqueued"
                                   " WHERE campaign = ? AND run IS NULL ORDER BY id",
                                   (campaign,))]

    def agent_snapshot(self, campaign_id: int) -> AgentSnapshot | None:
        rows = self.rows("SELECT log_id, state, unobserved FROM agent_snapshots"
                          " WHERE campaign_id = ?", (campaign_id,))
        if not rows:
            return None
        log_id, state, unobserved = rows[0]
        return AgentSnapshot(int(log_id), str(state), None if unobserved is None
                             else frozenset(int(n) for n in loads(unobserved)))

    # -- conclusions and flags ------------------------------------------------------------

    def scores(self, campaign_id: int) -> list[Score]:
        return [as_score(r) for r in self.rows(
            f"SELECT {SCORE_S} FROM scores s JOIN trials t ON t.id = s.trial_id"
            " WHERE t.campaign_id = ? ORDER BY s.id", (campaign_id,),
        )]

    def environments(self, digests: Iterable[str]) -> dict[str, EnvironmentRecord]:
        wanted = sorted(set(digests))
        out: dict[str, EnvironmentRecord] = {}
        for chunk in (wanted[i : i + 500] for i in range(0, len(wanted), 500)):
            marks = ",".join("?" * len(chunk))
            for digest, python, distributions in self.rows(
                "SELECT digest, python, distributions FROM environments"
                f" WHERE digest IN ({marks})", chunk,
            ):
                out[digest] = EnvironmentRecord(digest, python, loads(distributions))
        return out

    def invalidations(self) -> list[Invalidation]:
        return [Invalidation(*r) for r in self.rows(
            "SELECT id, at, kind, target, reason, trials, scores FROM invalidations ORDER BY id"
        )]

    def invalid_trials(self) -> list[Trial]:
        # Two selects, not an OR: each walks its partial index of the flagged rows, never
        # the workspace's trials.
        return [as_trial(r, self.root) for r in self.rows(
            f"SELECT {TRIAL} FROM trials INDEXED BY trials_invalid WHERE invalidation IS NOT"
            " NULL UNION"
            f" SELECT {TRIAL} FROM trials WHERE id IN"
            " (SELECT trial_id FROM scores WHERE invalidation IS NOT NULL) ORDER BY id"
        )]

    def invalid_reasons(self, campaign_id: int) -> dict[int, str]:
        out: dict[int, str] = {}
        for row, reason in self.rows(
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
        return {int(row) for (row,) in self.rows(
            "SELECT s.trial_id FROM scores s JOIN trials t ON t.id = s.trial_id"
            " WHERE +t.campaign_id = ? AND s.invalidation IS NOT NULL", (campaign_id,),
        )}
