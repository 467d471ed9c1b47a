"""Running a campaign built by name (its registered agent) on the probe, on a fake clock."""

from __future__ import annotations

from typing import Any

import dse
from dse.testing import FakeClock, ProbeBackend
from support.record import record


def run_on_probe(campaign: dse.Campaign) -> tuple[dse.CampaignResult, list[Any]]:
    """Run *campaign* to its end; return how it ended and its trial rows in number order."""
    clock = FakeClock()
    store = dse.Store(campaign.workspace / "dse.sqlite")
    try:
        engine = dse.build_engine(
            campaign, store=store, clock=clock, backend=ProbeBackend(clock=clock)
        )
        result = engine.run()
        return result, record(store).trials(result.campaign_id)
    finally:
        store.close()


def probe_campaign(points: str = "{x = 1}, {x = 2}, {x = 3}", *, high: int = 10,
                   results: bool = True) -> str:
    """A campaign file of the list agent's *points* (TOML inline tables of ``x``, from 0 to
    *high*) on the probe, two at a time, scoring ``value``; the probe writes each trial's
    files when *results* (``dse show``, the reading commands have a trial directory)."""
    files = "\n[backend.probe]\nwrite_results = true\n" if results else ""
    return f"""
[campaign]
name = "demo"
agent = "list"
backend = "probe"
max_parallelism = 2
poll_interval = "1ms"
{files}
[agent.list]
points = [{points}]

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = {high} }}
"""
