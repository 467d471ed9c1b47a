"""Pareto runs (``[campaign] objectives = "pareto"``) through the real engine on the probe
backend, one trial at a time on a fake clock, for the front figures' tests.

Trial ``x`` runs ``x`` seconds (at 36 USD per CPU-hour when priced: ``x`` cents) and reports
``time = x``, ``acc = ACC[x]``, ``mem = MEM[x]``; an ``x`` with no ``ACC`` fails. Proposals
10, 20, 30, 40, 50 give trials 1-5: 3 fails, 4 is dominated by 2 (in time and acc, and in
mem too), the front is 1, 2, 5.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dse
from dse.report._front import pareto_fronts
from dse.testing import FakeClock, ProbeBackend, ProbeScript
from support.recording import Recording

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from pathlib import Path

    from dse.report._front import Front

ACC = {10: 50.0, 20: 80.0, 40: 60.0, 50: 90.0}
MEM = {10: 9.0, 20: 4.0, 40: 5.0, 50: 6.0}
PROPOSALS = (10, 20, 30, 40, 50)
TWO: tuple[dict[str, Any], ...] = ({"metric": "time"}, {"metric": "acc", "direction": "maximize"})
THREE = (*TWO, {"metric": "mem"})


def campaign(workspace: Path, objectives: Sequence[Mapping[str, Any]] = TWO, *,
             priced: bool = False, time_limit: str = "100s") -> dse.Campaign:
    doc: dict[str, Any] = {
        # The probe sleeps the fake clock to the next end, so the cadence may be long.
        "campaign": {"name": "mo", "objectives": "pareto", "max_parallelism": 1,
                     "poll_interval": "1h"},
        "space": {"x": {"type": "int", "low": 0, "high": 100_000}},
        "objectives": [dict(o) for o in objectives],
        "environment": {"time_limit": time_limit},
    }
    if priced:
        doc["backend"] = {"probe": {"price": {"cpu_hour": 36}}}
    return dse.campaign_from_dict(doc, workspace=workspace)


def script(*, scale: float = 1.0, versions: Mapping[int, str] | None = None,
           ) -> Callable[[Mapping[str, Any]], ProbeScript]:
    """Trial ``x`` runs ``scale * x`` seconds; *versions* names the data version some read."""

    def play(params: Mapping[str, Any]) -> ProbeScript:
        x = int(params["x"])
        read = (versions or {}).get(x)
        if x not in ACC:
            return ProbeScript(seconds=scale * x, state=dse.JobState.FAILED)
        return ProbeScript(seconds=scale * x, data_version=read,
                           metrics={"time": float(x), "acc": ACC[x], "mem": MEM[x]})

    return play


def run(camp: dse.Campaign, proposals: Iterable[int] = PROPOSALS,
        play: Callable[[Mapping[str, Any]], ProbeScript] | None = None,
        ) -> tuple[dse.Store, int]:
    """Run *camp* on the proposals ``{"x": p}``; the store and the run's id."""
    clock = FakeClock(start=0.0)
    store = dse.Store(camp.workspace / "dse.sqlite")
    engine = dse.Engine(camp, agent=Recording([{"x": p} for p in proposals]), store=store,
                        clock=clock, backend=ProbeBackend(play or script(), clock=clock))
    return store, engine.run().campaign_id


def fronts(store: dse.Store, run_id: int) -> list[Front]:
    row = store.reads.campaign(run_id)
    assert row is not None
    return pareto_fronts(store, run_id, row.spec)
