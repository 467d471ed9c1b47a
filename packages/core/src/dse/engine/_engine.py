"""The engine: one campaign run, advanced one polling pass at a time.

Each pass: poll the runner once → classify what ended → score complete runs only → record →
feed results back → pull new proposals lazily → coerce, hash, check constraints, deduplicate
and reuse the cache → commit the whole pass in one transaction → submit. The loop that calls
these passes (for one campaign or several sharing a pool) is :func:`dse.pool._pool.drive`; the
engine's per-pass API is what it calls.

The engine composes parts that each own one kind of state — the live trial table
(:mod:`dse.engine._live`), the budget gate (:mod:`dse.engine._gate`), the retry policy and
interruption watch (:mod:`dse.engine._retry`), the invalidation view
(:mod:`dse.engine._invalidation`), the agent's feedback (:mod:`dse.engine._feedback`), the
baselines (:mod:`dse.engine._baseline`) — and the workers that move trials between them: the
dispatcher (:mod:`dse.engine._dispatch`), the collector (:mod:`dse.engine._collect`), results
(:mod:`dse.engine._results`), interruptions (:mod:`dse.engine._interrupt`) and resume
(:mod:`dse.engine._resume`). ``docs/architecture.md`` is the map.

``waves`` mode starts up to ``max_parallelism`` trials, waits for all of them, tells the agent
the whole wave, then starts the next; ``rolling`` refills a slot in the pass that frees it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.campaign._campaign import RESOURCE_LEAST
from dse.campaign._data import DataVersioner
from dse.engine._baseline import Baselines
from dse.engine._cadence import Cadence
from dse.engine._claims import Claims
from dse.engine._collect import Collector
from dse.engine._dispatch import Dispatcher
from dse.engine._feedback import Feedback
from dse.engine._gate import BudgetGate
from dse.engine._interrupt import Interruptions, watch_for
from dse.engine._invalidation import InvalidationView
from dse.engine._journal import Journal
from dse.engine._live import CurrentData, LiveTrial, TrialTable
from dse.engine._parts import Parts
from dse.engine._progress import ProgressReader
from dse.engine._results import Results
from dse.engine._resume import Resume
from dse.engine._retry import RetryPolicy
from dse.engine._seeding import Seeds
from dse.engine._spec import open_run, result_identity
from dse.engine._stopping import stopping_for
from dse.engine._waits import Waits
from dse.model._clock import SystemClock
from dse.model._errors import ConfigError, DseError
from dse.model._outcome import CampaignResult, RunEnd, Stats
from dse.model._spend import SPEND_METRICS
from dse.model._types import AttemptState, EndReason, Objective
from dse.plugins._campaign_scorer import build_scorer
from dse.plugins._environment import CommandEnvironment
from dse.plugins._guard import AgentGuard
from dse.plugins._plugins import PluginManager
from dse.plugins._scoring import build_score_vector
from dse.pool._pool import run_pool
from dse.pool._poolfile import PoolConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from dse.campaign._model import Campaign
    from dse.model._budget import Ledger
    from dse.model._clock import Clock
    from dse.model._outcome import Retry, TrialEnd
    from dse.model._states import TrialStatus
    from dse.model._types import JobStatus
    from dse.plugins._protocols import Agent, Environment, Runner
    from dse.plugins._scoring import Scorer
    from dse.pool._pool import Pool
    from dse.record._base import Storage

__all__ = ["Engine"]

log = logging.getLogger("dse.engine")


def check_command(campaign: Campaign, backend: Runner, where: str) -> None:
    """Refuse, before anything runs, a campaign whose every trial would fail the same way: a
    backend that runs commands with no command, resources the backend can never give, or a
    command nothing would run (the probe's trials would all fail ``missing_metric``,
    silently)."""
    command = campaign.environment.command
    if not command and backend.runs_commands:
        raise ConfigError(
            f"{where}: environment.command: missing; the {backend.name} backend runs each"
            " trial's command"
        )
    env = campaign.environment
    # The resources every trial asks (a param-set one at its least): refused here, it is one
    # line now rather than the same invalid_job for every trial.
    least = {name: RESOURCE_LEAST[name] for name in env.resource_params}
    smallest = dataclasses.replace(env.resources, **least)
    why = backend.refuse(smallest)
    if why is None and env.resources.tasks > 1:
        # A backend that runs one task per trial refuses every trial that spans more, whatever
        # its CPUs: one line now, not the same invalid_job for each trial of several nodes.
        why = backend.refuse(dataclasses.replace(smallest, nodes=env.resources.nodes,
                                                 tasks_per_node=env.resources.tasks_per_node))
    if why is not None:
        raise ConfigError(f"{where}: environment: {why}")
    if command and not backend.runs_commands:
        raise ConfigError(
            f"{where}: campaign.backend: the {backend.name} backend runs no command, but"
            " environment.command is set; use backend = \"local\" (the default with a"
            " command) or another backend that runs commands"
        )



def _judges(
    campaign: Campaign, scorer: Scorer, plugins: PluginManager, guard: AgentGuard
) -> tuple[Feedback, Baselines]:
    """What the agent is told (every objective's score in a Pareto campaign), and who scores
    complete runs (the scorer of each objective in a Pareto campaign)."""
    feedback = Feedback(scorer.direction, guard, campaign.objectives if campaign.pareto else ())
    return feedback, Baselines(scorer, build_score_vector(campaign, scorer))

class Engine:
    """Runs one campaign on one runner, recording everything in a store.

    :param agent: proposes params; :param agent_factory: makes a fresh agent like it (when
        the data changes or a result the agent was told is invalidated, the agent is rebuilt
        from the record; without a factory it keeps what it was told).
    :param backend: the :class:`~dse.Runner` trials run on (any :class:`~dse.Backend`).
    :param scorer: who scores complete runs (default: the campaign's ``[scorer]``, looked up
        in *plugins*, by default dse's own).
    """

    def __init__(
        self, campaign: Campaign, *, agent: Agent, backend: Runner, store: Storage,
        environment: Environment | None = None, clock: Clock | None = None,
        listener: EngineListener | None = None, data_version: str | None = None,
        scorer: Scorer | None = None, agent_factory: Callable[[], Agent] | None = None,
        plugins: PluginManager | None = None,
    ) -> None:
        self.campaign = campaign
        self.agent = agent
        self._agent_factory = agent_factory
        self._agent_stale = False
        self.backend = backend
        self.store = store
        where = str(campaign.source or "<campaign>")
        self.environment: Environment = environment or CommandEnvironment(
            campaign.environment, campaign.objectives, param_names=campaign.space.names,
            source=where, root=campaign.workspace.parent,
        )
        if environment is None:
            check_command(campaign, backend, where)
        self.clock: Clock = clock or SystemClock()
        backend.use_clock(self.clock)
        self.listener = listener or EngineListener()
        self.stats = Stats()
        self.campaign_id = 0
        self.run_dir = Path()
        self.plugins = plugins = plugins or PluginManager(autoload=False)
        self.scorer: Scorer = scorer or build_scorer(campaign, plugins)
        self._guard = AgentGuard.lookup(plugins, campaign.agent)
        """Who scores complete runs; its name and version are recorded with every score."""
        self.abandoned, self.reuse = False, True
        """A second interrupt ended the run without waiting for its trials; results recorded
        before this run are reused (``dse run --fresh``: no)."""
        self.pool: Pool | None = None
        """The pool whose resources the campaign's trials wait for (set by the pool)."""
        self.finished: CampaignResult | None = None
        """How the run ended, once it has."""
        self.cadence = Cadence(*(campaign.poll_interval or backend.default_poll_interval))
        self._build_parts(data_version)
        self.gate.check(campaign.environment, where=where)

    def _build_parts(self, data_version: str | None) -> None:
        campaign = self.campaign
        self.end = RunEnd()
        self.table = TrialTable()
        """The live trials: running, queued for the pool, waiting to be retried."""
        self.gate = BudgetGate(campaign.budget, campaign.price,
                               overrun_s=float(self.backend.overrun_s))
        self.journal = Journal(_Told(self, self.listener), self.clock)
        self.data = CurrentData(self.identity(), data_version)
        ranking = Objective(campaign.objectives[0].metric, self.scorer.direction)
        self.feedback, self.baselines = _judges(campaign, self.scorer, self.plugins, self._guard)
        self.seeds = Seeds(campaign, self.feedback, self.baselines)
        self.invalid = InvalidationView(0)  # its run id is set when the run is recorded
        policy = RetryPolicy(campaign.max_interruptions)
        self.results = Results(
            journal=self.journal, table=self.table, feedback=self.feedback, stats=self.stats,
            baselines=self.baselines, invalid=self.invalid, data=self.data,
            environment=self.environment, policy=policy, ranking=ranking,
            with_spend=any(o.metric in SPEND_METRICS for o in campaign.objectives),
            end=self.end, max_failures=campaign.max_consecutive_failures,
        )
        self.dispatcher = Dispatcher(Parts(
            campaign=campaign, store=self.store, journal=self.journal, table=self.table,
            gate=self.gate, feedback=self.feedback, stats=self.stats, results=self.results,
            baselines=self.baselines, invalid=self.invalid, data=self.data,
            environment=self.environment, watch=watch_for(campaign), end=self.end,
            claims=Claims(self.store, self.table, campaign.name), backend=self.backend.name,
        ))
        self.dispatcher.parts.claims.use_runner(self.backend)
        self.waits = Waits(self.dispatcher)
        self.interruptions = Interruptions(self.dispatcher, policy)
        self.collector = Collector(
            table=self.table, gate=self.gate, results=self.results,
            interruptions=self.interruptions, journal=self.journal, end=self.end,
            clock=self.clock, runner=self.backend,
            stopping=stopping_for(self.campaign, self.backend, self.plugins),
            on_attempt_end=functools.partial(_attempt_ended, self),
        )

    # -- public ---------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """What a result's identity holds besides its params and data version
        (docs/record.md, "The identity of a result")."""
        return result_identity(self.environment, self.backend)

    @property
    def ledger(self) -> Ledger:
        """Spent and reserved amounts against the campaign's ceilings."""
        return self.gate.ledger

    @property
    def data_version(self) -> str | None:
        """The data version new trials are dispatched against."""
        return self.data.version

    @property
    def running(self) -> int:
        """Trials that hold or wait for a slot."""
        return self.table.busy()

    def use_runner(self, runner: Runner) -> None:
        """Run trials on *runner* from now on (a pool's share of the backend it holds)."""
        self.backend = runner
        self.collector.use_runner(runner)
        self.dispatcher.parts.claims.use_runner(runner)

    def request_stop(self, reason: str = "cancelled") -> None:
        """Stop the campaign: no new trials; running trials are cancelled and recorded."""
        if self.end.stop is None:
            self.end.stop = EndReason(reason)

    def run(self, *, resume: int | None = None) -> CampaignResult:
        """Run the campaign to its end and return how it ended.

        :param resume: the id of an unfinished run of this campaign to continue (after a
            crash or a cancel) instead of starting a new run.
        """
        config = PoolConfig({"slots": self.campaign.max_parallelism})
        resumed = {} if resume is None else {self.campaign.name: resume}
        return run_pool([self], config, resume=resumed)[0]

    def open(self, *, resume: int | None = None) -> None:
        """Record the run (or reopen *resume*) and rebuild its state, ready for the loop."""
        campaign = self.campaign
        now = self.clock.time()
        self.baselines.resolve(campaign, self.store)  # a bad one: nothing recorded
        self.seeds.resolve(self.store, new=resume is None)
        self.campaign_id, line = open_run(
            self.store, self.journal.batch, campaign, resume=resume, reuse=self.reuse,
            scorer=self.scorer, agent=self.agent, runner=self.backend, now=now)
        if line:
            self.journal.alert(line)
        self.journal.campaign_id = self.campaign_id
        self.invalid.campaign_id = self.campaign_id
        # The wall-clock ceiling counts the time controllers drove the run: the record's
        # figure for the processes before this one, this one's on its monotonic clock.
        self.gate.open(self.clock.monotonic() - self.store.summaries.run_time(self.campaign_id))
        if campaign.budget.scope == "campaign":  # a rerun continues the campaign's ceilings
            self.gate.carry(self.store.summaries.earlier_runs(campaign.name, self.campaign_id))
        workspace = campaign.workspace.resolve()
        if campaign.data is not None and not self.data.following:
            self.data.follow(DataVersioner(campaign.data, cache_dir=workspace,
                                           where=f"{campaign.source or '<campaign>'}: data"))
            self.stats.forget_ranking()
        self.run_dir = workspace / campaign.name / f"run-{self.campaign_id}"
        self.dispatcher.dirs.open(self.run_dir, bool(getattr(self.backend, "trial_dirs", True)),
                                  new=resume is None)
        if self.pool is not None and not self.pool.trivial:
            self.dispatcher.first_state = AttemptState.QUEUED
        # Results of the record are looked up by config when proposals are claimed, never
        # loaded whole: a workspace of a million trials opens as fast as an empty one.
        self.dispatcher.parts.claims.reuse = self.reuse
        self._check_invalidations()
        _watch_progress(self, resumed=resume is not None)  # and stop trials early, if asked
        if resume is not None:
            self._restore()
        else:
            self.seeds.plant(self.agent, self.store, self.journal, self.data.version, now)
        self.dispatcher.parts.claims.reset(now, self.campaign_id)
        self.listener.on_start(self)

    def _restore(self) -> None:
        """Rebuild an unfinished run from the record (see :class:`dse.engine._resume.Resume`)."""
        reattach = Resume(self.dispatcher, self.interruptions).restore(
            self.agent, self.backend, self.clock.time())
        self._agent_stale = False  # just told the record as it stands
        self.backend.reattach(reattach)

    def _rebuild_agent(self) -> None:
        """A fresh agent told the record again, as a resumed run's is (after the data changed
        or a result it was told was invalidated), so the agent never holds what it may no
        longer learn from; without a factory the agent keeps what it was told."""
        self._agent_stale = False
        if self._agent_factory is not None:
            self.commit()  # the record replayed is the whole of it
            resume = Resume(self.dispatcher, self.interruptions)
            self.agent = resume.rebuild(self._agent_factory)

    # -- data versions and invalidation: what the agent may no longer hold ------------------

    def _check_data_version(self) -> None:
        """Before a dispatch batch: has the data changed since it was last read?"""
        change = self.data.refresh()
        if change is not None:
            old, version = change
            self.journal.event(None, "data_version_changed", {"old": old, "new": version})
            self.journal.alert(f"data changed: version {version} (was {old}); later trials use it")
            self.stats.forget_ranking()  # "best so far" counts only results about current data
            self._agent_stale = True  # what it learnt about the old data must go

    def _check_invalidations(self) -> None:
        """Take in results invalidated since the last look (``dse invalidate``, possibly from
        another process); the agent is rebuilt if it was told one of them."""
        if self.results.take_in_invalidations(self.store, self.table):
            self._agent_stale = True

    # -- the per-pass API (called by dse.pool._pool.drive) ---------------------------------------

    def is_live(self) -> bool:
        """Whether the loop goes on: something runs, waits to be retried or for resources, or
        a pause is waited out."""
        return bool(self.table.busy() or self._waiting_out_pause())

    def stop_requested(self) -> bool:
        """Whether the run was asked to stop (what runs is then cancelled)."""
        return self.end.stopping()

    def poll_pass(self) -> bool:
        """One polling pass: apply what changed, then queue what may start; False when the
        campaign stopped in it (what ran is cancelled and recorded)."""
        statuses = self.backend.poll()
        self.stats.passes += 1
        if self.backend.last_pass_commands:
            self.journal.event(None, "backend_commands", {
                "pass": self.stats.passes, "commands": self.backend.last_pass_commands,
            })
        self.cadence.passed(self.collector.apply(statuses))
        if self.end.stopping():
            self.commit()
            self.cancel_all()
            return False
        self.dispatch()
        self.commit()
        return True

    def dispatch(self) -> None:
        """Queue the waiting retries and pull new trials, unless dispatch is paused."""
        now = self.clock.time()
        self._check_deadline(self.clock.monotonic())
        self.interruptions.check_pause()
        paused = self.interruptions.paused
        if not paused or (self.end.done is EndReason.BUDGET_EXHAUSTED
                          and not self.table.running):
            self.waits.check(now)
            # Past the wall-clock ceiling a paused campaign still ends its waiting retries.
            for trial, why in self.dispatcher.admit_retries(now):
                self.collector.never_retried(trial, why, now)
            self._refill()

    def commit(self) -> None:
        """Commit the pass's changes in one transaction."""
        batch = self.journal.batch
        for trial in self.table.newly_submitted():
            assert trial.attempt_row is not None
            batch.update_attempt(row=trial.attempt_row, job_id=trial.job_id,
                                 state=AttemptState.SUBMITTED)
        self.stats.running = self.running
        self.feedback.snapshot(self.agent, batch, self.campaign_id)
        self.journal.keep_run_time(self.gate.started_at)
        self.store.commit(batch)
        self.table.recorded()

    def grant(self, trial: LiveTrial, expected: float, now: float, *, record: bool) -> None:
        """The pool lets *trial*'s queued attempt start now, expecting it to run *expected*
        seconds; with *record*, the attempt is recorded ``submitting`` (intent first)."""
        self.table.grant(trial, expected, now)
        assert trial.attempt_row is not None
        self.journal.batch.set_attempt_expected(row=trial.attempt_row, seconds=expected)
        if record:
            self.journal.batch.update_attempt(row=trial.attempt_row,
                                              state=AttemptState.SUBMITTING)

    def submit_granted(self) -> None:
        """Submit the queued attempts the pool granted, in the order they were queued."""
        trials = self.dispatcher.dirs.submitting(self.table.take_granted())
        if not trials:
            return
        ids = self.backend.submit([t.spec for t in trials if t.spec is not None])
        for trial, job_id in zip(trials, ids, strict=True):
            self.table.submitted(trial, job_id)

    def wait_plan(self) -> tuple[float, bool]:
        """How long to wait before the next pass, and whether to ask the runner (which may
        return sooner, when a job changed)."""
        watch = self.interruptions.watch
        pause = (watch.oldest + self.campaign.interruption_window
                 if watch.paused and not self.table.running and watch.oldest is not None
                 else None)  # nothing to poll: sleep until it leaves the window
        # Deadlines on the monotonic clock (the interruption window's too): a step of the wall
        # clock moves no wait.
        return self.cadence.plan(self.clock.monotonic(), deadline=self.gate.deadline,
                                 pause_until=pause,
                                 exhausted=self.end.done is EndReason.BUDGET_EXHAUSTED)

    def close(self, *, deliver: bool = True) -> None:
        """End the run: the last results are told too (the loop stops pulling once the agent
        is done or max_trials is reached, not once the agent has heard every trial)."""
        if self.finished is not None:
            return
        if deliver:
            self._deliver()
        reason = self.end.stop or self.end.done or EndReason.AGENT_EXHAUSTED
        self._finish(reason)

    def abandon(self) -> None:
        """Asked twice to stop: cancel without waiting and leave a consistent record; trials
        still running are reattached when the campaign is resumed."""
        self.request_stop("cancelled")
        self.abandoned = True
        self.collector.ask_cancel()
        self.commit()
        self.close(deliver=False)

    def crash(self, exc: BaseException) -> None:
        """The loop raised: cancel what runs and record the run as failed."""
        self.end.stop = self.end.stop or EndReason.ERROR
        self.journal.event(None, "error", {"error": f"{type(exc).__name__}: {exc}"})
        try:
            self.cancel_all()
        finally:
            # A plugin's mistake or a bad input is said in words; a bug in dse by its type.
            what = f"{type(exc).__name__}: {exc}" if isinstance(exc, DseError) else None
            self._finish(EndReason.ERROR, what or type(exc).__name__)

    # -- inside a pass ------------------------------------------------------------------------

    def _waiting_out_pause(self) -> bool:
        """Dispatch is paused with nothing running: the campaign waits for the interruptions
        to leave the window, then carries on (it has not ended)."""
        return self.interruptions.paused and not self.end.ending()

    def _check_deadline(self, now: float) -> None:
        """At the wall-clock ceiling, stop (cancelling what runs, unless it may finish)."""
        deadline = self.gate.deadline
        end = self.end
        if deadline is None or now < deadline or end.done is EndReason.BUDGET_EXHAUSTED:
            return
        if end.done is not None and (self.table.running or self.table.retries):
            end.done = None  # work was left when the clock ran out: that is why it ended
        self.dispatcher.exhaust_budget("wall-clock ceiling reached")
        if self.campaign.budget.on_deadline == "cancel" and self.table.running:
            end.stop = EndReason.BUDGET_EXHAUSTED

    def _refill(self) -> None:
        waves = self.campaign.mode == "waves"
        table, end = self.table, self.end
        while not end.ending():
            busy = table.busy()
            if waves and busy:
                return
            self._deliver()
            room = self.campaign.max_parallelism - busy
            if not waves and self.pool is not None:
                room = self.pool.room(self)
            self._fill(room)
            if self.dispatcher.blocked or not self.feedback.pending():
                # Results of this fill (cache hits) are told before the next pull, as a
                # trial's would be: a rerun asks the agent what the run it reuses asked.
                return

    def _fill(self, slots: int) -> int:
        """Pull proposals until *slots* are taken by trials or cache hits (the baseline
        first, once per data version); return how many were."""
        dispatcher = self.dispatcher
        dispatcher.wave += 1
        dispatcher.blocked = False
        self._check_data_version()
        if self._agent_stale:
            self._rebuild_agent()
        waiting = dispatcher.await_baseline(slots)
        if waiting is not None:
            return waiting
        return dispatcher.fill(self.agent, slots, self.clock.monotonic())

    def _deliver(self) -> None:
        self._check_invalidations()
        self.feedback.deliver(self.agent, self.journal.batch, self.campaign_id)

    # -- stopping -------------------------------------------------------------------------

    def cancel_all(self) -> None:
        """Cancel what runs, collect final states for a while, record the rest as cancelled."""
        self.collector.cancel_all()
        self.waits.cancel(self.clock.time())
        self.commit()

    def _finish(self, reason: EndReason, detail: str | None = None) -> CampaignResult:
        status = reason.status
        self.journal.batch.end_campaign(campaign=self.campaign_id, status=status,
                                        reason=reason.text(detail), ended_at=self.clock.time())
        self.commit()
        self.dispatcher.dirs.close()
        result = CampaignResult(self.campaign_id, self.campaign.name, status, reason, self.stats,
                                detail, self.end.why if reason is self.end.stop else None)
        self.finished = result
        self.listener.on_finish(self, result)
        return result


def _attempt_ended(engine: Engine, trial: LiveTrial, status: JobStatus, at: float) -> None:
    """Tell *engine*'s pool that an attempt ended (it learns run times from it)."""
    if engine.pool is not None:
        engine.pool.ended(engine, trial, status, at)


def _watch_progress(engine: Engine, *, resumed: bool) -> None:
    """Read the running trials' learning curves each pass (when the backend gives trials
    directories) and, with a ``[stopping]`` table, stop and promote trials by its rule; a
    *resumed* run's rule is rebuilt from the record first."""
    wanted = engine.dispatcher.dirs.wanted
    engine.collector.progress = ProgressReader() if wanted else None
    stopping = engine.collector.stopping
    if stopping is None:
        return
    spec = stopping.spec
    engine.dispatcher.parts.stopping = stopping
    population = stopping.exploits.rule.population if stopping.exploits is not None else 0
    if population > engine.campaign.max_parallelism and not resumed:
        engine.journal.alert(
            f"stopping.pbt.population = {population} but max_parallelism ="
            f" {engine.campaign.max_parallelism}: the members that wait for room are judged"
            " late, against members that ran ahead (give max_parallelism >= population)")
    feedback = engine.feedback
    feedback.max_step = spec.max_step
    baselines = engine.baselines

    def partial(trial: LiveTrial) -> float | None:
        if not trial.metrics:
            return None
        try:
            return baselines.score(trial, trial.metrics)[0]
        except Exception:  # noqa: BLE001 - a partial curve may lack what the scorer needs
            return None

    feedback.partial = partial
    if resumed:
        stopping.restore(engine.store, engine.campaign_id)


class EngineListener:
    """Receives progress from the engine (the console implements it). Methods are no-ops,
    but :meth:`on_trial_ended`, which calls :meth:`on_trial_end`."""

    def on_start(self, engine: Engine) -> None:
        """The campaign run was created in the record."""

    def on_trial_end(self, engine: Engine, number: int, status: TrialStatus) -> None:
        """A trial (or a cache hit) reached its outcome."""

    def on_trial_ended(self, engine: Engine, end: TrialEnd) -> None:
        """A trial (or a cache hit) reached its outcome: what the engine calls, with the
        details; by default it calls :meth:`on_trial_end` with the number and the status."""
        self.on_trial_end(engine, end.number, end.status)

    def on_retry(self, engine: Engine, retry: Retry) -> None:
        """A trial's attempt ended in an interruption (or a cancelled trial is resumed) and a
        new attempt of the same trial is queued."""

    def on_pass(self, engine: Engine) -> None:
        """A polling pass was committed."""

    def on_alert(self, engine: Engine, message: str) -> None:
        """Something systematic happened (many interruptions, a failing node)."""

    def on_finish(self, engine: Engine, result: CampaignResult) -> None:
        """The campaign ended."""


class _Told:
    """The journal's notices about *engine*, to its *listener* (:class:`Notices`)."""

    __slots__ = ("_engine", "_listener")

    def __init__(self, engine: Engine, listener: EngineListener) -> None:
        self._engine = engine
        self._listener = listener

    def alert(self, message: str) -> None:
        self._listener.on_alert(self._engine, message)

    def trial_ended(self, end: TrialEnd) -> None:
        self._listener.on_trial_ended(self._engine, end)

    def retried(self, retry: Retry) -> None:
        self._listener.on_retry(self._engine, retry)
