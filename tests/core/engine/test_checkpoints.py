"""Checkpoints: the trial side (``dse.trial.checkpointed``) and what the engine records of them.

A workload marks each saved checkpoint with ``dse.trial.checkpointed()``; an interrupted
attempt then records the work it lost since that mark, and the next attempt that it resumed.
The trial side runs in real processes; the engine side on the probe with the fake clock (each
pass waits ``poll_interval`` = 10 s, so attempt times are exact).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

import pytest

import dse
import dse.trial
from dse.testing import ProbeScript
from support.record import record

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

MARK = ".dse-checkpointed"
PREEMPTED = dse.JobState.PREEMPTED


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DSE_")}


def run_workload(source: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run Python source as a workload with the trial contract *env*."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        env={**_base_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def prepare(campaign: dse.Campaign, trial_dir: Path, attempt: int = 1) -> dse.JobSpec:
    """The job of one trial of *campaign*, as the default environment prepares it."""
    environment = dse.CommandEnvironment(
        dse.EnvironmentConfig(
            command=("python", "workload.py"),
            checkpoint_every=campaign.environment.checkpoint_every,
        ),
        campaign.objectives,
    )
    trial_dir.mkdir(exist_ok=True)
    return environment.prepare(
        dse.TrialInfo("kernels-1-7", 7, attempt, {"x": 7}, trial_dir, data_version=None)
    )


# -- the trial side -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("every", "said"), [("30s", "30.0"), ("2m", "120.0"), (45, "45.0"), (None, None)]
)
def test_a_workload_reads_the_checkpoint_cadence_of_its_campaign(
    make_campaign, tmp_path, every, said
):
    options = {} if every is None else {"checkpoint_every": every}
    job = prepare(make_campaign(**options), tmp_path / "trial")

    done = run_workload(
        "import dse.trial; print(repr(dse.trial.checkpoint_every()))", job.env
    )

    assert done.returncode == 0, done.stderr
    assert job.env.get("DSE_CHECKPOINT_EVERY") == said
    assert done.stdout.strip() == ("None" if said is None else said)


def test_a_cadence_that_is_not_a_number_reads_as_none(monkeypatch):
    monkeypatch.setenv("DSE_CHECKPOINT_EVERY", "soon")

    assert dse.trial.checkpoint_every() is None


def test_checkpointed_leaves_a_mark_with_the_attempt_and_the_time(make_campaign, tmp_path):
    job = prepare(make_campaign(), tmp_path / "trial", attempt=2)
    before = time.time()

    done = run_workload("""
        import dse.trial
        (dse.trial.checkpoint_dir() / "state").write_text("step 40")
        dse.trial.checkpointed()
    """, job.env)

    after = time.time()
    assert done.returncode == 0, done.stderr
    mark = job.checkpoint_dir / MARK
    assert sorted(p.name for p in job.checkpoint_dir.iterdir()) == [MARK, "state"]
    assert mark.read_text() == "2\n"
    # Filesystem timestamps may be coarser than time.time(): allow one second.
    assert before - 1 <= mark.stat().st_mtime <= after + 1


def test_a_later_checkpoint_replaces_the_mark(make_campaign, tmp_path):
    campaign = make_campaign()
    first = prepare(campaign, tmp_path / "trial", attempt=1)
    third = prepare(campaign, tmp_path / "trial", attempt=3)
    mark = first.checkpoint_dir / MARK
    assert run_workload("import dse.trial; dse.trial.checkpointed()", first.env).returncode == 0
    os.utime(mark, (1_000.0, 1_000.0))

    done = run_workload("import dse.trial; dse.trial.checkpointed()", third.env)

    assert done.returncode == 0, done.stderr
    assert mark.read_text() == "3\n"
    assert mark.stat().st_mtime > 1_000.0
    assert [p.name for p in first.checkpoint_dir.iterdir()] == [MARK]


def test_checkpointed_outside_a_trial_names_the_missing_variable(monkeypatch):
    for name in list(os.environ):
        if name.startswith("DSE_"):
            monkeypatch.delenv(name)

    with pytest.raises(dse.trial.TrialContextError) as caught:
        dse.trial.checkpointed()

    assert str(caught.value) == (
        "dse.trial.checkpoint_dir(): $DSE_CHECKPOINT_DIR is not set; run this as a dse trial"
        " (dse run <campaign.toml>), or set it by hand to debug"
    )


# -- what the engine records ----------------------------------------------------------------


def attempt_rows(run: Any, t0: float) -> list[tuple[Any, ...]]:
    """(attempt, state, resumed, work lost, started, ended) with times relative to *t0*."""
    return [
        (
            row["attempt"], row["state"], row["resumed"], row["work_lost_s"],
            row["started_at"] - t0, row["ended_at"] - t0,
        )
        for row in record(run.store).attempts(run.result.campaign_id)
    ]


def retry_events(run: Any) -> list[dict[str, Any]]:
    rows = record(run.store).events(run.result.campaign_id, "retry")
    return [json.loads(e["data"]) for e in rows]


class CheckpointAt(dse.EngineListener):
    """Plays the workload of trial 1: it checkpoints when the fake clock reads *at*.

    The mark is written by ``dse.trial.checkpointed()`` under the attempt's own trial
    contract, then dated on the fake clock (the engine compares it with its clock).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: float) -> None:
        self.monkeypatch = monkeypatch
        self.at = at

    def on_pass(self, engine: dse.Engine) -> None:
        now = engine.clock.time()
        if now != self.at:
            return
        cluster = engine.backend.cluster  # type: ignore[attr-defined]
        job = [j for j in cluster.jobs.values() if j.spec.trial_id.endswith("-1")][-1]
        with self.monkeypatch.context() as patch:
            for name, value in job.spec.env.items():
                patch.setenv(name, value)
            dse.trial.checkpointed()
        os.utime(job.spec.checkpoint_dir / MARK, (now, now))


def test_an_interrupted_attempt_without_a_checkpoint_loses_all_its_work(
    run_campaign, fake_clock
):
    t0 = fake_clock.now
    script = [ProbeScript(passes=3, state=PREEMPTED), ProbeScript(metrics={"value": 1.0})]

    run = run_campaign([1], script=lambda p: script, poll_interval="10s")

    # Attempt 1 is seen running at t0+10 and preempted at t0+40: 30 s of work lost.
    assert attempt_rows(run, t0) == [
        (1, "preempted", 0, 30.0, 10.0, 40.0),
        (2, "succeeded", 0, None, 50.0, 50.0),
    ]
    assert retry_events(run)[0]["resumed"] is False


def test_a_checkpoint_bounds_the_work_lost_and_the_next_attempt_resumes(
    run_campaign, fake_clock, monkeypatch
):
    t0 = fake_clock.now
    script = [ProbeScript(passes=3, state=PREEMPTED), ProbeScript(metrics={"value": 1.0})]

    run = run_campaign(
        [1], script=lambda p: script, poll_interval="10s",
        listener=CheckpointAt(monkeypatch, t0 + 20),
    )

    assert attempt_rows(run, t0) == [
        (1, "preempted", 0, 20.0, 10.0, 40.0),
        (2, "succeeded", 1, None, 50.0, 50.0),
    ]
    assert retry_events(run) == [{
        "trial": 1, "attempt": 2, "after": "preempted", "class": "preempted",
        "node": "probe", "resumed": True,
    }]
    assert [r["status"] for r in run.trials] == ["completed"]


def test_a_checkpoint_older_than_the_attempt_counts_from_the_attempts_start(
    run_campaign, fake_clock, monkeypatch
):
    t0 = fake_clock.now
    script = [
        ProbeScript(passes=3, state=PREEMPTED),
        ProbeScript(passes=1, state=PREEMPTED),
        ProbeScript(metrics={"value": 1.0}),
    ]

    run = run_campaign(
        [1], script=lambda p: script, poll_interval="10s",
        listener=CheckpointAt(monkeypatch, t0 + 20),
    )

    # Attempt 2 resumes from the checkpoint of attempt 1 (t0+20), starts at t0+50 and is
    # preempted at t0+60: it loses the 10 s since its own start.
    assert attempt_rows(run, t0) == [
        (1, "preempted", 0, 20.0, 10.0, 40.0),
        (2, "preempted", 1, 10.0, 50.0, 60.0),
        (3, "succeeded", 1, None, 70.0, 70.0),
    ]


def test_the_mark_a_real_workload_leaves_is_the_one_the_engine_reads(run_campaign):
    class RealWorkload(dse.EngineListener):
        """After the first pass, trial 1's workload checkpoints in a real process."""

        def __init__(self) -> None:
            self.done: subprocess.CompletedProcess[str] | None = None

        def on_pass(self, engine: dse.Engine) -> None:
            if self.done is None:
                job = engine.backend.cluster.jobs["probe-1"]  # type: ignore[attr-defined]
                self.done = run_workload(
                    "import dse.trial; dse.trial.checkpointed()", job.spec.env
                )

    workload = RealWorkload()
    script = [ProbeScript(passes=2, state=PREEMPTED), ProbeScript(metrics={"value": 1.0})]

    run = run_campaign([1], script=lambda p: script, listener=workload)

    assert workload.done is not None
    assert workload.done.returncode == 0, workload.done.stderr
    rows = record(run.store).attempts(run.result.campaign_id)
    assert [(r["attempt"], r["state"], r["resumed"]) for r in rows] == [
        (1, "preempted", 0),
        (2, "succeeded", 1),
    ]
    assert retry_events(run)[0]["resumed"] is True


@pytest.mark.parametrize(("every", "said"), [("30s", "30.0"), (None, None)])
def test_the_checkpoint_cadence_reaches_every_attempt(run_campaign, every, said):
    options = {} if every is None else {"checkpoint_every": every}
    script = [ProbeScript(state=PREEMPTED), ProbeScript(metrics={"value": 1.0})]

    run = run_campaign([1], script=lambda p: script, **options)

    jobs = sorted(run.backend.cluster.jobs.values(), key=lambda j: j.spec.attempt)
    assert [(j.spec.attempt, j.spec.env.get("DSE_CHECKPOINT_EVERY")) for j in jobs] == [
        (1, said),
        (2, said),
    ]
