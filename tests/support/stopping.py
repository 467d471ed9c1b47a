"""A record of a run with early stopping, written row by row through ``Store.commit(Batch)``:
trials that ran to the end, trials stopped at rungs 1 and 3, trials promoted from rung 1 and
resumed in a second attempt, a failure. What ``dse show``, ``dse report`` and the HTML report
read back is checked against :data:`PLAN`.

Each attempt costs its seconds of wall clock, CPU and node time, and a cent per second. The
loss of trial *n* at step *s* is ``n / s`` (lower is better).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dse
from dse.engine._spec import campaign_spec
from dse.model._states import RESOLVED_SCORER, AttemptState, FailureClass, TrialStatus
from dse.record._batch import Batch
from dse.report._curves import learning_curves

if TYPE_CHECKING:
    from pathlib import Path

MAX_STEP = 9
T0 = 1_000.0

PLAIN_CAMPAIGN = """
[campaign]
name = "plain"
agent = "list"
backend = "probe"
[agent.list]
points = [{x = 1}]
[[objectives]]
metric = "value"
[space]
x = { type = "int", low = 0, high = 10 }
"""
"""A campaign without a stopping rule (one trial on the probe): its report has no stopping
section and no learning curves."""


@dataclass(frozen=True)
class Attempt:
    steps: range
    """The steps it reported."""
    seconds: float


@dataclass(frozen=True)
class Decision:
    attempt: int
    verdict: str
    rung: int
    cutoff: float | None = 1.0


@dataclass(frozen=True)
class Planned:
    number: int
    status: TrialStatus
    attempts: tuple[Attempt, ...]
    decisions: tuple[Decision, ...] = ()
    failure: FailureClass | None = None
    peers: list[tuple[int, float]] = field(default_factory=lambda: [(1, 1.0)])


PLAN = (
    Planned(1, TrialStatus.COMPLETED, (Attempt(range(1, 10), 90.0),),
            (Decision(1, "continue", 1), Decision(1, "continue", 3))),
    Planned(2, TrialStatus.STOPPED, (Attempt(range(1, 2), 10.0),), (Decision(1, "stop", 1),)),
    Planned(3, TrialStatus.STOPPED, (Attempt(range(1, 4), 30.0),),
            (Decision(1, "continue", 1), Decision(1, "stop", 3))),
    Planned(4, TrialStatus.COMPLETED, (Attempt(range(1, 2), 10.0), Attempt(range(2, 10), 80.0)),
            (Decision(1, "stop", 1), Decision(1, "promote", 1), Decision(2, "continue", 3))),
    Planned(5, TrialStatus.STOPPED, (Attempt(range(1, 2), 10.0), Attempt(range(2, 4), 20.0)),
            (Decision(1, "stop", 1), Decision(1, "promote", 1), Decision(2, "stop", 3))),
    Planned(6, TrialStatus.FAILED, (Attempt(range(1, 3), 5.0),),
            failure=FailureClass.NONZERO_EXIT),
)

CAMPAIGN = {
    "campaign": {"name": "es", "max_parallelism": 2},
    "space": {"x": {"type": "int", "low": 0, "high": 99}},
    "objectives": [{"metric": "loss"}],
    "stopping": {"rule": "asha", "max_step": MAX_STEP, "asha": {"reduction_factor": 3}},
}


def loss(number: int, step: int) -> float:
    return number / step


def build(workspace: Path) -> int:
    """Write the run of :data:`PLAN` to the record in *workspace*; return its id."""
    camp = dse.campaign_from_dict(CAMPAIGN, workspace=workspace)
    spec = campaign_spec(camp)
    spec[RESOLVED_SCORER] = {"name": "default", "version": dse.__version__,
                             "direction": "minimize"}
    store = dse.Store(workspace / "dse.sqlite")
    try:
        run = store.create_campaign(name="es", source=None, spec=spec, agent="list==1",
                                    backend="probe==1", mode="rolling", max_parallelism=2,
                                    now=T0)
        batch = Batch()
        for plan in PLAN:
            _trial(store, batch, run, plan)
        batch.end_campaign(campaign=run, status=dse.CampaignStatus.COMPLETED, reason="done",
                           ended_at=T0 + 3600.0)
        store.commit(batch)
    finally:
        store.close()
    return run


def _trial(store: dse.Store, batch: Batch, run: int, plan: Planned) -> None:
    row = store.new_trial_id()
    n = plan.number
    batch.add_trial(row=row, campaign=run, number=n, proposal=n, wave=n,
                    config_hash=f"hash-{n}", params_json=json.dumps({"x": n}),
                    status=TrialStatus.RUNNING, created_at=T0 + n, trial_dir=f"/trials/{n}")
    at = T0 + 10.0 * n
    last = 0
    for i, attempt in enumerate(plan.attempts, 1):
        attempt_row = store.new_attempt_id()
        batch.add_attempt(row=attempt_row, trial=row, attempt=i, backend="probe",
                          state=AttemptState.RUNNING, submitted_at=at, resumed=i > 1)
        for step in attempt.steps:
            batch.add_progress(row=row, attempt=i, step=step,
                               metrics=json.dumps({"loss": loss(n, step)}), at=at + step)
            last = step
        seconds = attempt.seconds
        state = AttemptState.FAILED if plan.failure else (
            AttemptState.CANCELLED if plan.status is TrialStatus.STOPPED or i < len(
                plan.attempts) else AttemptState.SUCCEEDED)
        batch.end_attempt(row=attempt_row, state=state, started_at=at, ended_at=at + seconds,
                          spend={"wall_s": seconds, "cpu_s": seconds, "gpu_s": 0.0,
                                 "node_s": seconds, "money": seconds / 100.0})
        for d in plan.decisions:
            if d.attempt == i:
                step = d.rung
                batch.add_decision(
                    campaign=run, row=row, attempt=i, rule="asha", version="1",
                    verdict=d.verdict, rung=d.rung, step=step, value=loss(n, step),
                    cutoff=d.cutoff, peers=len(plan.peers), compared=json.dumps(plan.peers),
                    reason=f"{d.verdict} at rung {d.rung}", bracket=None, at=at + step + 0.5)
        at += seconds + 1.0
    # As the engine records them: a stopped trial has its last point's metrics and step, and
    # no score (its result is partial).
    metrics = {"loss": loss(n, last)}
    stopped = plan.status is TrialStatus.STOPPED
    score = None if plan.failure or stopped else metrics["loss"]
    batch.end_trial(row=row, status=plan.status, ended_at=at, failure=plan.failure,
                    metrics=None if plan.failure else metrics, score=score,
                    step=last if stopped else None,
                    message=f"stopped at step {last}" if stopped else None)


def curves_of(tmp_path: Path) -> Any:
    """The learning curves the HTML report reads of the record :func:`build` makes."""
    run = build(tmp_path / "ws")
    store = dse.Store(tmp_path / "ws" / "dse.sqlite")
    try:
        spec = store.reads.campaign(run).spec  # type: ignore[union-attr]
        trials = [{"row": t.id, "number": t.number, "status": t.status.value,
                   "score": t.score, "cached": t.cache_of is not None, "valid": True}
                  for t in store.reads.trials(run)]
        return learning_curves(store, run, spec, trials)
    finally:
        store.close()
