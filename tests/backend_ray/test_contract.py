"""The Ray backend passes dse's ``BackendContract`` on a real three-node Ray cluster."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import pytest

from dse.testing import BackendContract
from dse_ray import RayBackend

if TYPE_CHECKING:
    from collections.abc import Callable

    from support.raycluster import RayCluster

pytestmark = pytest.mark.xdist_group("ray")


class TestRayBackend(BackendContract):
    @pytest.fixture
    def backend_factory(self, ray_cluster: RayCluster) -> Callable[[], RayBackend]:
        # A namespace per test: a test's actors are never another's.
        namespace = f"contract-{secrets.token_hex(4)}"
        return lambda: RayBackend(address=ray_cluster.address, namespace=namespace,
                                  grace=1.0, linger=60.0)
