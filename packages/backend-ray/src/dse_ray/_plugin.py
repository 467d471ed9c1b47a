"""Registers the Ray backend through dse's public hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse import hookimpl

if TYPE_CHECKING:
    from dse import Backend


@hookimpl
def dse_register_backends() -> list[type[Backend]]:
    from dse_ray._backend import RayBackend

    return [RayBackend]
