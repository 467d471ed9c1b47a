"""Pools: the resources one controller shares among its campaigns, and the loop that runs them.

Every run goes through a :class:`Pool`. A campaign run alone has a pool of its own, of
``max_parallelism`` slots; ``dse run a.toml b.toml`` (or a pool file, :func:`load_pool`) puts
several campaigns in one pool, with one backend, a capacity (slots, CPUs, GPUs; on Slurm the
slots cap the outstanding jobs of the set) and a weight per campaign.

Each polling pass (:func:`drive`) every campaign applies what changed and queues the trials it
wants to start (:meth:`Pool.room` says how many it may pull); then the pool asks the
:class:`~dse.pool._scheduler.PoolScheduler` which queued trials start now (:meth:`Pool.grant`): fair
share by weight and decayed usage, one reservation (EASY backfill), bounded wait. When every
queued trial fits, all start without a plan. Each started trial's expected duration comes
from its time limit or the history of similar trials of its campaign, and is recorded with
its attempt (``attempts.expected_s``) next to the actual run time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, ClassVar

from dse.model._errors import ConfigError
from dse.model._space import Categorical, FloatRange, IntRange, Space
from dse.model._types import AttemptState, JobSpec, JobState, JobStatus, Resources
from dse.plugins._backend import Backend
from dse.pool._scheduler import (
    DurationEstimate,
    Point,
    PoolScheduler,
    Request,
    Reservation,
    Running,
    fits,
    take,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from dse.model._clock import Clock
    from dse.model._outcome import CampaignResult
    from dse.plugins._protocols import Runner
    from dse.pool._driven import Driven, PoolTrial
    from dse.pool._poolfile import PoolConfig

__all__ = ["Pool", "drive", "run_pool"]


def size_of(resources: Resources, capacity: Mapping[str, int]) -> dict[str, int]:
    """What one trial of *resources* holds of a pool that counts *capacity*'s keys."""
    held = {"slots": 1, "cpus": resources.total_cpus, "gpus": resources.total_gpus,
            "nodes": resources.nodes}
    return {k: held[k] for k in capacity}


def _smallest(engine: Driven) -> Resources:
    """The least a trial of *engine*'s campaign may hold (its resources, or the smallest
    value of the params that size it)."""
    env = engine.campaign.environment
    least: dict[str, int] = {}
    for key, name in env.resource_params.items():
        values = engine.campaign.space[name].values()
        least[key] = min(int(v) for v in values if isinstance(v, int))
    return dataclasses.replace(env.resources, **least) if least else env.resources


def ahead(engine: Driven) -> int:
    """Trials *engine* hands its backend beyond ``max_parallelism``: the backend's
    :attr:`~dse.Backend.queue_ahead`, in rolling mode, when the agent proposes ahead (it
    learns nothing from results: ``proposes_ahead = True``); else none."""
    agent, campaign = engine.agent, engine.campaign
    if campaign.mode != "rolling" or not getattr(agent, "proposes_ahead", False):
        return 0
    return max(int(getattr(engine.backend, "queue_ahead", 0)), 0)


def point_of(space: Space, params: Mapping[str, Any]) -> Point:
    """*params* as :class:`~dse.pool._scheduler.DurationEstimate` compares them."""
    out: list[float | str] = []
    for p in space:
        value = params.get(p.name)
        if isinstance(p, Categorical) or not isinstance(value, int | float):
            out.append(repr(value))
        elif isinstance(p, FloatRange) and p.log and value > 0:
            out.append((math.log(value) - math.log(p.low)) / (math.log(p.high / p.low) or 1.0))
        elif isinstance(p, IntRange | FloatRange):
            out.append((value - p.low) / ((p.high - p.low) or 1.0))
    return tuple(out)


class Pool:
    """The resources of one controller and the scheduler that hands them out.

    :param config: capacity, weights and bounds.
    """

    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self.engines: list[Driven] = []
        self.scheduler: PoolScheduler | None = None
        self.estimate = DurationEstimate()
        self.reservation: Reservation | None = None
        """The reservation the last plan made, if any."""
        self.trivial = False
        """One campaign counting slots only, pulling no further ahead than it can start: the
        plan would always start every queued trial, so none is made (set by :meth:`start`)."""
        self._used: dict[str, float] = {}
        """Dominant-resource seconds each campaign's ended attempts held while the campaigns
        competed for the pool."""
        self._final: dict[str, float] | None = None
        """The use of each campaign when the contest ended (all but one campaign had)."""
        self.backend: Runner | None = None
        self._router: _Router | None = None
        self.ahead = 0
        """How many attempts the campaign of a trivial pool hands its backend beyond those it
        runs (:func:`ahead`; set by :meth:`start`)."""
        self.parallelism: dict[str, int] = {}
        """How many trials of each campaign can run at once (its ``max_parallelism``, or
        fewer when the backend or the pool holds fewer), by name (set by :meth:`start`)."""

    def join(self, engine: Driven) -> None:
        """Add *engine*'s campaign (before :meth:`start`)."""
        if any(e.campaign.name == engine.campaign.name for e in self.engines):
            raise ConfigError(
                f"{engine.campaign.source or '<campaign>'}: campaign {engine.campaign.name!r}"
                " is in this pool twice"
            )
        self.engines.append(engine)
        engine.pool = self

    def start(self) -> None:
        """Fix the members: the shared backend and the scheduler."""
        engines = self.engines
        capacity = dict(self.config.capacity) or {
            "slots": max(e.campaign.max_parallelism for e in engines)
        }
        self.config = dataclasses.replace(self.config, capacity=capacity)
        self.trivial = (
            len(engines) == 1 and set(capacity) == {"slots"}
            and capacity["slots"] >= engines[0].campaign.max_parallelism
            and not engines[0].campaign.lookahead
        )
        weights = {e.campaign.name: self.weight(e) for e in engines}
        self.scheduler = PoolScheduler(
            capacity, weights, half_life=self.config.half_life, max_wait=self.config.max_wait,
            wait_factor=self.config.wait_factor,
            longest_first=[e.campaign.name for e in engines if e.campaign.lookahead],
        )
        for e in engines:
            big = size_of(e.campaign.environment.resources, capacity)
            if not self.scheduler.fits_pool(big):
                raise ConfigError(
                    f"{e.campaign.source or '<campaign>'}: environment: a trial needs"
                    f" {big}, more than the pool has ({capacity})"
                )
        backend = self.backend = engines[0].backend
        if any(e.backend is not backend for e in engines):
            raise ConfigError(
                f"{self.config.source}: the campaigns of a pool share one backend; build their"
                " engines with the same backend instance"
            )
        for e in engines:
            self.parallelism[e.campaign.name] = self._effective(e, backend, capacity)
        self._limit_backend(backend)
        if len(engines) > 1:
            self._router = _Router(backend)
            for e in engines:
                e.use_runner(_Share(self._router, backend))

    def _limit_backend(self, backend: Runner) -> None:
        """Tell the backend how many attempts it may start at once when the campaign of a
        trivial pool hands it more (:func:`ahead`), and fix how many more it hands."""
        alone = self.engines[0] if self.trivial and ahead(self.engines[0]) else None
        limit = None if alone is None else self.parallelism[alone.campaign.name]
        if isinstance(backend, Backend):
            backend.limit_running(limit)  # the backend may size its queue_ahead by it
        self.ahead = 0 if alone is None else ahead(alone)

    def _effective(self, engine: Driven, backend: Runner, capacity: Mapping[str, int]) -> int:
        """How many trials of *engine*'s campaign can run at once: its ``max_parallelism``,
        unless the backend or the pool holds fewer; then it is said once, in one line."""
        wanted = engine.campaign.max_parallelism
        least = _smallest(engine)
        limits: list[tuple[int, str]] = []
        room = backend.capacity(least) if isinstance(backend, Backend) else None
        if room is not None:
            limits.append((room[0], f"the {backend.name} backend runs at most {room[0]} trials"
                                    f" at once ({room[1]})"))
        for key, each in size_of(least, capacity).items():
            if each > 0 and capacity[key] // each < wanted:
                n = capacity[key] // each
                limits.append((n, f"the pool runs at most {n} trials at once ({key} ="
                                  f" {capacity[key]}, {each} per trial)"))
        n, why = min(limits, default=(wanted, ""))
        if n >= wanted:
            return wanted
        n = max(n, 1)
        engine.journal.alert(f"max_parallelism = {wanted} but {why}: running {n} at a time")
        return n

    def weight(self, engine: Driven) -> float:
        """*engine*'s campaign's weight (by its file, else its name; default 1)."""
        source = engine.campaign.source
        key = str(source.resolve()) if source is not None else engine.campaign.name
        return self.config.weights.get(key, self.config.weights.get(engine.campaign.name, 1.0))

    # -- what a campaign may pull -----------------------------------------------------------

    def _free(self) -> dict[str, int]:
        """What the running trials leave free (a granted trial is submitted, and so running,
        in the pass that grants it)."""
        free = dict(self.config.capacity)
        for e in self.engines:
            for trial in e.table.running.values():
                take(free, self._size(e, trial))
        return free

    def room(self, engine: Driven) -> int:
        """How many new trials *engine* may pull now: as many of its trials as fit in what is
        free, plus its lookahead, less what it has queued; at least one when it has none
        queued (every campaign keeps a trial at the head, or the scheduler could never pick
        it), and never more than ``max_parallelism`` running plus ``lookahead`` queued (plus
        what the backend queues itself: :func:`ahead`)."""
        campaign = engine.campaign
        table = engine.table
        queued = len(table.queued) + len(table.retries)
        cap = campaign.max_parallelism + campaign.lookahead - len(table.running) - queued
        if self.trivial:
            return cap + self.ahead  # the backend queues those itself
        size = size_of(_smallest(engine), self.config.capacity)
        free = self._free()
        fit = min((free.get(k, 0) // v for k, v in size.items() if v > 0), default=cap)
        want = max(fit, 0) + campaign.lookahead - queued
        if queued == 0:
            want = max(want, 1)
        return max(min(want, cap), 0)

    # -- starting trials --------------------------------------------------------------------

    def _size(self, engine: Driven, trial: PoolTrial) -> dict[str, int]:
        assert trial.spec is not None
        return size_of(trial.spec.resources, self.config.capacity)

    def _expected(self, engine: Driven, trial: PoolTrial) -> float:
        assert trial.spec is not None
        point = None if self.trivial else point_of(engine.campaign.space, trial.params)
        return self.estimate.estimate(engine.campaign.name, trial.spec.time_limit, point)

    def grant(self, engines: Sequence[Driven], now: float) -> None:
        """Decide which queued trials start now (``trial.granted``), and record the expected
        duration of each (the scheduler charges it to the campaign at once)."""
        queued = [(e, t) for e in engines for t in e.table.queued if not t.granted]
        if not queued:
            return
        slots = {e.campaign.name: e.campaign.max_parallelism - len(e.table.running)
                 for e in engines}
        if self.trivial or self._all_fit(queued, slots):
            # Every plan would start them all: there is nothing to decide.
            self.reservation = None
            for e, t in queued:
                self._start(e, t, now)
            return
        assert self.scheduler is not None
        by_key = {t.trial_id: (e, t) for e, t in queued}
        running = [
            Running(t.trial_id, e.campaign.name, self._size(e, t),
                    t.granted_at + (t.expected or 0.0))
            for e in self.engines for t in e.table.running.values()
        ]
        requests = [
            Request(t.trial_id, e.campaign.name, self._size(e, t), self._expected(e, t),
                    t.queued_at)
            for e, t in queued
        ]
        plan = self.scheduler.plan(requests, running, now)
        self.reservation = plan.reservation
        for r in plan.start:
            e, t = by_key[r.key]
            if slots[r.campaign] <= 0:
                continue  # the campaign runs max_parallelism trials already
            slots[r.campaign] -= 1
            self._start(e, t, now, r.duration)

    def _all_fit(
        self, queued: Sequence[tuple[Driven, PoolTrial]], slots: Mapping[str, int]
    ) -> bool:
        """Whether every queued trial fits in what is free, and within its campaign's
        ``max_parallelism``."""
        need: dict[str, int] = {}
        count: dict[str, int] = {}
        for e, t in queued:
            count[e.campaign.name] = count.get(e.campaign.name, 0) + 1
            for k, v in self._size(e, t).items():
                need[k] = need.get(k, 0) + v
        return all(n <= slots[c] for c, n in count.items()) and fits(self._free(), need)

    def _start(self, engine: Driven, trial: PoolTrial, now: float,
               expected: float | None = None) -> None:
        if expected is None:
            expected = self._expected(engine, trial)
        planned = self.scheduler is not None and not self.trivial
        engine.grant(trial, expected, now, record=planned)
        if self.scheduler is not None and planned:
            self.scheduler.charge(engine.campaign.name, self._size(engine, trial), expected, now)

    def recall(self, engines: Sequence[Driven]) -> None:
        """Rebuild what the pool knew of *engines*' resumed runs from their record: the usage
        their ended attempts were charged (decayed since), their shares and the durations
        the estimates learn from, so a restarted controller stays fair and informed."""
        ended: list[tuple[float, float, Driven, Mapping[str, Any], AttemptState]] = []
        if engines and self.trivial and not engines[0].campaign.environment.resource_params:
            # One campaign, one size of trial, no plan: a sum and the last durations do.
            e = engines[0]
            total, recent = e.store.reads.attempt_durations(e.campaign_id,
                                                            last=self.estimate.window)
            size = size_of(e.campaign.environment.resources, self.config.capacity)
            if self.scheduler is not None:
                self._use(e.campaign.name, self.scheduler.dominant(size) * total)
            for seconds in recent:
                self.estimate.observe(e.campaign.name, seconds, None)
            return
        for e in engines:
            # Params are read only when sizes or the estimates depend on them.
            params: Mapping[int, Mapping[str, Any]] = (
                e.store.reads.trial_params(e.campaign_id)
                if e.campaign.environment.resource_params or not self.trivial else {})
            ended += ((end, start, e, params.get(trial, {}), state)
                      for end, start, state, trial in e.store.reads.attempt_times(e.campaign_id))
        ended.sort(key=lambda x: x[0])
        for end, start, e, given, state in ended:
            name = e.campaign.name
            size = size_of(e.campaign.environment.resources_for(given), self.config.capacity)
            actual = max(end - start, 0.0)
            if self.scheduler is not None:
                self._use(name, self.scheduler.dominant(size) * actual)
                if not self.trivial:
                    self.scheduler.charge(name, size, actual, end)
            if state in (AttemptState.SUCCEEDED, AttemptState.FAILED):
                point = None if self.trivial else point_of(e.campaign.space, given)
                self.estimate.observe(name, actual, point)

    def ended(self, engine: Driven, trial: PoolTrial, status: JobStatus, ended_at: float) -> None:
        """An attempt of *trial* ended: count what it used, and learn its duration."""
        started = status.started_at or trial.attempt_started
        if started is None or trial.spec is None:
            return
        actual = max(ended_at - started, 0.0)
        name = engine.campaign.name
        size = self._size(engine, trial)
        scheduler = self.scheduler
        if scheduler is not None:
            self._use(name, scheduler.dominant(size) * actual)
        if scheduler is not None and not self.trivial and trial.expected is not None:
            scheduler.charge(name, size, actual - trial.expected, ended_at)
        if status.state in (JobState.SUCCEEDED, JobState.FAILED):
            # An interrupted or cancelled attempt says nothing about how long the trial takes.
            point = None if self.trivial else point_of(engine.campaign.space, trial.params)
            self.estimate.observe(name, actual, point)

    # -- what the live view shows -----------------------------------------------------------

    def _use(self, campaign: str, seconds: float) -> None:
        """Count *seconds* of the pool an ended attempt of *campaign* held, while the
        campaigns compete."""
        if self._final is None:
            self._used[campaign] = self._used.get(campaign, 0.0) + seconds

    def _use_now(self, now: float) -> dict[str, float]:
        """Each campaign's use so far: its ended attempts, and what its running ones held up
        to *now*."""
        used = {e.campaign.name: self._used.get(e.campaign.name, 0.0) for e in self.engines}
        if self.scheduler is not None:
            for e in self.engines:
                for t in e.table.running.values():
                    used[e.campaign.name] += self.scheduler.dominant(
                        self._size(e, t)) * max(now - t.granted_at, 0.0)
        return used

    def left(self, engine: Driven, now: float) -> None:
        """*engine*'s run ended at *now*: once all but one campaign have, the contest is over
        and the shares are what they were then."""
        live = sum(1 for e in self.engines if e.finished is None)
        if self._final is None and len(self.engines) > 1 and live <= 1:
            self._final = self._use_now(now)

    def shares(self, now: float) -> dict[str, tuple[float, float]]:
        """Each campaign's (target, actual) share of the pool while the campaigns competed for
        it (until all but one had ended): the target is its weight over the sum of the
        weights; the actual counts the dominant-resource seconds its attempts held then
        (those still running up to *now*)."""
        weights = {e.campaign.name: self.weight(e) for e in self.engines}
        total_weight = sum(weights.values())
        used = self._final if self._final is not None else self._use_now(now)
        total = sum(used.values())
        return {name: (weights[name] / total_weight, used[name] / total if total > 0 else 0.0)
                for name in weights}


# -- one backend shared by several campaigns -----------------------------------------------


class _Router:
    """One real poll per pass, its statuses handed to the campaign that owns each job."""

    def __init__(self, backend: Runner) -> None:
        self.backend = backend
        self.owner: dict[str, _Share] = {}
        self.inbox: dict[_Share, list[JobStatus]] = {}
        self.fresh: dict[_Share, bool] = {}

    def poll(self, share: _Share) -> list[JobStatus]:
        share.last_pass_commands = {}
        if not self.fresh.get(share):
            for status in self.backend.poll():
                owner = self.owner.get(status.job_id)
                if owner is None:
                    continue
                self.inbox.setdefault(owner, []).append(status)
                if status.state.is_finished():
                    del self.owner[status.job_id]
            for other in self.fresh:
                self.fresh[other] = True
            share.last_pass_commands = dict(self.backend.last_pass_commands)
        self.fresh[share] = False
        out, self.inbox[share] = self.inbox.get(share, []), []
        return out


class _Share(Backend):
    """A campaign's view of the pool's backend: its own jobs only."""

    name: ClassVar[str] = "shared"
    version: ClassVar[str] = "1"

    def __init__(self, router: _Router, backend: Runner) -> None:
        super().__init__()
        self._router = router
        self._real = backend
        router.fresh[self] = False
        # The real backend's identity is what the record keeps.
        self.name = backend.name  # type: ignore[misc]
        self.version = backend.version  # type: ignore[misc]
        self.default_poll_interval = backend.default_poll_interval  # type: ignore[misc]
        self.overrun_s = backend.overrun_s

    def submit(self, jobs: Sequence[JobSpec]) -> list[str]:
        ids = self._real.submit(jobs)
        for job_id in ids:
            self._router.owner[job_id] = self
        return ids

    def poll(self) -> list[JobStatus]:
        return self._router.poll(self)

    def cancel(self, job_ids: Sequence[str]) -> None:
        self._real.cancel(job_ids)

    def wait(self, timeout: float) -> bool:
        return self._real.wait(timeout)

    def reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        for job_id in jobs:
            self._router.owner[job_id] = self
        self._real.reattach(jobs)

    def job_id_for(self, job: JobSpec) -> str | None:
        return self._real.job_id_for(job)

    def still_running(self, job_id: str | None, trial_dir: Path, attempt: int) -> bool:
        real = self._real
        return isinstance(real, Backend) and real.still_running(job_id, trial_dir, attempt)

    def use_clock(self, clock: Clock) -> None:
        self._real.use_clock(clock)

    def shutdown(self, *, cancel: bool = True, wait: bool = True) -> None:
        """The pool's backend is shut down once, by whoever runs the pool."""

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:  # pragma: no cover
        raise NotImplementedError

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:  # pragma: no cover
        raise NotImplementedError

    def _cancel(self, job_ids: Sequence[str]) -> None:  # pragma: no cover
        raise NotImplementedError


# -- the loop ------------------------------------------------------------------------------


def drive(pool: Pool) -> list[CampaignResult]:
    """Run every campaign of *pool* (each already opened) to its end, one polling pass at a
    time; the results in the pool's order. A ``KeyboardInterrupt`` abandons every campaign
    still running (recorded ``cancelled``) and is raised again."""
    live = list(pool.engines)
    try:
        _loop(pool, live)
    except KeyboardInterrupt:
        # Recorded consistently (cancelled; what still runs is reattached by a resume), then
        # the interrupt goes on to the caller: a Python caller's Ctrl+C is not swallowed.
        for e in live:
            e.abandon()
        raise
    except BaseException as exc:
        for e in live:
            e.crash(exc)
        raise
    results = [e.finished for e in pool.engines]
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


def _loop(pool: Pool, live: list[Driven]) -> None:
    """Pass after pass until every campaign of *live* has ended (each leaves *live* once its
    run is recorded as ended)."""
    clock = live[0].clock
    for e in live:
        e.dispatch()
        e.commit()
    _grant(pool, live)
    for e in live:
        e.submit_granted()
    while True:
        for e in list(live):
            if e.stop_requested() or not e.is_live():
                if e.stop_requested():
                    e.cancel_all()
                e.close()
                live.remove(e)
                pool.left(e, clock.time())
        if not live:
            return
        _wait(pool, live)
        for e in list(live):
            if not e.poll_pass():
                e.close()
                live.remove(e)
                pool.left(e, clock.time())
        _grant(pool, live)
        for e in live:
            e.submit_granted()
            e.listener.on_pass(e)


def _grant(pool: Pool, live: Sequence[Driven]) -> None:
    """Let the pool start what it may; a granted attempt is recorded ``submitting`` before it
    is submitted (intent first), so a restart never takes a submitted job for a queued one."""
    if not live:
        return
    pool.grant(live, live[0].clock.time())
    if not pool.trivial:
        for e in live:
            e.commit()


WAIT_SLICE = 0.25
"""Longest single wait, in seconds: a stop asked for by a signal (SIGTERM, Ctrl+C) while the
loop waits — between passes, or paused for minutes by systematic interruptions — is acted on
within it."""


def _wait(pool: Pool, live: Sequence[Driven]) -> None:
    """Wait until the next pass: the shortest wait any campaign asks for, on the backend
    (which may return sooner, when a job changed) unless none asks it, else on the clock. A
    long wait goes in slices of :data:`WAIT_SLICE` and ends early once a campaign is asked to
    stop."""
    plans = [e.wait_plan() for e in live]
    seconds = min(s for s, _ in plans)
    ask = any(ask for _, ask in plans)
    clock = live[0].clock
    backend = pool.backend
    assert backend is not None
    if seconds <= WAIT_SLICE:
        if not (ask and backend.wait(seconds)) and seconds > 0:
            clock.sleep(seconds)
        return
    deadline = clock.monotonic() + seconds  # a step of the wall clock moves no wait
    while (left := deadline - clock.monotonic()) > 0 and not any(
            e.stop_requested() for e in live):
        step = min(left, WAIT_SLICE)
        began = clock.monotonic()
        if ask and backend.wait(step):
            if clock.monotonic() - began < 0.9 * step:
                return  # it returned early: a job may have changed
        else:
            clock.sleep(step)


def run_pool(
    engines: Sequence[Driven], config: PoolConfig, *, resume: Mapping[str, int] | None = None,
) -> list[CampaignResult]:
    """Run *engines* (which share one backend) in one pool to their ends.

    :param resume: the run to continue, by campaign name.
    """
    pool = Pool(config)
    for engine in engines:
        pool.join(engine)
    pool.start()
    resumed = []
    for engine in engines:
        run = (resume or {}).get(engine.campaign.name)
        engine.open(resume=run)
        if run is not None:
            resumed.append(engine)
    pool.recall(resumed)
    return drive(pool)
