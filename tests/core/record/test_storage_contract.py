"""The storage contract on the SQLite record, and what it catches: three copies of the SQLite
store, each broken on purpose in one way a storage can be (a pass not written as one
transaction, ids counted by each writer alone, a claim that never waits), fail the test named
for that mistake, and passes what it does right (the suite run as a storage author runs it, in a
pytest process)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dse.record.postgres import PostgresStore
from dse.record.sqlite import Store
from dse.testing.contracts import StorageContract
from support.contracts import failed, run_suite
from support.older import postgres_schema_17, schema_8

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dse.record import Storage


class TestSQLiteStore(StorageContract):
    @pytest.fixture
    def storage_factory(self, tmp_path: Path) -> Callable[[], Store]:
        return lambda: Store(tmp_path / ".dse" / "dse.sqlite")

    @pytest.fixture
    def older_record(self, tmp_path: Path) -> Callable[[], tuple[int, list[int]]]:
        return lambda: schema_8(tmp_path / ".dse" / "dse.sqlite")


class TestPostgresStore(StorageContract):
    """The contract on a real PostgreSQL server (``support.postgres``)."""

    @pytest.fixture
    def storage_factory(self, postgres_url: str, tmp_path: Path
                        ) -> Callable[[], PostgresStore]:
        return lambda: PostgresStore(postgres_url, tmp_path / ".dse")

    @pytest.fixture
    def older_record(self, postgres_url: str, tmp_path: Path
                     ) -> Callable[[], tuple[int, list[int]]]:
        return lambda: postgres_schema_17(postgres_url, tmp_path / ".dse")

    @contextlib.contextmanager
    def alive(self, storage: Storage, campaign: str) -> Iterator[None]:
        """A live controller of another campaign holds its lease (the record says)."""
        storage.take_lease(campaign, {"host": "elsewhere", "pid": 1}, 60.0)
        try:
            yield
        finally:
            storage.release_lease(campaign)


_BROKEN = '''
import itertools

import pytest

from dse.record.sqlite import Store
from dse.testing.contracts import StorageContract
from support.older import schema_8


class PassByPieces(Store):
    """Commits each change of a pass as it goes: a failure halfway leaves half a pass."""

    def commit(self, batch):
        for kind, rows in batch.changes():
            for row in rows:
                one = type(batch)()
                getattr(one, "_" + kind).append(row)
                super().commit(one)
        batch.clear()


_COUNT = itertools.count(1)


class OwnCount(Store):
    """Hands out ids from a count of its own, as if it were the only writer."""

    def new_trial_id(self):
        return 10_000 + next(self._own) if hasattr(self, "_own") else self._start()

    def _start(self):
        self._own = itertools.count(1)
        return self.new_trial_id()

    new_attempt_id = new_trial_id


class GreedyClaims(Store):
    """Claims every config for its own run, whoever runs it."""

    def claim(self, wanted, campaign, now, **kwargs):
        out = super().claim(wanted, campaign, now, **kwargs)
        return {d: c if c.result is not None else type(c)(wanted[d], mine=True)
                for d, c in out.items()}


def factory(cls, tmp_path):
    return lambda: cls(tmp_path / ".dse" / "dse.sqlite")


class Contract(StorageContract):
    @pytest.fixture
    def older_record(self, tmp_path):
        return lambda: schema_8(tmp_path / ".dse" / "dse.sqlite")


class TestPassByPieces(Contract):
    @pytest.fixture
    def storage_factory(self, tmp_path):
        return factory(PassByPieces, tmp_path)


class TestOwnCount(Contract):
    @pytest.fixture
    def storage_factory(self, tmp_path):
        return factory(OwnCount, tmp_path)


class TestGreedyClaims(Contract):
    @pytest.fixture
    def storage_factory(self, tmp_path):
        return factory(GreedyClaims, tmp_path)
'''


@pytest.mark.slow
def test_each_broken_storage_fails_the_test_named_for_its_mistake(tmp_path: Path) -> None:
    tests = Path(__file__).resolve().parents[2]  # support.older, as this process has it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tests), *filter(None, [os.environ.get("PYTHONPATH")])])}
    outcome = run_suite(tmp_path, "test_broken_storages", _BROKEN, env=env)
    found = failed(outcome)
    assert {
        "TestPassByPieces::test_a_commit_that_fails_writes_nothing",
        "TestOwnCount::test_two_writers_never_hand_out_one_id",
        "TestGreedyClaims::test_a_config_runs_under_one_writer_and_its_result_is_reused",
    } <= found, outcome[-3000:]
    assert "34 passed" in outcome, outcome[-3000:]  # what each copy does right still passes
