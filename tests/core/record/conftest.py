"""Record tests run on both records: the workspace's SQLite file and a PostgreSQL database on
a real server (``support.postgres``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from dse.record._open import writer
from support.postgres import drop_database, new_database

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from dse.record import Storage


@pytest.fixture(params=["sqlite", "postgres"])
def record(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The record of the test: ``None`` (the workspace's SQLite file) or a PostgreSQL URL (a
    database of its own)."""
    if request.param == "sqlite":
        yield None
        return
    url = new_database()
    yield url
    drop_database(url)


@pytest.fixture
def opener(record: str | None) -> Callable[[Path], Storage]:
    """Opens the test's record for the workspace given, as a controller does (another writer
    at each call)."""
    return lambda workspace: writer(workspace, record)
