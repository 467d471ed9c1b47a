"""The runs of search_quality.py: one task (a method on a problem in a setting with a seed),
dse's side of it (the real engine on the probe, in virtual time: ``_bench.py``), the log each
finished run is appended to, and the timing of the bayesian agent's ``propose``."""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _bench import (
    SETTINGS,
    ResumableLog,
    Task,
    campaign_table,
    digest,
    dse_sources,
    run_campaign,
    versions,
)
from _bench import side as side  # re-exported: which side of the log a method's runs are on
from _peers import BenchmarkError, plugins
from _sq_peers import AX_METHOD, import_ax, quiet_optuna, run_peer
from _sq_problems import (
    PROBLEMS,
    Evaluated,
    Evaluator,
    Params,
    Problem,
    best_point,
    found_regret,
    repeats,
    simple_regret,
)

import dse
from dse.testing import ProbeScript

LATENCY_OBSERVATIONS = 1_000
LATENCY_BATCH = 4
LATENCY_OWN_POINTS = 64


@dataclass(frozen=True, slots=True)
class RunResult:
    task: Task
    regret: float
    found: float
    """Regret of the best point evaluated, without noise (:func:`found_regret`)."""
    trials: int
    failed: int
    repeats: int
    """Points near an earlier one (see :func:`repeats`)."""
    exact_repeats: int
    """Points equal to an earlier one."""
    seconds: float
    edge: float | None
    """Distance of the chosen point to the failure region's edge (problems with failures)."""
    batch_ask_s: tuple[float, ...] = ()
    """Seconds of each ask for several trials (peers only)."""
    single_ask_s: tuple[float, ...] = ()
    """Seconds of each ask for one trial (peers only)."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        fields = dict(data)
        fields["task"] = Task(**fields["task"])
        fields["batch_ask_s"] = tuple(fields.get("batch_ask_s", ()))
        fields["single_ask_s"] = tuple(fields.get("single_ask_s", ()))
        return cls(**fields)


# -- dse -----------------------------------------------------------------------------------

ADAPTED = {"optuna TPE": ("TPESampler", {"multivariate": True}),
           "optuna TPE indep": ("TPESampler", {"multivariate": False}),
           "optuna random": ("RandomSampler", {})}
"""Optuna's samplers run through dse (``agent = "optuna"``, dse-agents[optuna]) as the peer of
the same name runs them natively: the same sampler and options (``constant_liar`` at P > 1)
and seed; what dse adds or loses shows as the difference between the two. ``dse ax`` (``agent =
"ax"``, dse-agents[ax]) needs no options: Ax's defaults and the seed, as the ``ax botorch``
peer runs it."""


def _campaign(task: Task, agent: str, problem: Problem, workspace: Path) -> dse.Campaign:
    table = campaign_table(task, agent)
    options: dict[str, Any] = {}
    if agent in ADAPTED:
        sampler, kwargs = ADAPTED[agent]
        if sampler == "TPESampler":
            kwargs = {**kwargs, "constant_liar": SETTINGS[task.setting].parallelism > 1}
        table["agent"] = "optuna"
        table["name"] = f"{task.problem}-optuna"
        options = {"optuna": {"sampler": sampler, "options": kwargs}}
    return dse.campaign_from_dict(
        {
            "campaign": table,
            "agent": options,
            "space": dict(problem.space),
            "objectives": [{"metric": "value", "direction": "minimize"}],
        },
        workspace=workspace,
    )


def run_dse(task: Task, agent: str) -> Evaluated:
    """One campaign through dse's engine; return (params, observed value) per trial."""
    problem = PROBLEMS[task.problem]
    evaluate = Evaluator(problem, task.seed)

    def script(params: Params) -> ProbeScript:
        outcome = evaluate(params)
        if outcome.observed is None:
            return ProbeScript(state=dse.JobState.FAILED, exit_code=1, seconds=outcome.seconds)
        return ProbeScript(metrics={"value": outcome.observed}, seconds=outcome.seconds)

    rows = run_campaign(
        task, agent, lambda workspace: _campaign(task, agent, problem, workspace), script,
        "dse-quality",
    )
    evaluated: Evaluated = []
    for row in rows:
        metrics = row.metrics or {}
        ok = row.status in (dse.TrialStatus.COMPLETED, dse.TrialStatus.CACHED)
        ok = ok and "value" in metrics
        evaluated.append((row.params, float(metrics["value"]) if ok else None))
    return evaluated


# -- one task ------------------------------------------------------------------------------


def init_worker(with_gp: bool, with_ax: bool) -> None:
    """Load the plugins, Optuna, torch and Ax before the first run, so no run pays for it."""
    if not plugins().agents:
        raise BenchmarkError("no dse agent is registered: install packages/agents")
    quiet_optuna()
    if with_gp:
        import torch  # noqa: F401
    if with_ax:
        import_ax()


def run_task(task: Task) -> RunResult:
    start = time.perf_counter()
    timings: list[tuple[float, ...]] = [(), ()]

    def on_timing(batch: list[float], single: list[float]) -> None:
        timings[:] = [tuple(round(s, 4) for s in batch), tuple(round(s, 4) for s in single)]

    if task.method.startswith("dse "):
        evaluated = run_dse(task, task.method.removeprefix("dse "))
    else:
        setting = SETTINGS[task.setting]
        evaluated = run_peer(
            task.method, PROBLEMS[task.problem], task.seed, task.budget, setting.parallelism,
            setting.mode == "rolling", on_timing,
        )
    seconds = time.perf_counter() - start
    problem = PROBLEMS[task.problem]
    near, exact = repeats(problem, [params for params, _ in evaluated])
    best = best_point(evaluated)
    edge = None if problem.edge is None or best is None else problem.edge(best)
    return RunResult(
        task=task,
        regret=simple_regret(problem, evaluated),
        found=found_regret(problem, evaluated),
        trials=len(evaluated),
        failed=sum(value is None for _, value in evaluated),
        repeats=near,
        exact_repeats=exact,
        seconds=round(seconds, 3),
        edge=None if edge is None else round(edge, 5),
        batch_ask_s=timings[0],
        single_ask_s=timings[1],
    )


# -- the log of finished runs --------------------------------------------------------------


PEER_PACKAGES = ("optuna", "ax-platform", "botorch", "torch", "numpy", "scipy")


def code_digests() -> dict[str, str]:
    """Digests of the code each side of a run measures: ``"dse"``, the benchmark's modules
    that define and run the problems and the peers (with ``_bench.py``; not search_quality.py,
    which only chooses the tasks and reports) and the dse and dse_agents sources imported;
    ``"peers"``, the modules that define the problems and drive the peers (``_peers.py``,
    ``_sq_problems.py``, ``_sq_peers.py``) and the versions of the peers' packages. A peer's
    run does not depend on dse's code, so changing dse keeps the peers' runs of a log (hours
    of Ax) and reruns dse's."""
    here = Path(__file__).resolve().parent
    bench = [here / "_peers.py", here / "_bench.py", *sorted(here.glob("_sq_*.py"))]
    drive = [here / "_peers.py", here / "_sq_problems.py", here / "_sq_peers.py"]
    return {"dse": digest(bench + dse_sources()), "peers": digest(drive, versions(PEER_PACKAGES))}


class RunLog(ResumableLog[RunResult], benchmark="search_quality", load=RunResult.from_json):
    """search_quality's log of finished runs, its header :func:`code_digests`."""


# -- latency -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Latency:
    problem: str
    parameters: int
    observe_s: float
    """Seconds of the one ``observe`` call with the 1,000 observations."""
    propose_s: tuple[float, ...]
    """Seconds of each timed ``propose(4, [])`` batch."""
    propose_cpu_s: tuple[float, ...]
    """CPU seconds of each (this process's, all threads): the figure a loaded machine moves
    least."""


def _observation(
    problem: Problem, params: Params, number: int, rng: random.Random
) -> dse.Observation:
    if not problem.feasible(params):
        return dse.Observation(
            params=params,
            status=dse.TrialStatus.FAILED,
            trial_number=number,
            failure=dse.FailureClass.NONZERO_EXIT,
        )
    value = problem.f(params) + (rng.gauss(0.0, problem.noise_sd) if problem.noise_sd else 0.0)
    return dse.Observation(
        params=params,
        status=dse.TrialStatus.COMPLETED,
        metrics={"value": value},
        score=value,
        trial_number=number,
    )


def measure_latency(agent: str, problem: Problem, batches: int = 3) -> Latency:
    space = dse.Space.from_dict(dict(problem.space))
    instance = plugins().agent_class(agent)(space, seed=0)
    rng = random.Random(f"latency:{problem.key}")
    # As in a campaign, the agent's own first proposals (its start-up design) are among the
    # observations; without this the timed batches could still come from that design.
    points: list[Params] = []
    while len(points) < LATENCY_OWN_POINTS:
        got = instance.propose(LATENCY_BATCH, [])
        if not got:
            break
        points.extend(space.coerce(params) for params in got)
    while len(points) < LATENCY_OBSERVATIONS:
        points.append(space.sample(rng))
    history = [_observation(problem, params, i + 1, rng) for i, params in enumerate(points)]
    start = time.perf_counter()
    instance.observe(history)
    observe_s = time.perf_counter() - start
    timings: list[float] = []
    cpu: list[float] = []
    number = LATENCY_OBSERVATIONS
    for _ in range(batches):
        start, start_cpu = time.perf_counter(), time.process_time()
        proposals = instance.propose(LATENCY_BATCH, [])
        timings.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        batch = []
        for params in proposals:
            number += 1
            batch.append(_observation(problem, space.coerce(params), number, rng))
        instance.observe(batch)
    return Latency(problem.key, len(problem.space), observe_s, tuple(timings), tuple(cpu))


def sanity_check(methods: list[str]) -> None:
    """Fail before the runs when a method's package is missing."""
    if AX_METHOD in methods or "dse ax" in methods:
        import_ax()
