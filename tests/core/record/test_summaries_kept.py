"""The summaries each pass's commit keeps (``run_tallies``, ``run_totals``, ``stop_totals``,
schema 20) are the ones built again from the rows, on SQLite and PostgreSQL: two controllers
writing two runs into one record, with every kind of change a pass makes that the summaries
count (trials made and ended, cache hits, reruns, relinks, data versions read, attempts
started, ended and charged, stopping decisions, promotions), and an invalidation between."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.model._states import AttemptState, FailureClass, TrialStatus
from dse.record._batch import Batch
from dse.record.postgres import PostgresStore
from dse.record.sqlite import Store

if TYPE_CHECKING:
    from pathlib import Path

    from dse.record.sql import SqlStore

_T0 = 1_000_000.0


def _open(record: str | None, tmp_path: Path) -> SqlStore:
    if record is None:
        return Store(tmp_path / ".dse" / "dse.sqlite")
    return PostgresStore(record, tmp_path / ".dse")


def _summaries(store: SqlStore) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for table, key in (("run_tallies", "campaign_id, version, status, failure, scored,"
                                       " mismatched"),
                       ("run_totals", "campaign_id"), ("stop_totals", "campaign_id, kind,"
                                                                       " rung, step")):
        rows = store.connection.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
        counts = {"run_tallies": slice(6, 7), "stop_totals": slice(4, None)}.get(table)
        out[table] = [tuple(round(v, 6) if isinstance(v, float) else v for v in r)
                      for r in rows if counts is None or any(r[counts])]
    # A tally or end left empty stays, as the triggers left it; ``first`` says where a tally
    # began, and a rebuild knows only the rows there now.
    out["run_tallies"] = [r[:7] for r in out["run_tallies"]]
    return out


class _Run:
    """One controller's run, written pass by pass."""

    def __init__(self, store: SqlStore, name: str) -> None:
        self.store, self.batch = store, Batch()
        self.run = store.create_campaign(
            name=name, source=None, spec={"campaign": {"name": name}}, agent="list==1",
            backend="probe==1", mode="rolling", max_parallelism=4, now=_T0)
        self.rows: list[int] = []
        self.attempts: dict[int, int] = {}

    def trial(self, wave: int, *, cache_of: int | None = None,
              status: TrialStatus = TrialStatus.RUNNING) -> int:
        row = self.store.new_trial_id()
        number = len(self.rows) + 1
        self.batch.add_trial(
            row=row, campaign=self.run, number=number, proposal=number, wave=wave,
            config_hash=f"{self.run}-{number}", params_json="{}", status=status,
            created_at=_T0, cache_of=cache_of, data_version="v1",
            trial_dir=None if cache_of is not None else f"t{number}",
            ended_at=_T0 if status is not TrialStatus.RUNNING else None)
        self.rows.append(row)
        if cache_of is None:
            self.attempt(row, 1)
        return row

    def attempt(self, row: int, number: int) -> None:
        attempt = self.store.new_attempt_id()
        self.attempts[row] = attempt
        self.batch.add_attempt(row=attempt, trial=row, attempt=number, backend="probe",
                               state=AttemptState.PENDING, submitted_at=_T0)
        self.batch.update_attempt(row=attempt, state=AttemptState.RUNNING, job_id="j",
                                  started_at=_T0 + 1)

    def end(self, row: int, status: TrialStatus, seconds: float, *,
            failure: FailureClass | None = None, step: int | None = None) -> None:
        self.batch.end_attempt(
            row=self.attempts[row], state=AttemptState.SUCCEEDED if failure is None
            else AttemptState.FAILED, ended_at=_T0 + 1 + seconds,
            spend={"wall_s": seconds, "cpu_s": 2 * seconds, "money": 0.5})
        self.batch.end_trial(row=row, status=status, ended_at=_T0 + 1 + seconds,
                             failure=failure, score=None if failure else seconds, step=step)

    def decide(self, row: int, verdict: str, rung: int, step: int) -> None:
        self.batch.add_decision(
            campaign=self.run, row=row, attempt=1, rule="asha", version="1",
            verdict=verdict, rung=rung, step=step, value=1.0, cutoff=0.5, peers=3,
            compared="[]", reason="r", bracket=None, at=_T0)

    def commit(self) -> None:
        self.store.commit(self.batch)


def _passes(one: _Run, two: _Run) -> None:
    a = [one.trial(1) for _ in range(4)]
    b = [two.trial(1) for _ in range(3)]
    one.commit()
    two.commit()
    one.end(a[0], TrialStatus.COMPLETED, 2.0)
    one.end(a[1], TrialStatus.FAILED, 1.0, failure=FailureClass.NONZERO_EXIT)
    one.batch.set_trial_data(row=a[2], read="v2")  # read other data than expected
    hit = one.trial(2, cache_of=a[0], status=TrialStatus.CACHED)
    waiting = one.trial(2, cache_of=a[3])
    two.end(b[0], TrialStatus.COMPLETED, 3.0)
    two.decide(b[1], "stop", 0, 4)  # the run's first decision: its ended trials counted
    two.end(b[1], TrialStatus.STOPPED, 1.5, step=4)
    two.commit()
    one.commit()
    # The waiting hit runs itself; another is relinked; a trial made and ended in one pass.
    one.batch.run_cache_hit(row=waiting, status=TrialStatus.RUNNING, trial_dir="t6")
    one.attempt(waiting, 1)
    one.batch.relink_trial(row=hit, cache_of=a[3])
    one.end(a[2], TrialStatus.COMPLETED, 4.0)
    one.end(a[3], TrialStatus.COMPLETED, 0.5)
    quick = one.trial(3)
    one.end(quick, TrialStatus.FAILED, 0.25, failure=FailureClass.TIME_LIMIT)
    # The stopped trial promoted: a new attempt, running again, then stopped further on.
    two.decide(b[1], "promote", 0, 4)
    two.attempt(b[1], 2)
    two.batch.end_trial(row=b[1], status=TrialStatus.RUNNING, ended_at=None)
    two.decide(b[2], "continue", 0, 4)
    one.commit()
    two.commit()
    two.decide(b[1], "stop", 1, 8)
    two.end(b[1], TrialStatus.STOPPED, 2.5, step=8)
    two.batch.set_attempt_spend(row=two.attempts[b[0]], spend={"wall_s": 3.5, "money": 1.0})
    two.end(b[2], TrialStatus.COMPLETED, 1.0)
    one.end(waiting, TrialStatus.COMPLETED, 1.0)
    two.commit()
    one.commit()


def test_the_summaries_a_pass_keeps_are_the_rebuilt_ones(record: str | None,
                                                         tmp_path: Path) -> None:
    first, second = _open(record, tmp_path), _open(record, tmp_path)
    try:
        one, two = _Run(first, "one"), _Run(second, "two")
        _passes(one, two)
        first.invalidate("trial", "one:1", "bad input", _T0, trial_row=one.rows[0])
        kept = _summaries(first)
        assert kept["stop_totals"], "the second run has decisions"
        assert {r[0] for r in kept["run_totals"]} == {one.run, two.run}
        first.rebuild_summaries()
        assert _summaries(first) == kept
    finally:
        first.close()
        second.close()


def test_a_pass_of_more_trials_than_one_read_takes_keeps_them_too(record: str | None,
                                                                  tmp_path: Path) -> None:
    """The rows a pass touches are read in pieces (the databases' limit on parameters): a
    tally met in several pieces is counted once, whole."""
    store = _open(record, tmp_path)
    try:
        run = _Run(store, "many")
        rows = [run.trial(1) for _ in range(1100)]
        run.commit()
        for n, row in enumerate(rows):
            if n % 3:
                run.end(row, TrialStatus.COMPLETED, 1.0)
            else:
                run.end(row, TrialStatus.FAILED, 0.5, failure=FailureClass.NONZERO_EXIT)
        run.commit()
        kept = _summaries(store)
        assert [r[2:] for r in kept["run_tallies"]] == [("completed", "", 1, 0, 733),
                                                        ("failed", "nonzero_exit", 0, 0, 367)]
        store.rebuild_summaries()
        assert _summaries(store) == kept
    finally:
        store.close()
