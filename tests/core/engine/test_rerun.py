"""A rerun asks the agent what the first run asked (issue 36, part 6): a cache hit takes its
slot in its wave as the trial it reuses did (rolling: its result is told before the next
proposal), and what is in flight is shown in proposal order, so an agent told the same
proposes the same and every configuration of the first run is answered from the record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

# 3 twice (a cache hit of a trial of the same wave), 101 outside the constraint (rejected).
PROPOSALS = [3, 8, 1, 5, 3, 6, 101, 2, 9, 4, 7]
SECONDS = {1: 4.0, 2: 1.0, 3: 3.0, 4: 0.5, 5: 2.0, 6: 0.2, 7: 1.5, 8: 0.1, 9: 2.5}
"""How long each x runs: the trials of a wave end in another order than they were proposed."""


class Calls(ScriptedAgent):
    """Proposes the script, at most two a call, and writes down every call it gets."""

    def __init__(self) -> None:
        super().__init__([{"x": x} for x in PROPOSALS])
        self.log: list[tuple[Any, ...]] = []

    def propose(self, n: int, in_flight: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        out = super().propose(min(n, 2), in_flight)
        self.log.append(("propose", n, [p["x"] for p in in_flight], [p["x"] for p in out]))
        return out

    def observe(self, observations: Sequence[dse.Observation]) -> None:
        super().observe(observations)
        self.log.append(("observe", [(o.proposal, o.params["x"], o.status, o.score, o.rejected)
                                     for o in observations]))


def run(tmp_path: Path, mode: str, parallelism: int) -> tuple[dse.CampaignResult, Calls]:
    camp = dse.campaign_from_dict({
        "campaign": {"name": "rerun", "mode": mode, "max_parallelism": parallelism,
                     "constraints": ["x <= 100"]},
        "space": {"x": {"type": "int", "low": 0, "high": 200}},
        "objectives": [{"metric": "value"}],
    }, source=tmp_path / "rerun.toml", workspace=tmp_path / "ws")
    clock = FakeClock()
    agent = Calls()
    store = dse.Store(camp.workspace / "dse.sqlite")
    try:
        result = dse.Engine(camp, agent=agent, store=store, clock=clock, backend=ProbeBackend(
            lambda p: ProbeScript(metrics={"value": float(p["x"])}, seconds=SECONDS[p["x"]]),
            clock=clock)).run()
    finally:
        store.close()
    return result, agent


@pytest.mark.parametrize(("mode", "parallelism"), [("waves", 3), ("waves", 1), ("rolling", 1)])
def test_a_rerun_asks_the_agent_what_the_run_asked(
    tmp_path: Path, mode: str, parallelism: int
) -> None:
    first, asked = run(tmp_path, mode, parallelism)
    again, reasked = run(tmp_path, mode, parallelism)

    assert reasked.log == asked.log
    assert (first.stats.completed, first.stats.cached, first.stats.rejected) == (9, 1, 1)
    assert (again.stats.completed, again.stats.cached, again.stats.rejected) == (0, 10, 1)


def test_a_wave_shows_its_cache_hits_in_flight_until_it_is_told(tmp_path: Path) -> None:
    run(tmp_path, "waves", 3)
    _, agent = run(tmp_path, "waves", 3)

    # Each wave: two proposals, then the third slot asked for with those two in flight (cache
    # hits now, trials then), in proposal order; the wave told once, in proposal order.
    assert agent.log[:4] == [
        ("propose", 3, [], [3, 8]),
        ("propose", 1, [3, 8], [1]),
        ("observe", [(1, 3, dse.TrialStatus.COMPLETED, 3.0, None),
                     (2, 8, dse.TrialStatus.COMPLETED, 8.0, None),
                     (3, 1, dse.TrialStatus.COMPLETED, 1.0, None)]),
        ("propose", 3, [], [5, 3]),
    ]
