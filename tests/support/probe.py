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
