"""dse-backend-ray: run trials on a Ray cluster, each attempt a named actor on a node."""

from __future__ import annotations

from dse_ray._backend import RayBackend
from dse_ray._nodes import node_label
from dse_ray._options import RayOptions, ray_options

__version__ = "0.1.0"
__all__ = ["RayBackend", "RayOptions", "__version__", "node_label", "ray_options"]
