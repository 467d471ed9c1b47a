"""Fixtures shared by the Ray backend's tests: a real local three-node cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from support.raycluster import RayCluster


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """A three-node Ray cluster on this machine (``support.raycluster``), for this module."""
    pytest.importorskip("ray", reason="dse-backend-ray's tests need ray (pip install ray)")
    from support.raycluster import cluster_for_module

    with cluster_for_module() as cluster:
        yield cluster
