"""``[agent] warm_start`` with the bayesian agent: told an earlier campaign's results, its first
proposals already exploit them (benchmarks/warm_start.py measures it over 10 seeds and two
functions; this is its deterministic small case, through the real engine on the probe)."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.testing import FakeClock, ProbeBackend, ProbeScript

if TYPE_CHECKING:
    from pathlib import Path

BRANIN_MIN = 0.397887


def branin(p: dict[str, Any]) -> float:
    x1, x2 = float(p["x1"]), float(p["x2"])
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def _values(store: dse.Store, workspace: Path, name: str, agent: str, trials: int,
            seed: int, warm: list[str] | None = None) -> list[float]:
    table: dict[str, Any] = {
        "campaign": {"name": name, "agent": agent, "max_trials": trials, "seed": seed,
                     "poll_interval": 1e6},
        "space": {"x1": {"type": "float", "low": -5, "high": 10},
                  "x2": {"type": "float", "low": 0, "high": 15}},
        "objectives": [{"metric": "value"}],
    }
    if warm:
        table["agent"] = {"warm_start": warm}
    clock = FakeClock()
    engine = dse.build_engine(
        dse.campaign_from_dict(table, workspace=workspace), store=store, clock=clock,
        backend=ProbeBackend(lambda p: ProbeScript(metrics={"value": branin(p)}, seconds=1.0),
                             clock=clock))
    result = engine.run()
    return [float((r.metrics or {})["value"]) for r in store.reads.trials(result.campaign_id)]


@pytest.mark.parametrize("source", ["bayesian", "random"])
def test_a_warm_started_run_exploits_the_earlier_campaign_at_once(
    tmp_path: Path, source: str
) -> None:
    cold10, cold30, warm10, first = [], [], [], []
    for seed in range(3):
        workspace = tmp_path / f"s{seed}"
        store = dse.Store(workspace / "dse.sqlite")
        try:
            _values(store, workspace, "source", source, 30, 1000 + seed)
            cold = _values(store, workspace, "cold", "bayesian", 30, seed)
            warm = _values(store, workspace, "warm", "bayesian", 10, seed, warm=["source"])
        finally:
            store.close()
        cold10.append(min(cold[:10]) - BRANIN_MIN)
        cold30.append(min(cold) - BRANIN_MIN)
        warm10.append(min(warm) - BRANIN_MIN)
        first.append(min(warm[:3]) - BRANIN_MIN)
    # Its first three proposals already do better than a cold start's first ten.
    assert statistics.median(first) < statistics.median(cold10)
    if source == "bayesian":  # continued with a new seed: ten trials beat a cold thirty
        assert statistics.median(warm10) <= statistics.median(cold30)
    else:  # random search's thirty points: ten trials beat a cold ten by far
        assert statistics.median(warm10) < statistics.median(cold10) / 5
