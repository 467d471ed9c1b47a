"""Registers the Slurm backend through dse's public hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse import hookimpl

if TYPE_CHECKING:
    from dse import Backend


@hookimpl
def dse_register_backends() -> list[type[Backend]]:
    from dse_slurm._arrays import SlurmBackend

    return [SlurmBackend]
