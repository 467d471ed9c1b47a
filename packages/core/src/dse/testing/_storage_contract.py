"""``StorageContract``: the suite every storage of the record passes (``dse.record.Storage``).

Subclass it in your test module and override the fixtures ``storage_factory`` and
``older_record``::

    from dse.testing import StorageContract

    class TestMyStorage(StorageContract):
        @pytest.fixture
        def storage_factory(self, tmp_path):
            return lambda: MyStorage(tmp_path / "record")

        @pytest.fixture
        def older_record(self, tmp_path):
            return lambda: write_a_version_1_record(tmp_path / "record")

``storage_factory`` returns a callable that opens the record: each call is another writer
of the same record (another controller), so ids, claims and transactions are checked between
two of them. Override ``older_record`` too: it makes, where ``storage_factory`` opens, a
record an earlier version wrote (an older schema), for the migration test. Override
:meth:`StorageContract.alive` when your storage tells a live controller otherwise than by the
campaign locks of its workspace.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import pytest

from dse.model._errors import LeaseLostError, LockedError
from dse.model._states import AttemptState, FailureClass, TrialStatus
from dse.record._batch import Batch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dse.record._base import Storage

_T0 = 1_000_000.0


def _run(storage: Storage, name: str = "demo") -> int:
    return storage.create_campaign(
        name=name, source=None, spec={"campaign": {"name": name}}, agent="list==1",
        backend="probe==1", mode="rolling", max_parallelism=2, now=_T0,
    )


def _trial(batch: Batch, storage: Storage, run: int, number: int, digest: str) -> int:
    row = storage.new_trial_id()
    batch.add_trial(row=row, campaign=run, number=number, proposal=number, wave=1,
                    config_hash=digest, params_json=f'{{"x": {number}}}',
                    status=TrialStatus.RUNNING, created_at=_T0 + number)
    return row


class StorageContract:
    """Transactions, ids, claims between writers, summaries and reopening, on any storage."""

    @pytest.fixture
    def storage_factory(self) -> Callable[[], Storage]:
        """Override: a callable opening one record, another writer at each call."""
        raise NotImplementedError("override the storage_factory fixture")

    @pytest.fixture
    def older_record(self) -> Callable[[], tuple[int, list[int]]]:
        """Override: a callable that writes, where ``storage_factory`` opens, a record of an
        older schema holding one run of trials; it returns the run's id and the trials' ids."""
        raise NotImplementedError("override the older_record fixture")

    @pytest.fixture
    def storage(self, storage_factory: Callable[[], Storage]) -> Iterator[Storage]:
        """One writer of the record, closed after the test."""
        storage = storage_factory()
        yield storage
        storage.close()

    @contextlib.contextmanager
    def alive(self, storage: Storage, campaign: str) -> Iterator[None]:
        """Make the controller of *campaign* live while the block runs (by default: hold its
        campaign lock in the storage's workspace, as ``dse run`` does)."""
        from dse.record._lock import CampaignLock

        with CampaignLock(storage.workspace, campaign):
            yield

    def test_a_new_record_has_no_runs(self, storage: Storage) -> None:
        """A record just opened holds no run."""
        assert storage.reads.campaigns() == []
        assert storage.reads.find_campaign("demo") is None

    def test_a_run_is_recorded_and_found(self, storage: Storage) -> None:
        """A run is recorded in a transaction of its own and read back by id and by name
        (the latest run of a name)."""
        first, second = _run(storage), _run(storage)
        assert second > first
        found = storage.reads.campaign(first)
        assert found is not None
        assert (found.name, found.mode, found.max_parallelism) == ("demo", "rolling", 2)
        latest = storage.reads.find_campaign("demo")
        assert latest is not None
        assert latest.id == second
        assert [c.id for c in storage.reads.campaigns()] == [first, second]

    def test_a_pass_is_committed_whole_and_the_batch_emptied(self, storage: Storage) -> None:
        """A pass's changes are read only once committed, all of them, and the batch is
        emptied."""
        run, batch = _run(storage), Batch()
        rows = [_trial(batch, storage, run, n, f"h{n}") for n in (1, 2)]
        attempt = storage.new_attempt_id()
        batch.add_attempt(row=attempt, trial=rows[0], attempt=1, backend="probe",
                          state=AttemptState.SUBMITTED, submitted_at=_T0)
        batch.add_event(campaign=run, trial=rows[0], at=_T0, kind="note", data={"a": 1})
        assert storage.reads.trials(run) == []  # nothing before the commit
        storage.commit(batch)
        assert not batch
        assert [t.id for t in storage.reads.trials(run)] == rows
        assert [a.id for a in storage.reads.attempts(run)] == [attempt]
        assert [e.kind for e in storage.reads.events(run, "note")] == ["note"]

    def test_a_lineage_is_recorded_with_its_trial_and_read_back(self, storage: Storage) -> None:
        """Population-based training: a trial made from a copy of another's checkpoint is
        recorded, in the pass that makes it, with its parent, the parent's step and the member
        it replaced; a run's lineage reads back by trial number."""
        run, batch = _run(storage), Batch()
        parent, member = _trial(batch, storage, run, 1, "h1"), _trial(batch, storage, run, 2,
                                                                       "h2")
        storage.commit(batch)
        child = _trial(batch, storage, run, 3, "h3")
        batch.add_lineage(row=child, campaign=run, parent=parent, step=4, member=member,
                          at=_T0 + 3)
        assert storage.stops.lineage(run) == []  # nothing before the commit
        storage.commit(batch)
        (row,) = storage.stops.lineage(run)
        assert (row.trial_row, row.number, row.parent_row, row.parent, row.parent_step,
                row.member_row, row.member, row.at) == (child, 3, parent, 1, 4, member, 2,
                                                        _T0 + 3)
        assert storage.stops.lineage(_run(storage)) == []

    def test_enqueued_configurations_wait_in_order_until_a_run_takes_them(
        self, storage: Storage
    ) -> None:
        """Configurations enqueued for a campaign wait oldest first, apart from another
        campaign's, until a run's committed pass takes each (``dse enqueue``)."""
        ids = storage.enqueue("demo", [{"x": 1}, {"x": 2}], "python", _T0)
        storage.enqueue("other", [{"x": 9}], "dse enqueue", _T0 + 1)
        waiting = storage.reads.enqueued("demo")
        assert [(w.id, w.params, w.source) for w in waiting] == [
            (ids[0], {"x": 1}, "python"), (ids[1], {"x": 2}, "python")]
        run, batch = _run(storage), Batch()
        batch.take_enqueued(row=ids[0], run=run, proposal=1)
        assert len(storage.reads.enqueued("demo")) == 2  # nothing before the commit
        storage.commit(batch)
        assert [w.params for w in storage.reads.enqueued("demo")] == [{"x": 2}]
        assert [w.params for w in storage.reads.enqueued("other")] == [{"x": 9}]

    def test_a_commit_that_fails_writes_nothing(self, storage: Storage) -> None:
        """A commit that fails halfway (a row id used twice) leaves nothing of its pass in
        the record, and the record takes the next commit."""
        run, batch = _run(storage), Batch()
        row = _trial(batch, storage, run, 1, "h1")
        batch.add_event(campaign=run, trial=row, at=_T0, kind="note", data={})
        batch.add_trial(row=row, campaign=run, number=2, proposal=2, wave=1, config_hash="h2",
                        params_json="{}", status=TrialStatus.RUNNING, created_at=_T0)
        with pytest.raises(Exception):  # noqa: B017, PT011 - the storage's own error
            storage.commit(batch)
        assert storage.reads.trials(run) == []
        assert storage.reads.events(run) == []
        good = Batch()
        _trial(good, storage, run, 1, "h1")
        storage.commit(good)
        assert len(storage.reads.trials(run)) == 1

    def test_two_writers_never_hand_out_one_id(
        self, storage_factory: Callable[[], Storage]
    ) -> None:
        """Two writers of one record, asking in turn, never hand out the same trial or attempt
        id."""
        one, two = storage_factory(), storage_factory()
        try:
            trials = [w.new_trial_id() for _ in range(150) for w in (one, two)]
            attempts = [w.new_attempt_id() for _ in range(150) for w in (two, one)]
        finally:
            one.close()
            two.close()
        assert len(set(trials)) == len(trials)
        assert len(set(attempts)) == len(attempts)

    def test_a_config_runs_under_one_writer_and_its_result_is_reused(
        self, storage_factory: Callable[[], Storage]
    ) -> None:
        """A config claimed by a live controller's trial is not the other's to run: it waits
        on that trial, then reuses its result once recorded; another config is its own."""
        one, two = storage_factory(), storage_factory()
        try:
            run_a = _run(one, "a")
            _run(two, "b")
            batch = Batch()
            row_a = _trial(batch, one, run_a, 1, "same")
            with self.alive(one, "a"):
                claimed = one.claim({"same": row_a}, "a", _T0)
                one.commit(batch)
                row_b = two.new_trial_id()
                waits = two.claim({"same": row_b}, "b", _T0)
            assert claimed["same"].mine
            assert claimed["same"].row == row_a
            assert not waits["same"].mine
            assert waits["same"].row == row_a  # b waits on a's trial
            batch.end_trial(row=row_a, status=TrialStatus.COMPLETED, ended_at=_T0 + 5,
                            metrics={"loss": 1.0}, score=1.0)
            one.commit(batch)
            reused = two.claim({"same": row_b}, "b", _T0 + 6)
            assert not reused["same"].mine
            assert reused["same"].result is not None
            assert reused["same"].result.id == row_a
            free = two.claim({"other": row_b}, "b", _T0 + 6)
            assert free["other"].mine
        finally:
            one.close()
            two.close()

    def test_a_lease_is_held_against_another_writer(
        self, storage_factory: Callable[[], Storage]
    ) -> None:
        """A campaign's lease, renewed, is refused to another controller (the message names
        its holder); released, it is the other's."""
        one, two = storage_factory(), storage_factory()
        try:
            one.take_lease("a", {"host": "one", "pid": 11}, 60.0)
            with pytest.raises(LockedError, match="pid 11 on host one"):
                two.take_lease("a", {"host": "two", "pid": 22}, 60.0)
            two.take_lease("b", {"host": "two", "pid": 22}, 60.0)  # another campaign's
            one.release_lease("a")
            two.take_lease("a", {"host": "two", "pid": 22}, 60.0)
        finally:
            one.close()
            two.close()

    def test_an_expired_lease_is_taken_over_and_its_holder_fenced(
        self, storage_factory: Callable[[], Storage]
    ) -> None:
        """A lease not renewed within its TTL is taken over by another controller, and its
        first holder's next commit fails whole (it writes nothing more); a claim of the
        first holder's campaign is taken over too."""
        one, two = storage_factory(), storage_factory()
        try:
            run = _run(one, "a")
            one.take_lease("a", {"host": "one", "pid": 11}, 0.5)
            batch = Batch()
            row = _trial(batch, one, run, 1, "same")
            one.claim({"same": row}, "a", _T0)
            one.commit(batch)
            other, deadline = two.new_trial_id(), time.monotonic() + 30
            # The claim waits on a's trial until the TTL passes on the record's clock.
            while not two.claim({"same": other}, "b", _T0)["same"].mine:
                assert time.monotonic() < deadline, "an expired lease's claim was never freed"
                time.sleep(0.1)
            two.take_lease("a", {"host": "two", "pid": 22}, 60.0)
            late = Batch()
            _trial(late, one, run, 2, "late")
            with pytest.raises(LeaseLostError):
                one.commit(late)
            assert [t.number for t in two.reads.trials(run)] == [1]
        finally:
            one.close()
            two.close()

    def test_summaries_follow_the_rows(self, storage: Storage) -> None:
        """The counts and summaries say what the trial rows say once their ends are committed."""
        run, batch = _run(storage), Batch()
        ends = [(TrialStatus.COMPLETED, None), (TrialStatus.FAILED, FailureClass.NONZERO_EXIT),
                (TrialStatus.COMPLETED, None), (TrialStatus.FAILED, FailureClass.TIME_LIMIT)]
        rows = [_trial(batch, storage, run, n, f"h{n}") for n in range(1, len(ends) + 1)]
        storage.commit(batch)
        for row, (status, failure) in zip(rows, ends, strict=True):
            batch.end_trial(row=row, status=status, failure=failure, ended_at=_T0 + 9,
                            metrics={"loss": 1.0} if failure is None else None,
                            score=1.0 if failure is None else None)
        storage.commit(batch)
        counts = storage.reads.trial_counts(run)
        assert counts[TrialStatus.COMPLETED] == 2
        assert counts[TrialStatus.FAILED] == 2
        assert storage.summaries.failure_counts(run) == {"nonzero_exit": 1, "time_limit": 1}

    def test_a_page_of_trials_and_the_stamp_follow_the_rows(self, storage: Storage) -> None:
        """A page of a run's trials is sorted, filtered and cut as asked (``dse dashboard``'s
        table), a sample holds the best and spreads the rest; the stamp moves with a commit
        and stays put without one."""
        from dse.record._records import TrialQuery

        run, batch = _run(storage), Batch()
        before = storage.pages.stamp()
        rows = [_trial(batch, storage, run, n, f"h{n}") for n in range(1, 6)]
        storage.commit(batch)
        moved = storage.pages.stamp()
        assert moved != before
        assert storage.pages.stamp() == moved
        for row, n in zip(rows, range(1, 6), strict=True):
            failed = n == 4
            batch.end_trial(row=row, status=TrialStatus.FAILED if failed else
                            TrialStatus.COMPLETED,
                            failure=FailureClass.NONZERO_EXIT if failed else None,
                            ended_at=_T0 + 9, metrics=None if failed else {"loss": -n},
                            score=None if failed else float((n - 3) ** 2))
        storage.commit(batch)
        assert storage.pages.stamp() != moved

        def numbers(**query: Any) -> tuple[int, list[int]]:
            page = storage.pages.trial_page(run, TrialQuery(**query))
            return page.total, [t.number for t in page.trials]

        assert numbers(limit=2, offset=1) == (5, [2, 3])
        assert numbers(sort="score", limit=5) == (5, [3, 2, 1, 5, 4])  # no score: last
        assert numbers(sort="param:x", descending=True, limit=2) == (5, [5, 4])
        assert numbers(sort="metric:loss", limit=1) == (5, [5])
        assert numbers(statuses=("failed",)) == (1, [4])
        assert numbers(failures=("nonzero_exit",)) == (1, [4])
        assert numbers(ranges=(("x", 2.0, 3.0),)) == (2, [2, 3])
        # A sample: the best by score (trial 3), then every 2nd trial by number.
        assert [t.number for t in storage.pages.sample(run, 4, best=1)] == [2, 3, 4]
        assert len(storage.pages.sample(run, 10)) == 5

    def test_a_reopened_record_reads_the_same(
        self, storage_factory: Callable[[], Storage]
    ) -> None:
        """A record closed and opened again reads the same runs and trials, and hands out no
        id it gave before."""
        first = storage_factory()
        run, batch = _run(first), Batch()
        rows = [_trial(batch, first, run, n, f"h{n}") for n in (1, 2, 3)]
        first.commit(batch)
        before = (first.reads.campaigns(), first.reads.trials(run))
        first.close()
        again = storage_factory()
        try:
            assert (again.reads.campaigns(), again.reads.trials(run)) == before
            assert [t.id for t in before[1]] == rows
            assert again.new_trial_id() not in rows
        finally:
            again.close()

    def test_an_older_record_is_brought_up_to_date_once(
        self, storage_factory: Callable[[], Storage],
        older_record: Callable[[], tuple[int, list[int]]],
    ) -> None:
        """A record an earlier version wrote is brought up to date by the first writer that
        opens it, a second one opening it too: its rows read as they were, new ids come
        after them, and a pass commits."""
        run, rows = older_record()
        first, second = storage_factory(), storage_factory()
        try:
            assert [t.id for t in first.reads.trials(run)] == rows
            assert [t.id for t in second.reads.trials(run)] == rows
            fresh = {first.new_trial_id(), second.new_trial_id()}
            assert len(fresh) == 2
            assert min(fresh) > max(rows)
            batch = Batch()
            _trial(batch, first, run, len(rows) + 1, "after")
            first.commit(batch)
            assert len(second.reads.trials(run)) == len(rows) + 1
        finally:
            first.close()
            second.close()
