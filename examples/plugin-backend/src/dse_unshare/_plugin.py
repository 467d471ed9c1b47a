"""Registers the unshare backend through dse's public hooks (the `dse` entry point names
this module)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dse

if TYPE_CHECKING:
    from dse import Backend


@dse.hookimpl
def dse_register_backends() -> list[type[Backend]]:
    from dse_unshare._backend import UnshareBackend

    return [UnshareBackend]
