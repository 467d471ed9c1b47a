"""Record tests run on both records (the suite's ``record`` fixture): the workspace's SQLite
file and a PostgreSQL database on a real server (``support.postgres``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from dse.record._open import writer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from dse.record import Storage


@pytest.fixture
def opener(record: str | None) -> Callable[[Path], Storage]:
    """Opens the test's record for the workspace given, as a controller does (another writer
    at each call)."""
    return lambda workspace: writer(workspace, record)
