"""The runs of search_quality.py: one task (a method on a problem in a setting with a seed),
dse's side of it (the real engine on the probe, in virtual time), the log each finished run is
appended to, and the timing of the bayesian agent's ``propose``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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
from dse.testing import FakeClock, ProbeBackend, ProbeScript

Mode = Literal["waves", "rolling"]

WORK_DIR = Path(__file__).resolve().parent / ".work"
# Longer than any trial: the probe's wait then jumps the fake clock straight to the next end,
# so each polling pass sees exactly the trials that ended (an event simulation, like the
# peers').
POLL_INTERVAL_S = 1e6
LATENCY_OBSERVATIONS = 1_000
LATENCY_BATCH = 4
LATENCY_OWN_POINTS = 64


@dataclass(frozen=True, slots=True)
class Setting:
    parallelism: int
    mode: Mode

    @property
    def label(self) -> str:
        return "P=1" if self.parallelism == 1 else f"P={self.parallelism} {self.mode}"


SETTINGS = {s.label: s for s in (Setting(1, "waves"), Setting(4, "waves"), Setting(4, "rolling"))}


@dataclass(frozen=True, slots=True)
class Task:
    method: str
    problem: str
    setting: str
    """A key of :data:`SETTINGS`."""
    budget: int
    seed: int

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        return (self.method, self.problem, self.setting, self.budget, self.seed)


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

def _campaign(task: Task, agent: str, problem: Problem, workspace: Path) -> Any:
    setting = SETTINGS[task.setting]
    return dse.campaign_from_dict(
        {
            "campaign": {
                "name": f"{task.problem}-{agent}",
                "agent": agent,
                "mode": setting.mode,
                "max_parallelism": setting.parallelism,
                "max_trials": task.budget,
                "seed": task.seed,
                "poll_interval": POLL_INTERVAL_S,
            },
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

    WORK_DIR.mkdir(exist_ok=True)  # a fresh checkout has none (it is not in git)
    with tempfile.TemporaryDirectory(prefix=f"dse-quality-{task.problem}-", dir=WORK_DIR) as tmp:
        workspace = Path(tmp)
        clock = FakeClock()
        store = dse.Store(workspace / "dse.sqlite")
        try:
            engine = dse.build_engine(
                _campaign(task, agent, problem, workspace),
                store=store,
                plugins=plugins(),
                clock=clock,
                backend=ProbeBackend(script, clock=clock),
            )
            result = engine.run()
            rows = store.trials(result.campaign_id)
        finally:
            store.close()
    what = f"dse {agent} on {task.problem} ({task.setting}, seed {task.seed})"
    if result.status != "completed":
        raise BenchmarkError(f"{what}: ended {result.status} ({result.end_reason})")
    evaluated: Evaluated = []
    for row in rows:
        metrics = row.metrics or {}
        ok = row.status in (dse.TrialStatus.COMPLETED, dse.TrialStatus.CACHED)
        ok = ok and "value" in metrics
        evaluated.append((row.params, float(metrics["value"]) if ok else None))
    if len(evaluated) != task.budget:
        raise BenchmarkError(
            f"{what}: {len(evaluated)} trials recorded, expected {task.budget}"
            f" ({result.end_reason})"
        )
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


def _digest(files: list[Path], extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def code_digests() -> dict[str, str]:
    """Digests of the code each side of a run measures: ``"dse"``, the benchmark's modules
    that define and run the problems and the peers (not search_quality.py, which only chooses
    the tasks and reports) and the dse and dse_agents sources imported; ``"peers"``, the
    modules that define the problems and drive the peers (``_peers.py``, ``_sq_problems.py``,
    ``_sq_peers.py``) and the versions of the peers' packages. A peer's run does not depend on
    dse's code, so changing dse keeps the peers' runs of a log (hours of Ax) and reruns dse's."""
    import importlib.metadata

    import dse_agents

    here = Path(__file__).resolve().parent
    bench = [here / "_peers.py", *sorted(here.glob("_sq_*.py"))]
    sources: list[Path] = []
    for root in (Path(dse.__file__).resolve().parent, Path(dse_agents.__file__).resolve().parent):
        sources += sorted(root.rglob("*.py"))
    versions = []
    for name in PEER_PACKAGES:
        try:
            versions.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} absent")
    drive = [here / "_peers.py", here / "_sq_problems.py", here / "_sq_peers.py"]
    return {"dse": _digest(bench + sources), "peers": _digest(drive, " ".join(versions))}


def side(method: str) -> str:
    """Which of :func:`code_digests` a method's runs depend on."""
    return "dse" if method.startswith("dse ") else "peers"


class RunLog:
    """A JSON-lines file: a header (the code digests of :func:`code_digests`), then one line
    per finished run, flushed as it ends.

    Resumed, the log keeps each run whose side's digest is today's (whatever tasks it was
    written for: runs are keyed by task) and rewrites itself without the others, which are
    run again: after a change to dse, its runs are redone and the peers' kept."""

    def __init__(self, path: Path, header: dict[str, Any], resume: bool) -> None:
        self.path = path
        self.done: dict[tuple[str, str, str, int, int], RunResult] = {}
        self.dropped = 0
        if resume:
            self._read(header)
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = list(self.done.values())
        self._file = path.open("w", encoding="utf-8")
        self._write({"header": header})
        for result in kept:
            self.add(result)

    def _read(self, header: dict[str, Any]) -> None:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise BenchmarkError(f"cannot read {self.path}: {exc}") from None
        first = json.loads(lines[0]).get("header") if lines else None
        theirs = first.get("code") if isinstance(first, dict) else None
        if not isinstance(theirs, dict):
            raise BenchmarkError(
                f"{self.path} is not a search_quality log with per-side code digests; not"
                " resumed"
            )
        ours = header["code"]
        for result in self.results(self.path):
            part = side(result.task.method)
            if theirs.get(part) == ours[part]:
                self.done[result.task.key] = result
            else:
                self.dropped += 1

    @staticmethod
    def results(path: Path) -> list[RunResult]:
        """The runs in the log at *path* (whatever its header)."""
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise BenchmarkError(f"cannot read {path}: {exc}") from None
        out = []
        for line in lines[1:]:
            try:
                out.append(RunResult.from_json(json.loads(line)["run"]))
            except (ValueError, KeyError, TypeError):
                continue  # the line being written when the run was interrupted
        return out

    def _write(self, data: dict[str, Any]) -> None:
        self._file.write(json.dumps(data) + "\n")
        self._file.flush()

    def add(self, result: RunResult) -> None:
        self._write({"run": result.to_json()})

    def close(self) -> None:
        self._file.close()


# -- latency -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Latency:
    problem: str
    parameters: int
    observe_s: float
    """Seconds of the one ``observe`` call with the 1,000 observations."""
    propose_s: tuple[float, ...]
    """Seconds of each timed ``propose(4, [])`` batch."""


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
    number = LATENCY_OBSERVATIONS
    for _ in range(batches):
        start = time.perf_counter()
        proposals = instance.propose(LATENCY_BATCH, [])
        timings.append(time.perf_counter() - start)
        batch = []
        for params in proposals:
            number += 1
            batch.append(_observation(problem, space.coerce(params), number, rng))
        instance.observe(batch)
    return Latency(problem.key, len(problem.space), observe_s, tuple(timings))


def sanity_check(methods: list[str]) -> None:
    """Fail before the runs when a method's package is missing."""
    if AX_METHOD in methods:
        import_ax()
