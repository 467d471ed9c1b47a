"""The local backend passes the same contract suite as every backend."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dse import Backend
from dse.testing import BackendContract
from dse_local import LocalBackend


class TestLocalBackend(BackendContract):
    @pytest.fixture
    def backend_factory(self) -> Callable[[], Backend]:
        return lambda: LocalBackend(cpus=4, gpus=0, grace=2.0)
