"""The probe passes the same contract suite a third-party backend must pass."""

from __future__ import annotations

import sys
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


def test_the_probe_takes_the_options_its_docs_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # [backend.probe]: `script` ("module:function", found beside the campaign file) and
    # `write_results`; anything else, or a write_results that is no boolean, is one line.
    monkeypatch.setattr(sys, "path", list(sys.path))  # the lookup adds the file's directory
    (tmp_path / "probe_option_script.py").write_text(
        "def cost(params):\n    return {'value': float(params['x'])}\n")
    source = str(tmp_path / "campaign.toml")
    probe = ProbeBackend.from_options(
        {"script": "probe_option_script:cost", "write_results": True}, source=source)
    assert probe.script({"x": 3}) == {"value": 3.0}
    assert probe.trial_dirs is True
    with pytest.raises(dse.ConfigError, match=r"backend.probe: unknown option\(s\) \['scirpt'\]"):
        ProbeBackend.from_options({"scirpt": "x:y"}, source=source)
    with pytest.raises(dse.ConfigError,
                       match=r"backend.probe.write_results: expected true or false, got 'yes'"):
        ProbeBackend.from_options({"write_results": "yes"}, source=source)
