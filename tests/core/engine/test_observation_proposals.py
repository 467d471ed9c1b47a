"""Each observation names the proposal it answers (``Observation.proposal``): the number the
engine gave it, counting the agent's proposals 1, 2, 3... in the order ``propose`` returned
them, the number the record keeps, and the same again when a resumed run replays the agent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import dse
from dse.testing import FakeClock, ProbeBackend, ProbeCluster, ProbeScript
from support.record import record

POINTS = (3, 13, 7, 3, 9, 13, 1, 12, 5, 8, 2, 6)
"""What the agent proposes, in order: 13 breaks the campaign's constraint (a rejection), and
3 comes twice (the second a cache hit)."""


class Numbering:
    """Proposes :data:`POINTS` in order, numbering each as the engine will, and keeps every
    observation it is told."""

    name: ClassVar[str] = "numbering"
    version: ClassVar[str] = "1"

    def __init__(self) -> None:
        self.proposed: dict[int, dict[str, Any]] = {}
        """Its proposals by the number it counted for each."""
        self.told: list[dse.Observation] = []

    @property
    def exhausted(self) -> bool:
        return len(self.proposed) == len(POINTS)

    def propose(self, n: int, in_flight: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for x in POINTS[len(self.proposed):len(self.proposed) + n]:
            self.proposed[len(self.proposed) + 1] = {"x": x}
            out.append({"x": x})
        return out

    def observe(self, observations: Sequence[dse.Observation]) -> None:
        self.told.extend(observations)


class StopAfter(dse.EngineListener):
    def __init__(self, passes: int) -> None:
        self.passes = passes

    def on_pass(self, engine: dse.Engine) -> None:
        if engine.stats.passes >= self.passes:
            engine.request_stop()


def script(params: Mapping[str, Any]) -> ProbeScript:
    x = params["x"]
    return ProbeScript(passes=x % 3, metrics={"value": float(x)})


def campaign(tmp_path: Any) -> dse.Campaign:
    return dse.campaign_from_dict(
        {"campaign": {"name": "numbers", "max_parallelism": 3, "mode": "waves",
                      "constraints": ["x != 13"]},
         "space": {"x": {"type": "int", "low": 0, "high": 20}},
         "objectives": [{"metric": "value"}]},
        workspace=tmp_path,
    )


def run(c: dse.Campaign, store: dse.Store, cluster: ProbeCluster, clock: FakeClock,
        agent: Numbering, listener: dse.EngineListener | None = None,
        resume: int | None = None) -> dse.CampaignResult:
    engine = dse.Engine(c, agent=agent, store=store, clock=clock, listener=listener,
                        backend=ProbeBackend(script, clock=clock, cluster=cluster))
    return engine.run(resume=resume)


def assert_told_under_its_numbers(agent: Numbering) -> None:
    """Every observation names a proposal the agent made under that number, with its
    params."""
    for obs in agent.told:
        assert obs.proposal is not None, obs
        assert agent.proposed[obs.proposal] == dict(obs.params), obs


def test_every_observation_names_the_proposal_it_answers(tmp_path: Any) -> None:
    c = campaign(tmp_path)
    store = dse.Store(c.workspace / "dse.sqlite")
    agent = Numbering()
    result = run(c, store, ProbeCluster(), FakeClock(), agent)

    assert result.status == "completed"
    assert_told_under_its_numbers(agent)
    # Each proposal told once: the rejections (2 and 6) at once, the trials when they end.
    assert sorted(obs.proposal or 0 for obs in agent.told) == list(range(1, len(POINTS) + 1))
    by_proposal = {obs.proposal: obs for obs in agent.told}
    assert [n for n, obs in sorted(by_proposal.items()) if obs.rejected] == [2, 6]
    assert by_proposal[2].trial_number is None
    # The cache hit of x = 3 answers proposal 4, not the first trial's proposal 1.
    assert by_proposal[4].status is dse.TrialStatus.COMPLETED
    assert by_proposal[4].trial_number != by_proposal[1].trial_number
    # The record keeps the same number with each trial (what `dse show` prints).
    rows = record(store).trials(result.campaign_id)
    assert len(rows) == len(POINTS) - 2
    for row in rows:
        (obs,) = [o for o in agent.told if o.trial_number == row["number"]]
        assert obs.proposal == row["proposal"], (dict(row), obs)


def test_a_resumed_run_replays_the_numbers_the_agent_was_told(tmp_path: Any) -> None:
    c = campaign(tmp_path)
    store = dse.Store(c.workspace / "dse.sqlite")
    cluster, clock = ProbeCluster(), FakeClock()
    first = Numbering()
    stopped = run(c, store, cluster, clock, first, StopAfter(3))
    assert stopped.status == "cancelled"
    assert first.told, "the first controller must have told the agent something"

    second = Numbering()
    resumed = run(c, store, cluster, clock, second, resume=stopped.campaign_id)

    assert resumed.status == "completed"
    assert record(store).events(stopped.campaign_id, "agent_replay_diverged") == []
    # The replay tells the new agent what the first was told, under the same numbers.
    def seen(obs: dse.Observation) -> tuple[Any, ...]:
        return obs.proposal, obs.trial_number, dict(obs.params), obs.status, obs.rejected

    replayed = second.told[:len(first.told)]
    assert [seen(o) for o in replayed] == [seen(o) for o in first.told]
    assert_told_under_its_numbers(second)
    assert sorted(obs.proposal or 0 for obs in second.told) == list(range(1, len(POINTS) + 1))
