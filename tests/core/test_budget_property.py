"""The budget guarantee as a property (issue 6): over random trial durations, resources,
prices, failures, interruptions and retries, parallelism, modes and ceilings on the timed
probe, spend never exceeds a ceiling, the campaign always ends, and every spend belongs to
exactly one trial.

The cases are split into shards (one test each, so ``pytest -n`` spreads them over workers),
each run from a fixed seed so that every CI run checks the same cases; the number of cases is
printed and checked.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import dse
from dse import JobSpec, JobState
from dse._budget import Budget, Price, Spend, TrialCeilings
from dse._report import summarize
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent

SHARDS = 4
CASES_PER_SHARD = 2_500
MAX_PASSES = 10_000
"""Polling passes (and agent calls) after which a run counts as spinning."""
TOLERANCE = 1e-6
"""Float slack on every comparison with a ceiling (sums of products of floats)."""
UNFINISHED = ("submitting", "submitted", "pending", "running")
FRESH = 1_000
"""The first ``x`` an endless agent proposes after its script."""

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

    def like(self, x: int) -> int:
        """The scripted ``x`` whose behaviour and resources a proposal ``x`` has."""
        return x if x < FRESH else x % len(self.scripts)


def _seconds(low: float, high: float) -> st.SearchStrategy[float]:
    """Round numbers (exact ties with a ceiling) as well as arbitrary floats."""
    return st.one_of(
        st.integers(math.ceil(low), math.floor(high)).map(float),
        st.floats(low, high, allow_nan=False, allow_infinity=False),
    )


def _hours(seconds: float) -> float:
    return seconds / 3600


# Strategies are built once: building them per draw costs more than running a case.
_RATE = st.one_of(st.sampled_from([0.0, 0.5, 3.6, 36.0]), _seconds(0.0, 50.0))
_UNIT = st.sampled_from(["cpu", "gpu", "node"])
# Mostly short, sometimes up to 60 s against time limits of at most 30 s: some attempts run
# into their limit.
_ATTEMPT = st.tuples(
    st.sampled_from(_END_STATES), st.one_of(_seconds(0.0, 10.0), _seconds(0.0, 60.0))
)
_ATTEMPTS = st.lists(_ATTEMPT, min_size=1, max_size=4)
_TIME_LIMIT = st.one_of(_seconds(0.5, 30.0), _seconds(10.0, 30.0))
# One attempt's worst case is at most 30 s x 8 CPUs = 240 cpu-seconds (and 30 s x 36 USD/h
# x 13 units = 3.9 USD), so these ceilings sometimes bind at once, sometimes never.
_TRIAL_WALL = _seconds(0.5, 40.0)
_TRIAL_COMPUTE = st.tuples(_UNIT, _seconds(1.0, 300.0).map(_hours))
_TRIAL_MONEY = _seconds(0.001, 5.0)
_TRIALS = st.one_of(st.none(), st.integers(0, 12))
_WALL_CLOCK = _seconds(1.0, 200.0)
_COMPUTE_HOURS = _seconds(1.0, 2000.0).map(_hours)
_MONEY = _seconds(0.01, 10.0)
_OVERRUN = st.one_of(st.just(0.0), _seconds(0.0, 5.0))


def _script(x: int, state: JobState, seconds: float) -> ProbeScript:
    metrics = {"value": float(x)} if state is JobState.SUCCEEDED else None
    return ProbeScript(seconds=seconds, state=state, metrics=metrics)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    distinct = draw(st.integers(1, 12))
    proposals = tuple(draw(st.lists(st.integers(0, distinct - 1), min_size=1, max_size=12)))
    scripts = {
        x: tuple(_script(x, state, seconds) for state, seconds in draw(_ATTEMPTS))
        for x in range(distinct)
    }
    # One trial in four asks for resources of its own (an environment may set them per trial).
    resources = {
        x: (draw(st.integers(1, 8)), draw(st.integers(0, 4)))
        for x in range(distinct) if draw(st.integers(0, 3)) == 0
    }
    # Rarely no time limit: then only the trials and a cancelling wall-clock ceiling apply.
    no_limit = draw(st.integers(0, 7)) == 0

    def sometimes(strategy: st.SearchStrategy[Any]) -> Any:
        # Each per-trial ceiling in one case of three: together they often leave little time.
        return draw(strategy) if draw(st.integers(0, 2)) == 0 else None

    def ceiling(strategy: st.SearchStrategy[float]) -> float | None:
        # A campaign ceiling in one case of two, and zero (nothing may start) now and then.
        kind = draw(st.integers(0, 19))
        return None if kind < 10 else 0.0 if kind == 10 else draw(strategy)

    compute_hours = ceiling(_COMPUTE_HOURS)
    trial = TrialCeilings(
        wall_s=sometimes(_TRIAL_WALL), compute=sometimes(_TRIAL_COMPUTE),
        money=sometimes(_TRIAL_MONEY),
    )
    trials, max_trials = draw(_TRIALS), draw(_TRIALS)
    bounded = trials is not None or max_trials is not None
    return Scenario(
        proposals=proposals,
        endless=bounded and draw(st.booleans()),
        scripts=scripts,
        resources=resources,
        time_limit=None if no_limit else draw(_TIME_LIMIT),
        cpus=draw(st.integers(1, 8)),
        gpus=draw(st.integers(0, 4)),
        price=Price(cpu_hour=draw(_RATE), gpu_hour=draw(_RATE), node_hour=draw(_RATE)),
        mode=draw(st.sampled_from(["waves", "rolling"])),
        parallelism=draw(st.integers(1, 8)),
        max_trials=max_trials,
        max_interruptions=draw(st.integers(0, 3)),
        interruption_threshold=draw(st.integers(1, 10)),
        budget=Budget(
            trials=trials,
            wall_clock_s=ceiling(_WALL_CLOCK),
            compute=None if compute_hours is None else (draw(_UNIT), compute_hours),
            money=ceiling(_MONEY),
            currency="USD",
            on_deadline=draw(st.sampled_from(["cancel", "finish"])),
            trial=trial,
        ),
        overrun_s=draw(_OVERRUN),
    )


# -- running one case --------------------------------------------------------------------

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
        clock: FakeClock, overrun_s: float,
    ) -> None:
        super().__init__(script, clock=clock)
        self.overrun_s = overrun_s

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        ids = super()._submit(jobs)
        for job_id in ids:
            job = self.cluster.jobs[job_id]
            limit, seconds = job.spec.time_limit, job.script.seconds
            if limit is not None and seconds is not None and job.started_at is not None:
                job.ends_at = job.started_at + min(seconds, limit + self.overrun_s)
        return ids


@dataclass
class Outcome:
    clock: FakeClock
    refusal: str | None = None
    """The configuration error that refused the campaign before it started."""
    engine: dse.Engine | None = None
    store: dse.Store | None = None
    result: dse.CampaignResult | None = None


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
        "poll_interval": "1h",
    }
    if case.max_trials is not None:
        table["max_trials"] = case.max_trials
    camp = dse.campaign_from_dict({
        "campaign": table,
        "space": {"x": {"type": "int", "low": 0, "high": 10 * FRESH}},
        "objectives": [{"metric": "value"}],
        "environment": environment,
    }, workspace=workspace)
    return dataclasses.replace(camp, budget=case.budget, price=case.price)


def run_case(case: Scenario, root: Path) -> Outcome:
    scripts = case.scripts

    def script(params: Mapping[str, Any]) -> Sequence[ProbeScript]:
        return scripts[case.like(params["x"])]

    clock = FakeClock(start=0.0)
    camp = _campaign(case, root)
    store = dse.Store(root / "dse.sqlite", durable=False)
    try:
        engine = dse.Engine(
            camp, agent=EndlessAgent(case.proposals, endless=case.endless),
            environment=SizedEnvironment(camp, case),
            backend=OverrunningProbe(script, clock=clock, overrun_s=case.overrun_s),
            store=store, clock=clock, listener=PassGuard(),
        )
    except dse.ConfigError as exc:
        store.close()
        return Outcome(clock, refusal=str(exc))
    return Outcome(clock, engine=engine, store=store, result=engine.run())


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


def check(case: Scenario, out: Outcome) -> None:
    budget = case.budget
    limit = time_limit(case)
    if out.refusal is not None:
        # Refused up front: the per-trial ceilings leave no time to run, or a compute, money
        # or finishing ceiling has no time limit to reserve.
        if limit is None:
            assert "needs a time limit" in out.refusal, out.refusal
            assert budget.compute is not None or budget.money is not None or (
                budget.wall_clock_s is not None and budget.on_deadline == "finish"
            )
        else:
            assert "leave no time" in out.refusal, out.refusal
            assert limit <= TOLERANCE, limit
        return
    assert limit is None or limit > 0, limit
    assert out.store is not None
    assert out.engine is not None
    assert out.result is not None
    store, result = out.store, out.result
    (run,) = store.query("SELECT * FROM campaigns WHERE id = ?", (result.campaign_id,))
    assert result.status in ("completed", "budget_exhausted"), result
    if result.end_reason == "agent_exhausted":
        assert out.engine.agent.exhausted, "ended as if the agent were exhausted"
    assert run["ended_at"] is not None
    started = float(run["created_at"])
    trials = {row["id"]: row for row in store.trials(result.campaign_id)}
    attempts = store.query("SELECT * FROM attempts")

    # The run ended, and left nothing behind.
    for trial in trials.values():
        assert trial["status"] != "running", dict(trial)
        assert trial["ended_at"] is not None, dict(trial)
    for attempt in attempts:
        assert attempt["state"] not in UNFINISHED, dict(attempt)
        assert attempt["ended_at"] is not None, dict(attempt)

    # Every spend belongs to exactly one trial of this run, never to a cache hit.
    total = Spend()
    per_trial: dict[int, Spend] = {}
    spends: list[tuple[Any, Spend]] = []
    for attempt in attempts:
        owner = trials.get(attempt["trial_id"])
        assert owner is not None, dict(attempt)
        assert owner["cache_of"] is None, dict(owner)
        if attempt["job_id"] is not None:
            assert attempt["spend"] is not None, dict(attempt)
        if attempt["spend"] is None:
            continue
        spend = Spend(**json.loads(attempt["spend"]))
        if attempt["job_id"] is None:
            # Ended before it was submitted (the campaign stopped): it cannot have cost.
            assert spend == Spend(), dict(attempt)
        spends.append((attempt, spend))
        total = total + spend
        per_trial[owner["number"]] = per_trial.get(owner["number"], Spend()) + spend
    summary = summarize(store, result.campaign_id)
    for name, value in total.as_dict().items():
        assert summary.spent.as_dict()[name] == pytest.approx(value, abs=TOLERANCE)
        assert out.engine.ledger.spent.as_dict()[name] == pytest.approx(value, abs=TOLERANCE)
        assert sum(s.as_dict()[name] for s in per_trial.values()) == pytest.approx(
            value, abs=TOLERANCE
        )
    assert set(summary.trial_spend) == set(per_trial)
    # Every reservation was settled.
    for name, value in out.engine.ledger.reserved.as_dict().items():
        assert value == pytest.approx(0.0, abs=TOLERANCE), (name, value)

    # Campaign ceilings.
    dispatched = {attempt["trial_id"] for attempt in attempts}
    if budget.trials is not None:
        assert len(dispatched) <= budget.trials
    if budget.compute is not None:
        unit, hours = budget.compute
        assert not _exceeds(total.compute_s(unit), hours * 3600), (total, budget.compute)
    if budget.money is not None:
        assert not _exceeds(total.money, budget.money), (total, budget.money)
    if budget.wall_clock_s is not None:
        deadline = started + budget.wall_clock_s
        # "cancel" stops what runs at the deadline; "finish" only starts what can end by it.
        assert not _exceeds(float(run["ended_at"]), deadline), (dict(run), deadline)
        assert not _exceeds(out.clock.now, deadline)
        for attempt in attempts:
            assert not _exceeds(float(attempt["ended_at"]), deadline), dict(attempt)

    # The environment's time limit holds per attempt; the per-trial ceilings hold for the
    # sum of a trial's attempts (a retry gets only what its earlier attempts left).
    trial_ceilings = budget.trial
    per_trial: dict[int, Spend] = {}
    for attempt, spend in spends:
        per_trial[attempt["trial_id"]] = per_trial.get(attempt["trial_id"], Spend()) + spend
        if case.time_limit is not None:
            assert not _exceeds(spend.wall_s, case.time_limit + case.overrun_s), (
                dict(attempt), spend
            )
    for trial_id, spend in per_trial.items():
        if trial_ceilings.wall_s is not None:
            assert not _exceeds(spend.wall_s, trial_ceilings.wall_s), (trial_id, spend)
        if trial_ceilings.compute is not None:
            unit, hours = trial_ceilings.compute
            assert not _exceeds(spend.compute_s(unit), hours * 3600), (trial_id, spend)
        if trial_ceilings.money is not None:
            assert not _exceeds(spend.money, trial_ceilings.money), (trial_id, spend)

    # A ceiling too small for one trial ends the campaign at once, having spent nothing;
    # one that clearly fits a trial (of the campaign's size) lets the first one start.
    if case.max_trials != 0 and nothing_fits(case):
        assert (result.status, result.end_reason) == ("budget_exhausted", "budget_exhausted")
        assert not attempts
        assert float(run["ended_at"]) == started
    if case.max_trials != 0 and one_fits(case) and case.proposals[0] not in case.resources:
        assert attempts, "a trial that fits every ceiling was never dispatched"


# -- the shards ----------------------------------------------------------------------------

@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory on a RAM disk when there is one (each case makes a store and trial
    directories; the record need not survive a crash here)."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    path = Path(tempfile.mkdtemp(prefix="dse-budget-property-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _tally(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, shard: int,
    cases: int,
) -> str:
    """Note this shard's count where every shard of this session sees it (xdist workers
    share the parent of their temporary directories); return the line to print."""
    base = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker
        base = base.parent
    tally = base / "budget-property-cases"
    tally.mkdir(exist_ok=True)
    part = tally / f"shard-{shard}.tmp"
    part.write_text(str(cases))
    part.replace(tally / f"shard-{shard}")
    counts = [int(path.read_text()) for path in tally.glob("shard-*[0-9]")]
    line = f"budget property: shard {shard + 1}/{SHARDS} checked {cases:,} generated cases"
    if len(counts) == SHARDS:
        return f"{line}; {sum(counts):,} in all"
    return f"{line}; {sum(counts):,} so far ({len(counts)} of {SHARDS} shards)"


def _print(request: pytest.FixtureRequest, line: str) -> None:
    """Write *line* to the terminal despite output capture, from an xdist worker too."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        sys.stderr.write(f"\n{line}\n")
        sys.stderr.flush()


@pytest.mark.parametrize("shard", range(SHARDS))
def test_spend_never_exceeds_a_ceiling_and_the_campaign_ends(
    shard: int, scratch: Path, tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest, record_property: Callable[[str, object], None],
) -> None:
    cases = 0

    # A fixed seed per shard: every run checks the same cases, and the shards differ.
    @seed(20_260_006 + shard)
    @settings(max_examples=CASES_PER_SHARD, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=scenarios())
    def holds(case: Scenario) -> None:
        nonlocal cases
        cases += 1
        root = Path(tempfile.mkdtemp(dir=scratch))
        out = run_case(case, root)
        try:
            check(case, out)
        finally:
            if out.store is not None:
                out.store.close()
            shutil.rmtree(root, ignore_errors=True)

    holds()
    record_property("generated_cases", cases)
    _print(request, _tally(request, tmp_path_factory, shard, cases))
    assert cases >= CASES_PER_SHARD
