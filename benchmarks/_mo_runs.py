"""The runs of multi_objective.py: one task (a method on a problem in a setting with a seed),
dse's side of it (a Pareto campaign through the real engine on the probe, in virtual time:
``_bench.py``), the peers' side, and the log each finished run is appended to."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _bench import (
    SETTINGS,
    ResumableLog,
    Task,
    campaign_table,
    describe,
    digest,
    dse_sources,
    run_campaign,
    versions,
)
from _mo_peers import OPTUNA_SAMPLERS, run_peer
from _mo_problems import PROBLEMS, Evaluated, Evaluator, Params, Problem, hypervolume
from _peers import BenchmarkError, plugins
from _sq_peers import quiet_optuna

import dse
from dse.testing import ProbeScript

DSE_METHODS = ("dse bayesian", "dse random")
PEER_METHODS = tuple(OPTUNA_SAMPLERS)
ALL_METHODS = (*DSE_METHODS, *PEER_METHODS)


@dataclass(frozen=True, slots=True)
class RunResult:
    task: Task
    losses: tuple[tuple[float, ...], ...]
    """The objective values of every trial, in the order they were told (the log keeps
    them, not the hypervolume: a change to how a run is scored needs no run again)."""
    seconds: float
    """Wall time of the run: the method's work (a peer's asks and tells, dse's engine,
    agent and record) and the evaluations (microseconds)."""

    @property
    def problem(self) -> Problem:
        return PROBLEMS[self.task.problem]

    @property
    def hypervolume(self) -> float:
        """Of every point the run evaluated, with the problem's reference point."""
        return hypervolume(self.losses, self.problem.reference)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        losses = tuple(tuple(float(x) for x in v) for v in data["losses"])
        return cls(**{**data, "task": Task(**data["task"]), "losses": losses})


# -- dse -----------------------------------------------------------------------------------


def campaign(task: Task, agent: str, problem: Problem, workspace: Path) -> dse.Campaign:
    return dse.campaign_from_dict(
        {
            "campaign": {**campaign_table(task, agent), "objectives": "pareto"},
            "space": problem.space,
            "objectives": [{"metric": m, "direction": "minimize"} for m in problem.metrics],
        },
        workspace=workspace,
    )


def run_dse(task: Task, agent: str) -> Evaluated:
    """One Pareto campaign through dse's engine; the params and objective values of each
    trial, as recorded."""
    problem = PROBLEMS[task.problem]
    evaluate = Evaluator(problem, task.seed)

    def script(params: Params) -> ProbeScript:
        outcome = evaluate(params)
        metrics = dict(zip(problem.metrics, outcome.losses, strict=True))
        return ProbeScript(metrics=metrics, seconds=outcome.seconds)

    rows = run_campaign(
        task, agent, lambda workspace: campaign(task, agent, problem, workspace), script,
        "dse-mo",
    )
    evaluated: Evaluated = []
    for row in rows:
        metrics = row.metrics or {}
        ok = row.status in (dse.TrialStatus.COMPLETED, dse.TrialStatus.CACHED)
        if not ok or any(m not in metrics for m in problem.metrics):
            raise BenchmarkError(
                f"{describe(task, agent)}: trial {row.number} is {row.status} without metrics"
            )
        evaluated.append((row.params, tuple(float(metrics[m]) for m in problem.metrics)))
    return evaluated


# -- one task ------------------------------------------------------------------------------


def init_worker(with_gp: bool) -> None:
    """Load the plugins, Optuna and torch before the first run, so no run pays for it."""
    if not plugins().agents:
        raise BenchmarkError("no dse agent is registered: install packages/agents")
    quiet_optuna()
    if with_gp:
        import torch  # noqa: F401


def run_task(task: Task) -> RunResult:
    start = time.perf_counter()
    if task.method in DSE_METHODS:
        evaluated = run_dse(task, task.method.removeprefix("dse "))
    else:
        setting = SETTINGS[task.setting]
        evaluated = run_peer(
            task.method, PROBLEMS[task.problem], task.seed, task.budget, setting.parallelism,
            setting.mode == "rolling",
        )
    seconds = time.perf_counter() - start
    return RunResult(
        task=task,
        losses=tuple(losses for _, losses in evaluated),
        seconds=round(seconds, 3),
    )


# -- the log of finished runs --------------------------------------------------------------


PEER_PACKAGES = ("optuna", "torch", "numpy", "scipy")


def code_digests() -> dict[str, str]:
    """Digests of the code each side of a run measures: ``"dse"``, the modules that define
    and run the problems (this one, ``_bench.py``, ``_mo_problems.py`` and what they import of
    search_quality's) and the dse and dse_agents sources; ``"peers"``, the modules that
    define the problems and drive the peers (``_mo_peers.py``; not this one, which only
    records their runs) and the versions of the peers' packages. The log
    keeps each run's objective values, scored as the report is made, so a peer's run does
    not depend on dse's code: a change to dse reruns dse's runs of a resumed log and keeps
    the peers' (GPSampler's hours)."""
    here = Path(__file__).resolve().parent
    shared = [here / "_peers.py", here / "_sq_problems.py", here / "_sq_peers.py",
              here / "_mo_problems.py"]
    return {
        "dse": digest([*shared, here / "_bench.py", here / "_mo_runs.py", *dse_sources()]),
        "peers": digest([*shared, here / "_mo_peers.py"], versions(PEER_PACKAGES)),
    }


class RunLog(ResumableLog[RunResult], benchmark="multi_objective", load=RunResult.from_json):
    """multi_objective's log of finished runs, its header :func:`code_digests`."""
