"""Registers the local-search agent through dse's public hooks (the `dse` entry point names
this module)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dse

if TYPE_CHECKING:
    from dse import Agent


@dse.hookimpl
def dse_register_agents() -> list[type[Agent]]:
    from dse_local_search._agent import LocalSearchAgent

    return [LocalSearchAgent]
