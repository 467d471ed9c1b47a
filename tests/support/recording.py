"""A scripted agent that keeps every observation it was given (what the agent was fed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.testing import ScriptedAgent

if TYPE_CHECKING:
    from collections.abc import Sequence

    import dse


class Recording(ScriptedAgent):
    """A :class:`ScriptedAgent` whose :attr:`seen` lists every observation, in order."""

    def __init__(self, proposals: Any) -> None:
        super().__init__(proposals)
        self.seen: list[dse.Observation] = []

    def observe(self, observations: Sequence[dse.Observation]) -> None:
        self.seen.extend(observations)
        super().observe(observations)
