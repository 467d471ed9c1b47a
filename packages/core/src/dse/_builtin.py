"""dse-core's own plugin: registers the probe backend through the public hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.hookspecs import hookimpl

if TYPE_CHECKING:
    from dse._backend import Backend


@hookimpl
def dse_register_backends() -> list[type[Backend]]:
    from dse.testing._probe import ProbeBackend

    return [ProbeBackend]
