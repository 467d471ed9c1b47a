"""The budget guarantee as a property (issue 6): over random trial durations, resources,
prices, failures, interruptions and retries, parallelism, modes and ceilings, spend never
exceeds a ceiling, every reservation is settled, per-trial ceilings hold across a trial's
attempts, a ceiling too small for one attempt starts nothing and one that fits lets the first
start.

Two layers check the same generated cases with the same :func:`check`:

- the **gate layer** (10,000 cases) drives :class:`dse.engine._gate.BudgetGate` through
  :class:`GateModel`, a small model of how the engine uses it: about a millisecond a case;
- the **engine layer** (a few hundred of those cases) runs each as a whole campaign through
  the engine on the timed probe, reads what it recorded from the store file, and checks that
  the engine did what the model did (same trials, attempts, spend and end), so the engine's
  use of the gate stays proven and the model stays faithful.

A third layer, the **stopping layer** (a hundred and twenty cases of their own), runs whole
campaigns with early stopping in play (``[stopping]``: asha, hyperband or median, promotion on
or off; learning curves that cross, some checkpointed, on the probe) among the same generated
ceilings, prices, failures, interruptions, retries, parallelism and modes, and checks the
same guarantee on the record, and more: the probe checks at every start that the attempt (a
promoted one too) was reserved and its worst case fit; a stopped trial is never retried as an
interruption, only promoted, resumed from its checkpoint.

Case *n* is drawn from a :class:`random.Random` seeded with *n*, so every run checks the same
cases; a failing case is named, with its full description, in the failure. (Hypothesis drew
these cases before; its ~150 draws per case cost ten times more than checking the case on the
gate.) The cases are split into shards, one test each so that ``pytest -n`` spreads them over
workers; the number of cases is printed and checked.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import random
import shutil
import sqlite3
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

import dse
from dse import JobSpec, JobState, JobStatus
from dse.engine._gate import BudgetGate
from dse.model._budget import Budget, Ledger, Price, Spend, TrialCeilings
from dse.testing import FakeClock, ProbeBackend, ProbePoint, ProbeScript, ScriptedAgent

LAYERS = {"gate": (4, 2_500), "engine": (2, 200), "stopping": (2, 60)}
"""Layer -> (shards, cases per shard). The gate layer checks cases 0 to 9,999; the engine
layer every :data:`ENGINE_STRIDE`-th of them; the stopping layer others, with early stopping
(:data:`STOPPING_OFFSET`)."""
ENGINE_STRIDE = 25
POLL_INTERVAL = 3600.0
"""The campaigns' polling interval (the probe sleeps the fake clock to the next end)."""
INTERRUPTION_WINDOW = 600.0
"""The campaigns' ``interruption_window`` (the default)."""
MAX_PASSES = 10_000
"""Polling passes (and agent calls) after which a run counts as spinning."""
TOLERANCE = 1e-6
"""Float slack on every comparison with a ceiling (sums of products of floats)."""
UNFINISHED = ("submitting", "submitted", "pending", "running")
FRESH = 1_000
"""The first ``x`` an endless agent proposes after its script."""

T = TypeVar("T")

_END_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.PREEMPTED, JobState.NODE_FAIL)


# -- the generated cases -----------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    """One generated campaign: what it proposes, how each attempt behaves, its ceilings."""

    proposals: tuple[int, ...]
    """``x`` of each proposal; a repeated ``x`` is a cache hit (or waits for the original)."""
    endless: bool
    """After *proposals* the agent goes on with new configurations for ever (only with a
    trials ceiling or ``max_trials``, the ceilings that bound such a campaign on their own)."""
    scripts: Mapping[int, tuple[ProbeScript, ...]]
    """``x`` → the scripts of attempts 1, 2, ... (the last one repeats)."""
    resources: Mapping[int, tuple[int, int]]
    """``x`` → (CPUs, GPUs) of a trial that does not use the campaign's resources."""
    time_limit: float | None
    cpus: int
    gpus: int
    price: Price
    mode: str
    parallelism: int
    max_trials: int | None
    max_interruptions: int
    interruption_threshold: int
    budget: Budget
    overrun_s: float
    """How long past its time limit the backend lets an attempt run."""
    stopping: Mapping[str, Any] | None = None
    """The campaign's ``[stopping]`` table (the stopping layer's cases; their scripts carry
    learning curves)."""
    races: int = 0
    """The stopping layer: every *races*-th cancel the backend is asked for comes as the job is
    preempted, which ends it instead (0: never)."""

    def like(self, x: int) -> int:
        """The scripted ``x`` whose behaviour and resources a proposal ``x`` has."""
        return x if x < FRESH else x % len(self.scripts)

    def attempt_script(self, x: int, attempt: int) -> ProbeScript:
        """How attempt *attempt* (from 1) of a trial of *x* behaves (the last script
        repeats), as the probe plays it."""
        scripts = self.scripts[self.like(x)]
        return scripts[min(attempt, len(scripts)) - 1]


class Draw:
    """Draws the parts of one case from a :class:`random.Random` seeded with its name."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def one_in(self, n: int) -> bool:
        return self.rng.randrange(n) == 0

    def seconds(self, low: float, high: float) -> float:
        """Round numbers (exact ties with a ceiling) as well as arbitrary floats, and now and
        then an edge: a bound, the float next to it, or a tiny or subnormal amount."""
        kind = self.rng.randrange(10)
        if kind < 4:
            return float(self.rng.randint(math.ceil(low), math.floor(high)))
        if kind == 4:
            edges = [low, high, math.nextafter(low, high), math.nextafter(high, low)]
            if low == 0.0:
                edges += [5e-324, 2.2e-308, 1e-300, 1e-12]
            return self.choice(edges)
        return self.rng.uniform(low, high)

    def hours(self, low_s: float, high_s: float) -> float:
        return self.seconds(low_s, high_s) / 3600

    def rate(self) -> float:
        return self.choice([0.0, 0.5, 3.6, 36.0]) if self.one_in(2) else self.seconds(0.0, 50.0)

    def unit(self) -> str:
        return self.choice(["cpu", "gpu", "node"])

    def attempt(self) -> tuple[JobState, float]:
        # Mostly short, sometimes up to 60 s against time limits of at most 30 s: some
        # attempts run into their limit.
        state = self.choice(_END_STATES)
        return state, self.seconds(0.0, 10.0) if self.one_in(2) else self.seconds(0.0, 60.0)

    def trials(self) -> int | None:
        return None if self.one_in(2) else self.integer(0, 12)

    def sometimes(self, draw: Callable[[], T]) -> T | None:
        # Each per-trial ceiling in one case of three: together they often leave little time.
        return draw() if self.one_in(3) else None

    def ceiling(self, draw: Callable[[], float]) -> float | None:
        # A campaign ceiling in one case of two, and zero (nothing may start) now and then.
        kind = self.integer(0, 19)
        return None if kind < 10 else 0.0 if kind == 10 else draw()


def _script(x: int, state: JobState, seconds: float) -> ProbeScript:
    metrics = {"value": float(x)} if state is JobState.SUCCEEDED else None
    return ProbeScript(seconds=seconds, state=state, metrics=metrics)


def scenario(number: int) -> Scenario:
    """Generated case *number* (the same case on every run)."""
    draw = Draw(f"dse-budget-property-{number}")
    distinct = draw.integer(1, 12)
    proposals = tuple(draw.integer(0, distinct - 1) for _ in range(draw.integer(1, 12)))
    scripts = {
        x: tuple(_script(x, *draw.attempt()) for _ in range(draw.integer(1, 4)))
        for x in range(distinct)
    }
    # One trial in four asks for resources of its own (an environment may set them per trial).
    resources = {
        x: (draw.integer(1, 8), draw.integer(0, 4)) for x in range(distinct) if draw.one_in(4)
    }
    # Rarely no time limit: then only the trials and a cancelling wall-clock ceiling apply.
    no_limit = draw.one_in(8)
    # One attempt's worst case is at most 30 s x 8 CPUs = 240 cpu-seconds (and 30 s x 36
    # USD/h x 13 units = 3.9 USD), so these ceilings sometimes bind at once, sometimes never.
    trial = TrialCeilings(
        wall_s=draw.sometimes(lambda: draw.seconds(0.5, 40.0)),
        compute=draw.sometimes(lambda: (draw.unit(), draw.hours(1.0, 300.0))),
        money=draw.sometimes(lambda: draw.seconds(0.001, 5.0)),
    )
    compute_hours = draw.ceiling(lambda: draw.hours(1.0, 2000.0))
    trials, max_trials = draw.trials(), draw.trials()
    bounded = trials is not None or max_trials is not None
    return Scenario(
        proposals=proposals,
        endless=bounded and draw.one_in(2),
        scripts=scripts,
        resources=resources,
        time_limit=None if no_limit else (
            draw.seconds(0.5, 30.0) if draw.one_in(2) else draw.seconds(10.0, 30.0)),
        cpus=draw.integer(1, 8),
        gpus=draw.integer(0, 4),
        price=Price(cpu_hour=draw.rate(), gpu_hour=draw.rate(), node_hour=draw.rate()),
        mode=draw.choice(["waves", "rolling"]),
        parallelism=draw.integer(1, 8),
        max_trials=max_trials,
        max_interruptions=draw.integer(0, 3),
        interruption_threshold=draw.integer(1, 10),
        budget=Budget(
            trials=trials,
            wall_clock_s=draw.ceiling(lambda: draw.seconds(1.0, 200.0)),
            compute=None if compute_hours is None else (draw.unit(), compute_hours),
            money=draw.ceiling(lambda: draw.seconds(0.01, 10.0)),
            currency="USD",
            on_deadline=draw.choice(["cancel", "finish"]),
            trial=trial,
        ),
        overrun_s=0.0 if draw.one_in(2) else draw.seconds(0.0, 5.0),
    )


# -- what a run left: both layers are checked on this --------------------------------------

@dataclass(frozen=True)
class Charged:
    """One attempt's settled spend."""

    trial: int
    """The trial it belongs to (a key unique within the run)."""
    spend: Spend
    ended_at: float
    reserved: Spend | None = None
    """What the gate reserved for it (the gate layer knows; the record does not keep it)."""


@dataclass(frozen=True)
class Record:
    """How a run of one case ended, what it dispatched and what each attempt spent."""

    refusal: str | None = None
    """The configuration error that refused the campaign before it started."""
    status: str = ""
    end_reason: str = ""
    started: float = 0.0
    ended: float = 0.0
    clock: float = 0.0
    """The clock when the run was over."""
    dispatched: frozenset[int] = frozenset()
    """Trials that got an attempt (those the trials ceiling counts)."""
    attempts: tuple[Charged, ...] = ()
    spent: Spend = field(default_factory=Spend)
    """What the gate's ledger says was spent."""
    reserved: Spend = field(default_factory=Spend)
    """What the gate's ledger still holds in reservations."""


# -- the gate layer: the engine's use of the gate, modelled --------------------------------

@dataclass(eq=False)
class ModelTrial:
    number: int
    x: int
    spec: JobSpec
    """As the environment prepares it: the environment's time limit, the trial's resources."""
    attempt: int = 1
    interruptions: int = 0
    spent: Spend = field(default_factory=Spend)


@dataclass(eq=False)
class ModelAttempt:
    trial: ModelTrial
    spec: JobSpec
    """With the time limit the per-trial ceilings leave it."""
    reserved: Spend
    started: float
    ends: float
    """When the backend ends it: its duration, cut at its limit plus the overrun (before it
    started when the per-trial ceilings leave a trial of its resources less than nothing)."""
    state: JobState

    @property
    def due(self) -> float:
        return max(self.ends, self.started)


_INTERRUPTED = (JobState.PREEMPTED, JobState.NODE_FAIL)
_REUSABLE = (JobState.SUCCEEDED, JobState.FAILED)
"""Ends whose trial (completed or failed) later proposals of its configuration reuse."""


class GateModel:
    """The engine's use of the budget gate in one campaign, on a clock that jumps from one
    attempt's end to the next (the timed probe's): before a pull, how many new trials the
    gate affords; each new trial reserves its worst case at the time limit the per-trial
    ceilings leave it (``new_trial=True``) and is not dispatched when refused; an attempt runs
    its scripted duration, cut at its limit plus the backend's overrun (ended ``timeout``),
    and is charged and settled when it ends; an interrupted one is retried, up to
    ``max_interruptions``, at what its trial's ceilings leave (``new_trial=False``), and
    retries that do not fit while nothing runs are given up; at the wall-clock ceiling
    dispatch stops, and with ``cancel`` what runs is cancelled (charged up to then). A repeated
    configuration reuses a completed or failed trial, or waits for a running one, at no cost.
    Dispatch pauses while ``interruption_threshold`` interruptions are in the window; paused
    with nothing running, the clock sleeps a polling interval or to the deadline. Not
    modelled (it moves neither time nor money on the probe): node avoidance."""

    def __init__(self, case: Scenario) -> None:
        self.case = case
        self.gate = BudgetGate(case.budget, case.price, overrun_s=case.overrun_s)
        self.environment = dse.EnvironmentConfig(
            time_limit=case.time_limit, resources=dse.Resources(case.cpus, case.gpus))
        fresh = itertools.count(FRESH) if case.endless else iter(())
        self.agent: Iterator[int] = itertools.chain(case.proposals, fresh)
        self.numbers = itertools.count(1)
        self.now = 0.0
        self.running: list[ModelAttempt] = []
        self.retries: list[ModelTrial] = []
        self.known: set[int] = set()
        """Configurations a new proposal reuses (they ended completed or failed) or waits for
        (they run)."""
        self.steps = 0
        self.hits = 0
        """Cache hits of ended trials taken in the current fill (told before the next)."""
        self.blocked = False
        """The gate refused a trial in the current fill."""
        self.done: str | None = None
        self.stopping = False
        self.interruptions: deque[float] = deque()
        self.paused = False
        self.dispatched: set[int] = set()
        self.charged: list[Charged] = []

    def run(self) -> Record:
        try:
            self.gate.check(self.environment, where="<campaign>")
        except dse.ConfigError as exc:
            return Record(refusal=str(exc))
        self.gate.open(0.0)
        for _ in range(MAX_PASSES):
            self.check_deadline()
            if self.stopping:
                self.cancel_all()
                break
            self.check_pause()
            if not self.paused or (self.done == "budget_exhausted" and not self.running):
                # Past the wall-clock ceiling a paused campaign still ends its waiting retries.
                self.admit_retries()
                self.refill()
            if self.idle() and not (self.paused and not self.done):
                break
            self.advance()
        else:
            raise Spinning(f"the model still ran after {MAX_PASSES} passes")
        reason = self.done or "agent_exhausted"
        return Record(
            status="budget_exhausted" if reason == "budget_exhausted" else "completed",
            end_reason=reason, started=0.0, ended=self.now, clock=self.now,
            dispatched=frozenset(self.dispatched), attempts=tuple(self.charged),
            spent=self.gate.spent, reserved=self.gate.reserved,
        )

    def idle(self) -> bool:
        return not self.running and not self.retries

    def check_deadline(self) -> None:
        deadline = self.gate.deadline
        if deadline is None or self.now < deadline or self.done == "budget_exhausted":
            return
        if self.done is not None and not self.idle():
            self.done = None  # work was left when the clock ran out: that is why it ended
        self.done = self.done or "budget_exhausted"
        if self.case.budget.on_deadline == "cancel" and self.running:
            self.stopping = True

    def check_pause(self) -> None:
        window = self.interruptions
        while window and window[0] < self.now - INTERRUPTION_WINDOW:
            window.popleft()
        self.paused = len(window) >= self.case.interruption_threshold

    def refill(self) -> None:
        case = self.case
        while not self.done:
            busy = len(self.running) + len(self.retries)
            if case.mode == "waves" and busy:
                return
            slots = case.parallelism - busy
            self.hits, self.blocked = 0, False
            if slots > 0:
                self.fill(slots)
            if self.blocked or not self.hits:
                return  # else the cache hits' results are told, and the agent asked again

    def fill(self, slots: int) -> int:
        """Pull proposals until *slots* are taken by trials and cache hits (or none may);
        how many were."""
        case, started = self.case, 0
        while slots > started and not self.done:
            if case.max_trials is not None and self.steps >= case.max_trials:
                self.done = "max_trials"
                break
            want = slots - started
            if case.max_trials is not None:
                want = min(want, case.max_trials - self.steps)
            want, _ = self.gate.affordable(want, self.now, self.environment)
            if want == 0:
                if self.idle():
                    self.done = "budget_exhausted"
                break
            proposals = list(itertools.islice(self.agent, want))
            if not proposals:
                self.done = "agent_exhausted"
                break
            for x in proposals:
                self.steps += 1
                took = self.new_trial(x)
                if took is None:
                    self.blocked = True  # refused: no more pulls until something ends
                    return started
                started += took
        return started

    def new_trial(self, x: int) -> int | None:
        """Dispatch a trial of *x*: 1 if it took a slot (it started, or it is a cache hit:
        in rolling mode one whose original ended), 0 if it waits on a running trial,
        ``None`` if the gate refused it."""
        if x in self.known:
            waits = (any(a.trial.x == x for a in self.running)
                     or any(t.x == x for t in self.retries))
            self.hits += not waits
            return 1 if self.case.mode == "waves" or not waits else 0
        case = self.case
        own = case.resources.get(case.like(x))
        resources = dse.Resources(*own) if own else self.environment.resources
        spec = JobSpec(f"t{x}", 1, {"x": x}, Path(f"t{x}"), resources=resources,
                       time_limit=case.time_limit)
        trial = ModelTrial(next(self.numbers), x, spec)
        limited = dataclasses.replace(spec, time_limit=self.gate.time_limit(spec, Spend()))
        taken = self.gate.reserve(limited, self.now, new_trial=True)
        if isinstance(taken, str):
            if self.idle():
                self.done = "budget_exhausted"
            return None
        self.dispatched.add(trial.number)
        self.known.add(x)
        self.start(trial, limited, taken)
        return 1

    def start(self, trial: ModelTrial, spec: JobSpec, reserved: Spend) -> None:
        script = self.case.attempt_script(trial.x, trial.attempt)
        assert script.seconds is not None
        run, state, limit = script.seconds, script.state, spec.time_limit
        if limit is not None and limit < run:
            run, state = min(run, limit + self.case.overrun_s), JobState.TIMEOUT
        self.running.append(
            ModelAttempt(trial, spec, reserved, self.now, self.now + run, state))

    def admit_retries(self) -> None:
        waiting = []
        for trial in self.retries:
            spec = dataclasses.replace(
                trial.spec, attempt=trial.attempt,
                time_limit=self.gate.time_limit(trial.spec, trial.spent))
            taken = self.gate.reserve(spec, self.now, new_trial=False)
            if isinstance(taken, str):
                waiting.append(trial)
            else:
                self.start(trial, spec, taken)
        if waiting and not self.running:
            # Nothing runs, so nothing will free a reservation: these retries never fit.
            for trial in waiting:
                self.known.discard(trial.x)
            waiting = []
        self.retries = waiting

    def advance(self) -> None:
        """Move the clock to the next end (or to a cancelling deadline) and settle what
        ended, in the order the attempts were submitted."""
        deadline = self.gate.deadline
        if not self.running:
            # Paused: sleep until the oldest interruption leaves the window, at least one
            # polling interval, and no further than the deadline.
            left = max(self.interruptions[0] + INTERRUPTION_WINDOW - self.now, POLL_INTERVAL)
            if deadline is not None and self.now < deadline:
                left = min(left, deadline - self.now)
            self.now += left
            return
        due = min(attempt.due for attempt in self.running)
        if deadline is not None and self.case.budget.on_deadline == "cancel" and due > deadline:
            self.now = deadline
            return
        self.now = due
        ended = [attempt for attempt in self.running if attempt.due <= due]
        self.running = [attempt for attempt in self.running if attempt.due > due]
        for attempt in ended:
            self.settle(attempt, attempt.ends)
            trial = attempt.trial
            if attempt.state in _INTERRUPTED:
                self.interruptions.append(self.now)
                if self.retry(trial):
                    continue
            if attempt.state not in _REUSABLE:
                self.known.discard(trial.x)

    def settle(self, attempt: ModelAttempt, ended_at: float) -> None:
        status = JobStatus("probe", attempt.state, started_at=attempt.started,
                           ended_at=ended_at)
        spend = self.gate.settle(attempt.reserved,
                                 self.gate.charge(attempt.spec, status, ended_at))
        attempt.trial.spent = attempt.trial.spent + spend
        self.charged.append(Charged(attempt.trial.number, spend, ended_at, attempt.reserved))

    def retry(self, trial: ModelTrial) -> bool:
        trial.interruptions += 1
        if trial.interruptions > self.case.max_interruptions:
            return False
        limit = self.gate.time_limit(trial.spec, trial.spent)
        if limit is not None and limit <= 0:
            return False  # its per-trial ceilings are spent
        trial.attempt += 1
        self.retries.append(trial)
        return True

    def cancel_all(self) -> None:
        for trial in self.retries:
            self.gate.settle(None, Spend())  # never submitted: nothing reserved or spent
            self.charged.append(Charged(trial.number, Spend(), self.now))
        for attempt in self.running:
            self.settle(attempt, self.now)
        self.retries, self.running = [], []


# -- the engine layer: the same cases as whole campaigns on the timed probe --------------

class Spinning(AssertionError):
    """The engine kept polling (or asking the agent) without ending."""


class PassGuard(dse.EngineListener):
    def __init__(self) -> None:
        self.passes = 0

    def on_pass(self, engine: dse.Engine) -> None:
        self.passes += 1
        if self.passes > MAX_PASSES:
            raise Spinning(f"still running after {MAX_PASSES} passes")


class GuardedAgent(ScriptedAgent):
    def propose(
        self, n: int, in_flight: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        if len(self.calls) >= MAX_PASSES:
            raise Spinning(f"the agent was asked {MAX_PASSES} times")
        return super().propose(n, in_flight)


class EndlessAgent(GuardedAgent):
    """Proposes *proposals*, then configurations it never proposed, for ever."""

    def __init__(self, proposals: Sequence[int], *, endless: bool) -> None:
        fresh = itertools.count(FRESH) if endless else iter(())
        super().__init__({"x": x} for x in itertools.chain(proposals, fresh))


class SizedEnvironment(dse.CommandEnvironment):
    """The campaign's environment, except that some trials ask for resources of their own."""

    def __init__(self, campaign: dse.Campaign, case: Scenario) -> None:
        super().__init__(campaign.environment, campaign.objectives,
                         param_names=campaign.space.names)
        self.case = case

    def prepare(self, info: dse.TrialInfo) -> JobSpec:
        spec = super().prepare(info)
        own = self.case.resources.get(self.case.like(info.params["x"]))
        if own is None:
            return spec
        return dataclasses.replace(spec, resources=dse.Resources(*own))


class OverrunningProbe(ProbeBackend):
    """The timed probe, except that an attempt that reaches its time limit runs on for the
    backend's ``overrun_s`` before it is ended (a grace period, a scheduler's check interval),
    as a real backend may."""

    def __init__(
        self, script: Callable[[Mapping[str, Any]], Sequence[ProbeScript]], *,
        clock: FakeClock, overrun_s: float, write_results: bool = False,
    ) -> None:
        super().__init__(script, clock=clock, write_results=write_results)
        self.overrun_s = overrun_s

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        ids = super()._submit(jobs)
        for job_id in ids:
            job = self.cluster.jobs[job_id]
            limit, seconds = job.spec.time_limit, job.script.seconds
            if limit is not None and seconds is not None and job.started_at is not None:
                run = max(seconds - job.resumed_at, 0.0)  # less what a checkpoint saved
                job.ends_at = job.started_at + min(run, limit + self.overrun_s)
        return ids


def _campaign(case: Scenario, workspace: Path) -> dse.Campaign:
    environment: dict[str, Any] = {"cpus": case.cpus, "gpus": case.gpus}
    if case.time_limit is not None:
        environment["time_limit"] = case.time_limit
    table: dict[str, Any] = {
        "name": "prop", "mode": case.mode, "max_parallelism": case.parallelism,
        "max_interruptions": case.max_interruptions,
        "interruption_threshold": case.interruption_threshold,
        "pause_on_interruptions": True,
        # The probe sleeps the fake clock to the next end, so the cadence may be long.
        "poll_interval": POLL_INTERVAL,
    }
    if case.max_trials is not None:
        table["max_trials"] = case.max_trials
    document: dict[str, Any] = {
        "campaign": table,
        "space": {"x": {"type": "int", "low": 0, "high": 10 * FRESH}},
        "objectives": [{"metric": "value"}],
        "environment": environment,
    }
    if case.stopping is not None:
        document["stopping"] = dict(case.stopping)
    camp = dse.campaign_from_dict(document, workspace=workspace)
    return dataclasses.replace(camp, budget=case.budget, price=case.price)


def run_engine(case: Scenario, root: Path, backend: OverrunningProbe | None = None) -> Record:
    """Run *case* as a campaign through the engine (on *backend*, by default a probe
    playing its scripts) and read what it recorded."""

    def script(params: Mapping[str, Any]) -> Sequence[ProbeScript]:
        return case.scripts[case.like(params["x"])]

    clock = backend.clock if isinstance(backend, WatchedProbe) else FakeClock(start=0.0)
    assert isinstance(clock, FakeClock)
    camp = _campaign(case, root)
    path = root / "dse.sqlite"
    store = dse.Store(path, durable=False)
    try:
        agent = EndlessAgent(case.proposals, endless=case.endless)
        try:
            engine = dse.Engine(
                camp, agent=agent, environment=SizedEnvironment(camp, case),
                backend=backend or OverrunningProbe(script, clock=clock,
                                                    overrun_s=case.overrun_s),
                store=store, clock=clock, listener=PassGuard(),
            )
        except dse.ConfigError as exc:
            return Record(refusal=str(exc))
        if isinstance(backend, WatchedProbe):
            backend.ledger = engine.ledger
        result = engine.run()
    finally:
        store.close()
    assert result.status in ("completed", "budget_exhausted"), result
    if result.end_reason == "agent_exhausted":
        assert agent.exhausted, "ended as if the agent were exhausted"
    record = read_record(path, result.campaign_id)
    ledger = engine.ledger
    return dataclasses.replace(record, clock=clock.now, spent=ledger.spent,
                               reserved=ledger.reserved)


def read_record(path: Path, campaign_id: int) -> Record:
    """What the run left in the store file, checked to be finished and consistent (read with
    SQL, as any other program may read it)."""
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        (run,) = db.execute("SELECT status, end_reason, created_at, ended_at FROM campaigns"
                            " WHERE id = ?", (campaign_id,)).fetchall()
        trials = {row["id"]: dict(row) for row in db.execute(
            "SELECT id, status, cache_of, ended_at FROM trials WHERE campaign_id = ?",
            (campaign_id,))}
        attempts = [dict(row) for row in db.execute(
            "SELECT trial_id, job_id, state, spend, ended_at FROM attempts ORDER BY id")]
    finally:
        db.close()

    # The run ended, and left nothing behind.
    assert run["ended_at"] is not None
    for trial in trials.values():
        assert trial["status"] != "running", trial
        assert trial["ended_at"] is not None, trial
    for attempt in attempts:
        assert attempt["state"] not in UNFINISHED, attempt
        assert attempt["ended_at"] is not None, attempt

    # Every spend belongs to exactly one trial of this run, never to a cache hit.
    charged = []
    for attempt in attempts:
        owner = trials.get(attempt["trial_id"])
        assert owner is not None, attempt
        assert owner["cache_of"] is None, owner
        if attempt["job_id"] is not None:
            assert attempt["spend"] is not None, attempt
        if attempt["spend"] is None:
            continue
        spend = Spend(**json.loads(attempt["spend"]))
        if attempt["job_id"] is None:
            # Ended before it was submitted (the campaign stopped): it cannot have cost.
            assert spend == Spend(), attempt
        charged.append(Charged(attempt["trial_id"], spend, float(attempt["ended_at"])))
    return Record(
        status=run["status"], end_reason=run["end_reason"], started=float(run["created_at"]),
        ended=float(run["ended_at"]),
        dispatched=frozenset(attempt["trial_id"] for attempt in attempts),
        attempts=tuple(charged),
    )


def agrees_with_the_model(case: Scenario, record: Record) -> None:
    """The engine used the gate as :class:`GateModel` does, so that the gate layer's cases
    stand for campaigns: the same refusal, or the same trials and attempts, the same spend
    and the same end. (A change to how the engine dispatches, retries, pauses or stops that
    fails here is a change to make in the model too.)"""
    model = GateModel(case).run()
    assert model.refusal == record.refusal
    if record.refusal is not None:
        return
    assert (model.end_reason, len(model.dispatched), len(model.attempts)) == (
        record.end_reason, len(record.dispatched), len(record.attempts))
    assert model.ended == pytest.approx(record.ended, abs=TOLERANCE)
    for name, value in record.spent.as_dict().items():
        assert model.spent.as_dict()[name] == pytest.approx(value, abs=TOLERANCE), name


# -- what must hold ----------------------------------------------------------------------

def time_limit(case: Scenario) -> float | None:
    """The time limit that keeps one attempt within the per-trial ceilings as written, the
    backend's overrun included (``None``: no limit at all)."""
    rate = case.price.per_second(dse.Resources(case.cpus, case.gpus))
    trial = case.budget.trial
    allowed = [] if trial.wall_s is None else [trial.wall_s]
    if trial.compute is not None:
        unit, hours = trial.compute
        units = {"cpu": case.cpus, "gpu": case.gpus, "node": 1}[unit]
        if units:
            allowed.append(hours * 3600 / units)
    if trial.money is not None and rate > 0:
        allowed.append(trial.money / rate)
    # A price so small that the ceiling allows more than a float holds binds nothing (as
    # TrialCeilings.time_limit says): 1 USD at 2.2e-308 per node-hour is no limit at all.
    allowed = [x for x in allowed if math.isfinite(x)]
    limits = [min(allowed) - case.overrun_s] if allowed else []
    if case.time_limit is not None:
        limits.append(case.time_limit)
    return min(limits) if limits else None


def worst_attempt(case: Scenario) -> Spend | None:
    """The most one attempt may spend at the campaign's resources: its time limit plus the
    backend's overrun (``None``: no time limit)."""
    limit = time_limit(case)
    if limit is None:
        return None
    wall = limit + case.overrun_s
    rate = case.price.per_second(dse.Resources(case.cpus, case.gpus))
    return Spend(wall, wall * case.cpus, wall * case.gpus, wall, wall * rate)


def _exceeds(amount: float, ceiling: float) -> bool:
    return amount > ceiling * (1 + TOLERANCE) + TOLERANCE


def nothing_fits(case: Scenario) -> bool:
    """Whether the ceilings are clearly too small for even one attempt."""
    budget = case.budget
    worst = worst_attempt(case) or Spend()
    if budget.trials == 0 or budget.wall_clock_s == 0:
        return True
    if (budget.wall_clock_s is not None and budget.on_deadline == "finish"
            and _exceeds(worst.wall_s, budget.wall_clock_s)):
        return True
    if budget.compute is not None:
        unit, hours = budget.compute
        if _exceeds(worst.compute_s(unit), hours * 3600):
            return True
    return budget.money is not None and _exceeds(worst.money, budget.money)


def one_fits(case: Scenario) -> bool:
    """Whether the ceilings clearly allow one attempt (the negation of :func:`nothing_fits`
    with the float slack the other way)."""
    budget = case.budget
    worst = worst_attempt(case) or Spend()
    margin = 1 + 10 * TOLERANCE
    if budget.trials == 0 or (budget.wall_clock_s is not None
                              and budget.wall_clock_s <= TOLERANCE):
        return False
    if (budget.wall_clock_s is not None and budget.on_deadline == "finish"
            and worst.wall_s * margin >= budget.wall_clock_s):
        return False
    if budget.compute is not None and worst.compute_s(budget.compute[0]) * margin >= (
        budget.compute[1] * 3600
    ):
        return False
    return budget.money is None or worst.money * margin < budget.money


def check(case: Scenario, record: Record) -> None:
    budget = case.budget
    limit = time_limit(case)
    if record.refusal is not None:
        # Refused up front: the per-trial ceilings leave no time to run, or a compute, money
        # or finishing ceiling has no time limit to reserve.
        if limit is None:
            assert "needs a time limit" in record.refusal, record.refusal
            assert budget.compute is not None or budget.money is not None or (
                budget.wall_clock_s is not None and budget.on_deadline == "finish"
            )
        else:
            assert "leave no time" in record.refusal, record.refusal
            assert limit <= TOLERANCE, limit
        return
    assert limit is None or limit > 0, limit
    assert record.status in ("completed", "budget_exhausted"), record.status

    # What the ledger says was spent is what the attempts spent, trial by trial; every
    # reservation was settled.
    total = Spend()
    per_trial: dict[int, Spend] = {}
    for attempt in record.attempts:
        total = total + attempt.spend
        per_trial[attempt.trial] = per_trial.get(attempt.trial, Spend()) + attempt.spend
    for name, value in total.as_dict().items():
        assert record.spent.as_dict()[name] == pytest.approx(value, abs=TOLERANCE)
        assert sum(s.as_dict()[name] for s in per_trial.values()) == pytest.approx(
            value, abs=TOLERANCE
        )
    for name, value in record.reserved.as_dict().items():
        assert value == pytest.approx(0.0, abs=TOLERANCE), (name, value)

    # Campaign ceilings.
    if budget.trials is not None:
        assert len(record.dispatched) <= budget.trials
    if budget.compute is not None:
        unit, hours = budget.compute
        assert not _exceeds(total.compute_s(unit), hours * 3600), (total, budget.compute)
    if budget.money is not None:
        assert not _exceeds(total.money, budget.money), (total, budget.money)
    if budget.wall_clock_s is not None:
        deadline = record.started + budget.wall_clock_s
        # "cancel" stops what runs at the deadline; "finish" only starts what can end by it.
        assert not _exceeds(record.ended, deadline), (record.ended, deadline)
        assert not _exceeds(record.clock, deadline)
        for attempt in record.attempts:
            assert not _exceeds(attempt.ended_at, deadline), attempt

    _check_trials(case, record, per_trial)

    # A ceiling too small for one trial ends the campaign at once, having spent nothing;
    # one that clearly fits a trial (of the campaign's size) lets the first one start.
    if case.max_trials != 0 and nothing_fits(case):
        assert (record.status, record.end_reason) == ("budget_exhausted", "budget_exhausted")
        assert not record.dispatched
        assert record.ended == record.started
    if case.max_trials != 0 and one_fits(case) and case.proposals[0] not in case.resources:
        assert record.dispatched, "a trial that fits every ceiling was never dispatched"


def _check_trials(case: Scenario, record: Record, per_trial: Mapping[int, Spend]) -> None:
    # An attempt spends no more than it reserved, and the environment's time limit holds
    # for each; the per-trial ceilings hold for the sum of a trial's attempts (a retry gets
    # only what its earlier attempts left).
    for attempt in record.attempts:
        reserved = attempt.reserved
        if reserved is not None and reserved.wall_s > 0:  # it had a time limit
            for name, value in attempt.spend.as_dict().items():
                assert not _exceeds(value, reserved.as_dict()[name]), (attempt, name)
        if case.time_limit is not None:
            assert not _exceeds(attempt.spend.wall_s, case.time_limit + case.overrun_s), (
                attempt
            )
    trial_ceilings = case.budget.trial
    for trial, spend in per_trial.items():
        if trial_ceilings.wall_s is not None:
            assert not _exceeds(spend.wall_s, trial_ceilings.wall_s), (trial, spend)
        if trial_ceilings.compute is not None:
            unit, hours = trial_ceilings.compute
            assert not _exceeds(spend.compute_s(unit), hours * 3600), (trial, spend)
        if trial_ceilings.money is not None:
            assert not _exceeds(spend.money, trial_ceilings.money), (trial, spend)


# -- the shards ----------------------------------------------------------------------------

@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory on a RAM disk when there is one (each engine case makes a store and trial
    directories; the record need not survive a crash here)."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    path = Path(tempfile.mkdtemp(prefix="dse-budget-property-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _tally(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, layer: str,
    shard: int, cases: int, extra: str = "",
) -> str:
    """Note this shard's count where every shard of this session sees it (xdist workers
    share the parent of their temporary directories); return the line to print."""
    base = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker
        base = base.parent
    tally = base / f"budget-property-{layer}-cases"
    tally.mkdir(exist_ok=True)
    part = tally / f"shard-{shard}.tmp"
    part.write_text(str(cases))
    part.replace(tally / f"shard-{shard}")
    counts = [int(path.read_text()) for path in tally.glob("shard-*[0-9]")]
    shards = LAYERS[layer][0]
    line = (f"budget property ({layer}): shard {shard + 1}/{shards} checked {cases:,}"
            f" generated cases{extra}")
    if len(counts) == shards:
        return f"{line}; {sum(counts):,} in all"
    return f"{line}; {sum(counts):,} so far ({len(counts)} of {shards} shards)"


def _print(request: pytest.FixtureRequest, line: str) -> None:
    """Write *line* to the terminal despite output capture, from an xdist worker too."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        sys.stderr.write(f"\n{line}\n")
        sys.stderr.flush()


def _check_generated(
    layer: str, shard: int, run: Callable[[Scenario], Record], request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory, record_property: Callable[[str, object], None],
    extra: Callable[[], str] = str,
) -> None:
    """Check this shard's cases of *layer*, each as *run* records it, and report how many
    (and *extra*, said after)."""
    per_shard = LAYERS[layer][1]
    stride, offset = {"gate": (1, 0), "engine": (ENGINE_STRIDE, 0),
                      "stopping": (ENGINE_STRIDE, STOPPING_OFFSET)}[layer]
    make = stopping_scenario if layer == "stopping" else scenario
    cases = 0
    for index in range(shard * per_shard, (shard + 1) * per_shard):
        number = index * stride + offset
        case = make(number)
        try:
            check(case, run(case))
        except Exception as exc:
            exc.add_note(f"generated case {number} ({layer} layer): {case!r}")
            raise
        cases += 1
    record_property("generated_cases", cases)
    _print(request, _tally(request, tmp_path_factory, layer, shard, cases, extra()))
    assert cases == per_shard


@pytest.mark.parametrize("shard", range(LAYERS["gate"][0]))
def test_the_gate_never_lets_spend_pass_a_ceiling(
    shard: int, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
    record_property: Callable[[str, object], None],
) -> None:
    _check_generated("gate", shard, lambda case: GateModel(case).run(), request,
                     tmp_path_factory, record_property)


@pytest.mark.parametrize("shard", range(LAYERS["engine"][0]))
def test_a_campaign_never_spends_past_a_ceiling_and_ends(
    shard: int, scratch: Path, tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest, record_property: Callable[[str, object], None],
) -> None:
    def run(case: Scenario) -> Record:
        root = Path(tempfile.mkdtemp(dir=scratch))
        try:
            record = run_engine(case, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        agrees_with_the_model(case, record)
        return record

    _check_generated("engine", shard, run, request, tmp_path_factory, record_property)


# -- the stopping layer: the same guarantee with early stopping in play -------------------
#
# Generated campaigns as the engine layer's (ceilings, prices, failures, interruptions and
# retries, parallelism, modes), with a [stopping] table (asha, hyperband or median; promote
# on or off) and a learning curve on every trial's scripts: random curves that cross, some
# checkpointed. A case is checked with :func:`check` on what the run recorded, and with
# :func:`check_stops` on its decisions; the probe itself (:class:`WatchedProbe`) checks at
# each start that the attempt was reserved and that its worst case fit.

STOPPING_OFFSET = 12
"""The stopping layer checks cases ``index * ENGINE_STRIDE + STOPPING_OFFSET`` (others than
the engine layer's), with a stopping table and curves drawn from a seed of their own."""


def _curve(draw: Draw, max_step: int, pace: float, rank: int | None
           ) -> tuple[tuple[ProbePoint, ...], float, float]:
    """A random learning curve (points, the time of a full run, its final value): a loss
    ``a + b / step`` with noise, whose (a, b) differ per trial, so that curves cross, about
    *pace* seconds a step; a *rank* makes it worse and slower by that much (else its pace
    is random); now and then rounded (ties), cut short (a workload that reports fewer
    points), checkpointed at every point, at some, or never."""
    rng = draw.rng
    step_s = pace * (rng.uniform(0.5, 2.0) if rank is None else 1 + rank / 4)
    rank = rank or 0
    floor = 2.5 * rank
    a, b = floor + rng.uniform(0.0, 2.0), rng.uniform(0.0, 4.0)
    digits = draw.choice([1, 6])
    length = draw.integer(1, max_step) if draw.one_in(6) else max_step
    checkpoints = draw.choice(["never", "always", "always", "always", "some"])
    points = []
    for step in range(1, length + 1):
        value = round(a + b / step + rng.uniform(-0.1, 0.1), digits)
        saved = checkpoints == "always" or (checkpoints == "some" and draw.one_in(2))
        points.append(ProbePoint(step * step_s, step, {"value": value}, checkpoint=saved))
    return tuple(points), max_step * step_s, round(a + b / max_step, digits)


def _stopping_table(draw: Draw, max_step: int) -> dict[str, Any]:
    rule = draw.choice(["asha", "hyperband", "median"])
    min_step = draw.integer(1, min(2, max_step - 1))
    if rule == "hyperband":  # a bracket must stop trials: min_step x eta <= max_step
        eta = draw.choice([2, 3])
        if min_step * eta > max_step:
            min_step, eta = 1, 2
    options: dict[str, Any] = {
        "asha": lambda: {"reduction_factor": draw.choice([2, 2, 3, 3, 4]),
                         "min_peers": draw.integer(0, 2)},
        "hyperband": lambda: {"reduction_factor": eta},
        "median": lambda: {"min_peers": draw.integer(1, 4), "interval": draw.integer(1, 2)},
    }[rule]()
    return {"rule": rule, "max_step": max_step, "min_step": min_step,
            "promote": not draw.one_in(4), rule: options}


def stopping_scenario(number: int) -> Scenario:
    """Stopping case *number*: generated case *number*'s ceilings, prices, resources,
    parallelism, mode and retries, with a ``[stopping]`` table, more proposals (a rule needs
    peers) and scripts of its own: each trial plays one learning curve in every attempt; an
    attempt that succeeds runs it to the end and delivers its last value, one that fails,
    is interrupted or times out ends somewhere along it."""
    base = scenario(number)
    draw = Draw(f"dse-budget-property-stopping-{number}")
    max_step = draw.integer(2, 9)
    # Rules compare peers: mostly distinct proposals, in a random order, a few repeated.
    distinct = draw.integer(6, 20)
    order = list(range(distinct))
    draw.rng.shuffle(order)
    for _ in range(draw.integer(0, 4)):
        order.insert(draw.integer(0, len(order)), draw.integer(0, distinct - 1))
    proposals = tuple(order)
    # In two cases of three the later proposals tend to be worse and slower: then a trial
    # stopped among few peers is among the best once more have reported, and is promoted.
    worse = not draw.one_in(3)
    ranks = {x: rank for rank, x in enumerate(dict.fromkeys(proposals))}
    pace = draw.seconds(0.1, 2.0)
    scripts = {}
    for x in range(distinct):
        rank = ranks[x] if worse else None
        points, full_s, final = _curve(draw, max_step, pace, rank)
        attempts = []
        for _ in range(draw.integer(1, 3)):
            state = JobState.SUCCEEDED if draw.one_in(2) else draw.choice(_END_STATES)
            if state is JobState.SUCCEEDED:
                attempts.append(ProbeScript(seconds=full_s, metrics={"value": final},
                                            progress=points))
            else:
                attempts.append(ProbeScript(seconds=draw.seconds(0.0, full_s * 1.2),
                                            state=state, progress=points))
        scripts[x] = tuple(attempts)
    # Its campaign may run more trials than the engine layer's: the campaign ceilings are
    # as drawn, or 4 or 16 times larger (binding later, or not at all). A promoted attempt
    # gets what its trial's earlier attempts left: a per-trial wall-clock ceiling (one case in
    # two) makes that bind.
    scale = draw.choice([1.0, 4.0, 16.0])
    budget = base.budget
    trial = budget.trial
    if trial.wall_s is None and draw.one_in(2):
        trial = dataclasses.replace(trial, wall_s=draw.seconds(0.5, 40.0))
    budget = dataclasses.replace(
        budget, trial=trial,
        wall_clock_s=None if budget.wall_clock_s is None else budget.wall_clock_s * scale,
        compute=None if budget.compute is None else (
            budget.compute[0], budget.compute[1] * scale),
        money=None if budget.money is None else budget.money * scale,
    )
    return dataclasses.replace(base, proposals=proposals, scripts=scripts, budget=budget,
                               stopping=_stopping_table(draw, max_step),
                               races=draw.choice([0, 0, 2, 3]))


def _spend(case: Scenario, resources: dse.Resources, wall: float) -> Spend:
    """What *wall* seconds on *resources* cost in *case*."""
    return Spend(wall, wall * resources.total_cpus, wall * resources.total_gpus,
                 wall * resources.nodes, wall * case.price.per_second(resources))


def _within(spend: Spend, case: Scenario, *, trial: bool) -> None:
    """*spend* is within the case's per-trial ceilings (*trial*) or its campaign ceilings."""
    budget = case.budget
    if trial:
        ceilings = budget.trial
        if ceilings.wall_s is not None:
            assert not _exceeds(spend.wall_s, ceilings.wall_s), (spend, ceilings)
        compute, money = ceilings.compute, ceilings.money
    else:
        compute, money = budget.compute, budget.money
    if compute is not None:
        assert not _exceeds(spend.compute_s(compute[0]), compute[1] * 3600), (spend, compute)
    if money is not None:
        assert not _exceeds(spend.money, money), (spend, money)


class WatchedProbe(OverrunningProbe):
    """The stopping layer's probe (with trial directories, so curves are played): when it
    starts attempts it checks that each was reserved before it started — the ledger holds at
    least the worst case of every attempt running — and started only if its worst case fit:
    the campaign's spend, the worst cases of all running attempts included, within the
    compute and money ceilings; its trial's earlier attempts' spend plus its worst case
    within the per-trial ceilings; and, finishing at the wall-clock ceiling, its worst case
    ends by the deadline. When an attempt ends it checks it spent no more than its worst
    case."""

    def __init__(self, case: Scenario) -> None:
        def script(params: Mapping[str, Any]) -> Sequence[ProbeScript]:
            return case.scripts[case.like(params["x"])]

        super().__init__(script, clock=FakeClock(start=0.0), overrun_s=case.overrun_s,
                         write_results=True)
        self.case = case
        self.ledger: Ledger | None = None
        """The engine's ledger (set once the engine is built)."""
        self.worst: dict[str, Spend] = {}
        """Job id -> the worst case of an attempt not ended yet."""
        self.spent: dict[str, Spend] = {}
        """Trial id -> what its ended attempts spent (by the times the probe reported)."""
        self.resumed = 0
        """Attempts started from a checkpoint."""
        self.cancels = 0
        """Cancels asked for so far."""
        self.broken: list[AssertionError] = []
        """What did not hold (raised in the engine's call, which would take it for a
        refusal of the batch; raised again after the run)."""

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        now = self.clock.time()
        ids = super()._submit(jobs)
        try:
            self._started(jobs, ids, now)
        except AssertionError as exc:
            self.broken.append(exc)  # the engine takes what submit raises for a refusal
            raise
        return ids

    def _started(self, jobs: Sequence[JobSpec], ids: Sequence[str], now: float) -> None:
        ledger, case = self.ledger, self.case
        assert ledger is not None
        deadline = ledger.deadline
        for spec, job_id in zip(jobs, ids, strict=True):
            limit = spec.time_limit
            worst = Spend() if limit is None else _spend(
                case, spec.resources, limit + case.overrun_s)
            self.worst[job_id] = worst
            self.resumed += self.cluster.jobs[job_id].resumed_at > 0
            _within(self.spent.get(spec.trial_id, Spend()) + worst, case, trial=True)
            if deadline is not None:
                assert not _exceeds(now, deadline), (now, deadline)
                if case.budget.on_deadline == "finish":
                    assert limit is not None, spec
                    assert not _exceeds(now + worst.wall_s, deadline), (now, worst, deadline)
        running = sum(self.worst.values(), Spend())
        for name, value in running.as_dict().items():
            held = ledger.reserved.as_dict()[name]
            assert value <= held * (1 + TOLERANCE) + TOLERANCE, (name, value, held)
        _within(ledger.spent + running, case, trial=False)

    def _cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel, except that every ``case.races``-th cancel loses the race with a
        preemption: the job ends preempted now, as a real job may just as it is cancelled."""
        now, cancel = self.clock.time(), []
        for job_id in job_ids:
            self.cancels += 1
            job = self.cluster.jobs.get(job_id)
            if (self.case.races and self.cancels % self.case.races == 0 and job is not None
                    and job.ends_at is not None and not job.state.is_finished()):
                job.script = dataclasses.replace(job.script, state=JobState.PREEMPTED)
                job.ends_at, job.times_out = min(job.ends_at, now), False
            else:
                cancel.append(job_id)
        super()._cancel(cancel)

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        statuses = super()._poll(job_ids)
        for job_id, status in statuses.items():
            if not status.state.is_finished() or job_id not in self.worst:
                continue
            worst = self.worst.pop(job_id)
            spec = self.cluster.jobs[job_id].spec
            started = status.started_at if status.started_at is not None else 0.0
            wall = max((status.ended_at or started) - started, 0.0)
            if spec.time_limit is not None:
                assert not _exceeds(wall, worst.wall_s), (job_id, wall, worst)
            spent = self.spent.get(spec.trial_id, Spend())
            self.spent[spec.trial_id] = spent + _spend(self.case, spec.resources, wall)
        return statuses


@dataclass
class StopCounts:
    """What a stopping case did (summed over a shard, to show the layer exercised it)."""

    stops: int = 0
    """Attempts a rule stopped (their trial ended ``stopped``, perhaps promoted later)."""
    promotions: int = 0
    """Attempts started by a promotion."""
    resumed: int = 0
    """Attempts started from a checkpoint (promoted or retried)."""
    bound: int = 0
    """Promotions in runs a ceiling ended (``budget_exhausted``)."""

    def add(self, other: StopCounts) -> None:
        for name in ("stops", "promotions", "resumed", "bound"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def check_stops(case: Scenario, path: Path) -> StopCounts:
    """What the record says of stops and promotions holds: a trial ends ``stopped`` only at
    a STOP of its last attempt; an attempt after a stopped one is a promotion of it (never a
    retry of an interruption), resumed from its checkpoint, and only when the campaign
    promotes; every promotion started an attempt."""
    db = sqlite3.connect(path)
    try:
        attempts = {(t, a): (state, resumed) for t, a, state, resumed in db.execute(
            "SELECT trial_id, attempt, state, resumed FROM attempts")}
        trials = {t: (status, step) for t, status, step in db.execute(
            "SELECT id, status, stop_step FROM trials WHERE cache_of IS NULL")}
        decisions = db.execute("SELECT trial_id, attempt, verdict FROM decisions").fetchall()
        retries = [(t, json.loads(data)["attempt"]) for t, data in db.execute(
            "SELECT trial_id, data FROM events WHERE kind = 'retry'")]
    finally:
        db.close()
    assert case.stopping is not None
    stopped = {(t, a) for t, a, verdict in decisions if verdict == "stop"
               and attempts.get((t, a), ("", 0))[0] != "succeeded"}
    promoted = {(t, a) for t, a, verdict in decisions if verdict == "promote"}
    for trial, (status, step) in trials.items():
        last = max((a for t, a in attempts if t == trial), default=0)
        if status == "stopped":
            assert (trial, last) in stopped, (trial, last)
            assert step is not None, trial
        for attempt in range(1, last):
            if (trial, attempt) in stopped:
                # Only a promotion follows a stop: resumed from its checkpoint.
                assert (trial, attempt) in promoted, (trial, attempt)
                assert attempts[trial, attempt + 1][1] == 1, (trial, attempt + 1)
    assert not promoted or case.stopping["promote"], promoted
    for trial, attempt in promoted:
        assert (trial, attempt) in stopped, (trial, attempt)
        assert (trial, attempt + 1) in attempts, (trial, attempt)
    for trial, attempt in retries:
        assert (trial, attempt - 1) not in stopped, ("retried after a stop", trial, attempt)
    return StopCounts(stops=len(stopped), promotions=len(promoted))


@pytest.mark.parametrize("shard", range(LAYERS["stopping"][0]))
def test_early_stopping_never_spends_past_a_ceiling_and_ends(
    shard: int, scratch: Path, tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest, record_property: Callable[[str, object], None],
) -> None:
    counts = StopCounts()

    def run(case: Scenario) -> Record:
        root = Path(tempfile.mkdtemp(dir=scratch))
        try:
            probe = WatchedProbe(case)
            record = run_engine(case, root, probe)
            if probe.broken:
                raise probe.broken[0]
            if record.refusal is None:
                done = check_stops(case, root / "dse.sqlite")
                done.resumed = probe.resumed
                done.bound = done.promotions if record.status == "budget_exhausted" else 0
                counts.add(done)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return record

    _check_generated("stopping", shard, run, request, tmp_path_factory, record_property,
                     extra=lambda: (f" ({counts.stops} stops, {counts.promotions} promotions,"
                                    f" {counts.resumed} attempts resumed from a checkpoint,"
                                    f" {counts.bound} promotions in runs a ceiling ended)"))
    # The layer exercised what it is about (a layer that stops nothing proves nothing).
    assert counts.stops, counts
    assert counts.promotions, counts
    assert counts.resumed, counts
