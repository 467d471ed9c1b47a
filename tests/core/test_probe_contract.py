"""The probe passes the same contract suite a third-party backend must pass."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dse import Backend
from dse.testing import BackendContract, ProbeBackend, ProbeCluster


class TestProbeBackend(BackendContract):
    @pytest.fixture
    def backend_factory(self) -> Callable[[], Backend]:
        cluster = ProbeCluster()
        return lambda: ProbeBackend(cluster=cluster)
