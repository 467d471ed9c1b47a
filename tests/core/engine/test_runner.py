"""The engine depends on the ``Runner`` protocol, not on the ``Backend`` base class: a plain
class that satisfies it runs a whole campaign."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, ClassVar

import dse
from dse.testing import FakeClock, ProbeBackend, ScriptedAgent
from support.record import record

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path


class PlainRunner:
    """Runs each job for one polling pass and scores it ``x``; extends nothing."""

    name: ClassVar[str] = "plain"
    version: ClassVar[str] = "2"
    default_poll_interval: ClassVar[tuple[float, float]] = (1.0, 1.0)
    runs_commands: ClassVar[bool] = False
    overrun_s = 0.0

    def __init__(self) -> None:
        self.clock: dse.Clock = dse.SystemClock()
        self.last_pass_commands: dict[str, int] = {}
        self.jobs: dict[str, tuple[dse.JobSpec, float]] = {}
        self.running: set[str] = set()
        self.batches: list[list[str]] = []
        self.polls = 0
        self.shut = False

    def use_clock(self, clock: dse.Clock) -> None:
        self.clock = clock

    def placement(self) -> dict[str, str]:
        return {}

    def refuse(self, resources: dse.Resources) -> str | None:
        return None

    def submit(self, jobs: Sequence[dse.JobSpec]) -> list[str]:
        ids = [f"plain-{spec.trial_id}.{spec.attempt}" for spec in jobs]
        for job_id, spec in zip(ids, jobs, strict=True):
            self.jobs[job_id] = (spec, self.clock.time())
        self.batches.append([spec.trial_id for spec in jobs])
        return ids

    def poll(self) -> list[dse.JobStatus]:
        self.polls += 1
        self.last_pass_commands = {"query": 1}
        out = []
        for job_id, (spec, started) in list(self.jobs.items()):
            if job_id not in self.running:
                self.running.add(job_id)
                out.append(dse.JobStatus(job_id, dse.JobState.RUNNING, started_at=started))
                continue
            del self.jobs[job_id]
            result = {"complete": True, "metrics": {"value": float(spec.params["x"])}}
            out.append(dse.JobStatus(
                job_id, dse.JobState.SUCCEEDED, exit_code=0, node="here", started_at=started,
                ended_at=self.clock.time(), result=result,
            ))
        return out

    def cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            self.jobs.pop(job_id, None)

    def reattach(self, jobs: Mapping[str, dse.JobSpec]) -> None:
        for job_id, spec in jobs.items():
            self.jobs[job_id] = (spec, self.clock.time())

    def job_id_for(self, job: dse.JobSpec) -> str | None:
        return f"plain-{job.trial_id}.{job.attempt}"

    def wait(self, timeout: float) -> bool:
        return False

    def shutdown(self, *, cancel: bool = True, wait: bool = True) -> None:
        self.shut = True


def test_a_plain_class_satisfies_runner_and_backend_implements_it() -> None:
    runner: dse.Runner = PlainRunner()  # checked statically as well
    assert isinstance(runner, dse.Runner)
    assert not isinstance(runner, dse.Backend)
    assert isinstance(ProbeBackend(), dse.Runner)
    assert not isinstance(object(), dse.Runner)


def test_a_plain_runner_runs_a_whole_campaign(tmp_path: Path) -> None:
    campaign = dse.campaign_from_dict({
        "campaign": {"name": "plain", "max_parallelism": 2, "mode": "waves"},
        "space": {"x": {"type": "int", "low": 0, "high": 10}},
        "objectives": [{"metric": "value"}],
    }, workspace=tmp_path / "ws")
    runner = PlainRunner()
    clock = FakeClock()
    runner.use_clock(clock)
    store = dse.Store(campaign.workspace / "dse.sqlite")
    try:
        engine = dse.Engine(campaign, agent=ScriptedAgent([{"x": x} for x in (4, 2, 7, 1)]),
                            backend=runner, store=store, clock=clock)
        result = engine.run()
        trials = record(store).trials(result.campaign_id)
        attempts = record(store).attempts(result.campaign_id)
        commands = record(store).events(result.campaign_id, "backend_commands")
    finally:
        store.close()
        runner.shutdown()

    assert (result.status, result.end_reason) == ("completed", "agent_exhausted")
    assert [(json.loads(t["params"]), t["status"], t["score"]) for t in trials] == [
        ({"x": 4}, "completed", 4.0), ({"x": 2}, "completed", 2.0),
        ({"x": 7}, "completed", 7.0), ({"x": 1}, "completed", 1.0),
    ]
    assert [len(batch) for batch in runner.batches] == [2, 2]  # waves of max_parallelism
    assert runner.polls == 4  # two passes per wave: one sees it run, one sees it end
    assert {(a["backend"], a["state"]) for a in attempts} == {("plain", "succeeded")}
    assert len(commands) == runner.polls  # what the runner says each pass issued is recorded
    assert runner.shut
