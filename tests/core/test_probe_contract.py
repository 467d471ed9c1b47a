"""The probe passes the same contract suite a third-party backend must pass."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import dse
from dse import Backend
from dse.testing import (
    BackendContract,
    FakeClock,
    ProbeBackend,
    ProbeCluster,
    ProbeScript,
    ScriptedAgent,
)
from support.record import record


class TestProbeBackend(BackendContract):
    @pytest.fixture
    def backend_factory(self) -> Callable[[], Backend]:
        cluster = ProbeCluster()
        return lambda: ProbeBackend(cluster=cluster)

    # The probe runs no command (it reads the params' `outcome`): the checks of how a
    # backend runs one do not apply; its start and end times do.
    test_the_job_environment_reaches_the_command = None
    test_a_time_limit_ends_the_job = None
    test_a_signal_death_is_reported_killed = None
    test_a_missing_command_is_invalid = None
    test_cancel_ends_the_whole_process_tree = None


def test_timed_probe_jobs_end_in_virtual_time_with_a_zero_poll_interval(tmp_path: Path) -> None:
    # The probe polls without waiting by default; timed jobs must still end on a fake clock
    # (the engine asks the backend to wait even for 0 s, and the probe moves time on).
    camp = dse.campaign_from_dict({
        "campaign": {"name": "timed", "max_parallelism": 2, "max_trials": 4},
        "space": {"x": {"type": "int", "low": 1, "high": 9}},
        "objectives": [{"metric": "value"}],
    }, workspace=tmp_path / "ws")
    clock = FakeClock(start=0.0)
    store = dse.Store(camp.workspace / "dse.sqlite")
    agent = ScriptedAgent([{"x": x} for x in (3, 5, 2, 4)])
    result = dse.Engine(camp, agent=agent, store=store, clock=clock,
                        backend=ProbeBackend(lambda p: ProbeScript(
                            seconds=float(p["x"]), metrics={"value": p["x"]}), clock=clock)
                        ).run()
    assert result.end_reason == "max_trials"
    assert [r["status"] for r in record(store).trials(result.campaign_id)] == ["completed"] * 4
    assert clock.time() == 9.0  # waves: max(3, 5) + max(2, 4)
    store.close()
