"""The engine: one single-threaded loop of polling passes.

Each pass: poll the backend once → classify what ended → score complete runs only →
record → feed results back → pull new proposals lazily → coerce, hash, check constraints,
deduplicate and reuse the cache → commit the whole pass in one transaction → submit.

``waves`` mode starts up to ``max_parallelism`` trials, waits for all of them, tells the agent
the whole wave, then starts the next; ``rolling`` refills a slot in the pass that frees it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse._budget import Ledger, Spend
from dse._classify import classify_end
from dse._clock import Clock, SystemClock
from dse._data import DataVersioner
from dse._environment import CommandEnvironment, environment_digest
from dse._errors import ConfigError
from dse._hashing import ConfigHasher
from dse._protocols import TrialInfo
from dse._scoring import RESOLVED_SCORER, ScoringError, compute_score
from dse._space import ParamError
from dse._store import Batch, Store, dumps
from dse._types import (
    Evaluation,
    FailureClass,
    JobSpec,
    JobState,
    JobStatus,
    Objective,
    Observation,
    TrialStatus,
)
from dse.trial import CHECKPOINT_MARK

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from dse._backend import Backend
    from dse._campaign import Campaign
    from dse._pool import Pool
    from dse._protocols import Agent, Environment
    from dse._scoring import Scorer
    from dse._types import Resources

log = logging.getLogger("dse.engine")





@dataclass(slots=True)
class _Trial:
    row_id: int
    number: int
    proposal: int
    batch: int
    params: dict[str, Any]
    config_hash: str
    trial_id: str = ""
    spec: JobSpec | None = None
    attempt_row: int | None = None
    job_id: str | None = None
    status: TrialStatus = TrialStatus.RUNNING
    metrics: Mapping[str, float] | None = None
    score: float | None = None
    failure: FailureClass | None = None
    message: str | None = None
    waiters: list[_Trial] = field(default_factory=list)
    job_id_recorded: bool = False
    attempt: int = 1
    trial_dir: Path | None = None
    interruptions: int = 0
    ambiguous_ends: list[tuple[int, JobState]] = field(default_factory=list)
    failed_nodes: set[str] = field(default_factory=set)
    attempt_started: float | None = None
    original_status: TrialStatus | None = None
    """For a cache hit: the outcome of the trial it reuses (what the agent is told)."""
    reserved: Spend | None = None
    """The worst-case spend reserved for the current attempt (``None``: none yet)."""
    spent: Spend = field(default_factory=Spend)
    """What the trial's ended attempts spent (its per-trial ceilings count it)."""
    data_version: str | None = None
    """The data version the trial was dispatched against (expected)."""
    data_read: str | None = None
    """The data version its result says it read."""
    baseline_row: int | None = None
    """The baseline trial its score was compared against."""
    queued_at: float = 0.0
    """When its current attempt was queued for resources."""
    granted: bool = False
    """The pool has let its current attempt start (it is submitted in this pass)."""
    expected: float | None = None
    """The run time the pool expected when it started the current attempt."""
    granted_at: float = 0.0
    """When the pool let the current attempt start (it holds its resources from then)."""


@dataclass(frozen=True, slots=True)
class BestTrial:
    """The best completed trial so far (primary objective)."""

    number: int
    """Trial number."""
    params: Mapping[str, Any]
    """Its params."""
    score: float
    """Its primary objective value."""


@dataclass(slots=True)
class Stats:
    """Live counts, read by the console."""

    steps: int = 0
    proposals: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    cached: int = 0
    rejected: int = 0
    cancelled: int = 0
    interrupted: int = 0
    budget_exhausted: int = 0
    running: int = 0
    passes: int = 0
    retries: int = 0
    paused: bool = False
    best: BestTrial | None = None

    def count(
        self, status: TrialStatus, trial: _Trial, objective: Objective, *, rank: bool = True
    ) -> None:
        """Count one trial that reached *status*; keep the best completed one (among those
        that may be ranked: results about the current data)."""
        if status is TrialStatus.COMPLETED:
            self.completed += 1
            score = trial.score
            if rank and score is not None and (
                self.best is None or objective.direction.better(score, self.best.score)
            ):
                self.best = BestTrial(trial.number, trial.params, score)
        elif status is TrialStatus.FAILED:
            self.failed += 1
        elif status is TrialStatus.CANCELLED:
            self.cancelled += 1
        elif status is TrialStatus.INTERRUPTED:
            self.interrupted += 1
        elif status is TrialStatus.BUDGET_EXHAUSTED:
            self.budget_exhausted += 1


@dataclass(frozen=True, slots=True)
class CampaignResult:
    """How a campaign run ended."""

    campaign_id: int
    """Run id in the workspace record."""
    name: str
    """Campaign name."""
    status: str
    """``completed``, ``stopped``, ``cancelled`` or ``failed``."""
    end_reason: str
    """Why it ended (``agent_exhausted``, ``max_trials``, ``max_consecutive_rejections``...)."""
    stats: Stats
    """Final counts."""

    @property
    def best(self) -> BestTrial | None:
        return self.stats.best


class EngineListener:
    """Receives progress from the engine (the console implements it). Methods are no-ops."""

    def on_start(self, engine: Engine) -> None:
        """The campaign run was created in the record."""

    def on_trial_end(self, engine: Engine, number: int, status: TrialStatus) -> None:
        """A trial (or a cache hit) reached its outcome."""

    def on_pass(self, engine: Engine) -> None:
        """A polling pass was committed."""

    def on_alert(self, engine: Engine, message: str) -> None:
        """Something systematic happened (many interruptions, a failing node)."""

    def on_finish(self, engine: Engine, result: CampaignResult) -> None:
        """The campaign ended."""


_TERMINAL_STATUS = {
    "agent_exhausted": "completed",
    "max_trials": "completed",
    "agent_stalled": "completed",
    "max_consecutive_rejections": "stopped",
    "cancelled": "cancelled",
    "budget_exhausted": "budget_exhausted",
    "baseline_failed": "stopped",
}


class Engine:
    """Runs one campaign on one backend, recording everything in a store."""

    def __init__(
        self,
        campaign: Campaign,
        *,
        agent: Agent,
        backend: Backend,
        store: Store,
        environment: Environment | None = None,
        clock: Clock | None = None,
        listener: EngineListener | None = None,
        data_version: str | None = None,
        scorer: Scorer | None = None,
        agent_factory: Callable[[], Agent] | None = None,
    ) -> None:
        self.campaign = campaign
        self.agent = agent
        self._agent_factory = agent_factory
        """Makes a fresh agent like *agent*: when the data changes or a result the agent was
        told is invalidated, the agent is rebuilt from the record (see :meth:`_rebuild_agent`);
        without it, the agent keeps what it was told."""
        self._agent_stale = False
        self.backend = backend
        self.store = store
        self.environment: Environment = environment or CommandEnvironment(
            campaign.environment,
            campaign.objectives,
            param_names=campaign.space.names,
            source=str(campaign.source or "<campaign>"),
        )
        if environment is None and not campaign.environment.command and backend.runs_commands:
            # Every trial would fail the same way: say it once, before anything runs.
            raise ConfigError(
                f"{campaign.source or '<campaign>'}: environment.command: missing; the"
                f" {backend.name} backend runs each trial's command"
            )
        self.clock: Clock = clock or SystemClock()
        self.listener = listener or EngineListener()
        self.data_version = data_version
        self.stats = Stats()
        self.campaign_id = 0
        self.run_dir = Path()
        self._primary = campaign.objectives[0]
        if scorer is None:
            from dse._build import build_scorer
            from dse._plugins import PluginManager

            scorer = build_scorer(campaign, PluginManager(autoload=False))
        self.scorer: Scorer = scorer
        """Who scores complete runs; its name and version are recorded with every score."""
        self._ranking = Objective(self._primary.metric, scorer.direction)
        self._baseline_params: dict[str, Any] | None = None
        self._baselines: dict[str | None, _Trial] = {}
        """The baseline trial of each data version (scores compare against it)."""
        self._invalid_rows: set[int] = set()
        self._invalid_results: set[int] = set()
        """Rows whose result (not only a score) is flagged: never reused, even while running."""
        self._invalid_numbers: set[int] = set()
        self._invalid_hashes: dict[str, int] = {}
        self._seen_invalidation = -1
        self._baseline_given: _Trial | None = None
        self._environments: set[str] = set()
        self._hasher = ConfigHasher(dict(self.environment.identity()), data_version)
        self._versioner: DataVersioner | None = None
        self._batch = Batch()
        self._running: dict[str, _Trial] = {}
        self._by_hash: dict[str, _Trial] = {}
        self._to_submit: list[_Trial] = []
        self._retries: list[_Trial] = []
        self._interruptions: deque[tuple[float, str | None]] = deque()
        self._node_trials: dict[str, set[int]] = {}
        self._avoid: set[str] = set()
        self._paused = False
        self._systematic = False
        self._cache: dict[str, _Trial] = {}
        self._pending_obs: list[tuple[int, Observation]] = []
        self._batch_no = 0
        self._number = 0
        self._consecutive_rejections = 0
        self._budget_blocked = False
        self._done: str | None = None
        self._stop: str | None = None
        self.abandoned = False
        """True when a second interrupt ended the run without waiting for its trials."""
        self.pool: Pool | None = None
        """The pool whose resources the campaign's trials wait for (set by the pool)."""
        self.finished: CampaignResult | None = None
        """How the run ended, once it has."""
        self._cancel_requested: set[str] = set()
        poll = campaign.poll_interval or backend.default_poll_interval
        self._poll_first, self._poll_max = poll
        self._poll_wait = poll[0]
        self._overrun = float(backend.overrun_s)
        self.ledger = Ledger(campaign.budget, started_at=0.0)
        """Spent and reserved amounts against the campaign's ceilings."""
        self._check_budget()

    def _check_budget(self) -> None:
        """A ceiling on compute, money or a finishing deadline needs a finite worst case."""
        budget = self.campaign.budget
        env = self.campaign.environment
        limit = budget.trial.time_limit(env.time_limit, env.resources, self.campaign.price,
                                        self._overrun)
        where = str(self.campaign.source or "<campaign>")
        needs_limit = budget.compute is not None or budget.money is not None or (
            budget.wall_clock_s is not None and budget.on_deadline == "finish"
        )
        if limit is None and needs_limit:
            raise ConfigError(
                f"{where}: budget: a compute, money or finishing wall-clock ceiling needs a time"
                " limit per trial to reserve (set environment.time_limit or budget.trial.*)"
            )
        if limit is not None and limit <= 0:
            raise ConfigError(
                f"{where}: budget.trial: the per-trial ceilings leave no time to run on"
                f" {env.resources.cpus} CPUs and {env.resources.gpus} GPUs (the backend may"
                f" run {self._overrun:g}s past a time limit)"
            )

    # -- public ---------------------------------------------------------------------------

    def request_stop(self, reason: str = "cancelled") -> None:
        """Stop the campaign: no new trials; running trials are cancelled and recorded."""
        if self._stop is None:
            self._stop = reason

    def _stopping(self) -> bool:
        # A method, not an attribute read: listeners and signal handlers set it mid-pass.
        return self._stop is not None

    @property
    def running(self) -> int:
        return len(self._running) + len(self._to_submit) + len(self._retries)

    def run(self, *, resume: int | None = None) -> CampaignResult:
        """Run the campaign to its end and return how it ended.

        :param resume: the id of an unfinished run of this campaign to continue (after a
            crash or a cancel) instead of starting a new run.
        """
        from dse._pool import PoolConfig, run_pool

        config = PoolConfig({"slots": self.campaign.max_parallelism})
        resumed = {} if resume is None else {self.campaign.name: resume}
        return run_pool([self], config, resume=resumed)[0]

    def open(self, *, resume: int | None = None) -> None:
        """Record the run (or reopen *resume*) and rebuild its state, ready for the loop
        (:func:`dse._pool.drive` runs several campaigns' loops in one pool)."""
        campaign = self.campaign
        now = self.clock.time()
        self._resolve_baseline()  # before the run is recorded: a bad baseline records nothing
        if resume is not None:
            self.campaign_id = resume
            self.store.reopen_campaign(resume)
        else:
            self.campaign_id = self._create_run(now)
        self.ledger.started_at = self.store.campaign_started(self.campaign_id)
        workspace = campaign.workspace.resolve()
        if campaign.data is not None and self._versioner is None:
            self._versioner = DataVersioner(
                campaign.data, cache_dir=workspace,
                where=f"{campaign.source or '<campaign>'}: data",
            )
            self._set_data_version(self._versioner.compute())
        self.run_dir = workspace / campaign.name / f"run-{self.campaign_id}"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._load_cache()
        self._check_invalidations()
        if resume is not None:
            self._restore()
        self.listener.on_start(self)

    def _create_run(self, now: float) -> int:
        campaign = self.campaign
        spec = campaign_spec(campaign)
        spec[RESOLVED_SCORER] = {
            "name": self.scorer.name, "version": self.scorer.version,
            "direction": self.scorer.direction.value,
        }
        return self.store.create_campaign(
            name=campaign.name,
            source=str(campaign.source) if campaign.source else None,
            spec=spec,
            agent=f"{getattr(self.agent, 'name', type(self.agent).__name__)}"
            f"=={getattr(self.agent, 'version', '?')}",
            backend=f"{self.backend.name}=={self.backend.version}",
            mode=campaign.mode,
            max_parallelism=campaign.max_parallelism,
            now=now,
        )

    def _load_cache(self) -> None:
        for row in self.store.reusable():
            self._cache[row["config_hash"]] = _Trial(
                row_id=row["id"],
                number=row["number"],
                proposal=0,
                batch=0,
                params={},
                config_hash=row["config_hash"],
                status=TrialStatus(row["status"]),
                metrics=json.loads(row["metrics"]) if row["metrics"] else None,
                score=row["score"],
                failure=FailureClass(row["failure"]) if row["failure"] else None,
                message=row["message"],
            )

    # -- resuming -------------------------------------------------------------------------

    def _restore(self) -> None:
        """Rebuild an unfinished run from the record: trials, the agent, running attempts.

        The agent is rebuilt by replaying its logged ``propose`` and ``observe`` calls, so
        its state (and the feedback it got) is the same as before the crash. Attempts still
        running are reattached; one whose job id was never recorded is asked of the backend
        by name, and retried as lost to the restart when the backend cannot tell.
        """
        now = self.clock.time()
        attempts, rejected, by_proposal, by_row, cache_of = self._recorded()
        for key, trial in by_proposal.items():
            if key < 0:
                self._baselines[trial.data_version] = trial
        self._restore_stats(by_proposal, rejected)
        for row in self.store.spends(self.campaign_id):
            spend = Spend(**json.loads(row["spend"]))
            self.ledger.spent = self.ledger.spent + spend
            if row["trial_id"] in by_row:
                by_row[row["trial_id"]].spent = by_row[row["trial_id"]].spent + spend
        self.ledger.trials = sum(
            1 for t in by_proposal.values() if t.trial_dir is not None and t.row_id not in cache_of
        )
        # Results about other data, or flagged since, are told less than the agent was told:
        # its proposals may then differ from the recorded ones without it being at fault.
        same = not self._invalid_numbers and all(
            self._current_data(t) for t in by_proposal.values())
        observed = self._replay_agent(by_proposal, rejected, same_feedback=same)
        reattach = self._resume_attempts(now, attempts, by_proposal, cache_of)
        for row_id, original_row in cache_of.items():
            waiter, original = by_row[row_id], by_row.get(original_row)
            if (
                waiter.original_status is TrialStatus.RUNNING
                and original is not None
                and original.status is TrialStatus.RUNNING
            ):
                original.waiters.append(waiter)
        self._pending_obs = self._untold(by_proposal, observed)
        self._agent_stale = False  # just told the record as it stands
        self.backend.reattach(reattach)
        self._event(None, "resumed", {
            "running": len(self._running), "retrying": len(self._retries),
            "trials": len(by_proposal), "pending_feedback": len(self._pending_obs),
        })

    def _recorded(self) -> tuple[
        dict[int, list[Any]], dict[int, tuple[dict[str, Any], str]], dict[int, _Trial],
        dict[int, _Trial], dict[int, int],
    ]:
        """This run's record read back: (attempts by trial row, rejected proposals, trials by
        proposal (a baseline under minus its row id), trials by row, cache hit → original)."""
        store, cid, space = self.store, self.campaign_id, self.campaign.space
        names = space.names
        attempts: dict[int, list[Any]] = {}
        for row in store.attempts(cid):
            attempts.setdefault(row["trial_id"], []).append(row)
        rejected: dict[int, tuple[dict[str, Any], str]] = {}
        for row in store.events(cid, "rejected"):
            data = json.loads(row["data"])
            rejected[data["proposal"]] = (data["params"], data["reason"])
        by_proposal: dict[int, _Trial] = {}
        by_row: dict[int, _Trial] = {}
        cache_of: dict[int, int] = {}
        for row in store.trials(cid):
            raw = json.loads(row["params"])
            params = {k: raw[k] for k in names if k in raw} | raw
            trial = _Trial(
                row["id"], row["number"], row["proposal"], row["wave"], params,
                row["config_hash"], trial_id=f"{self.campaign.name}-{cid}-{row['number']}",
                status=TrialStatus(row["status"]),
                metrics=json.loads(row["metrics"]) if row["metrics"] else None,
                score=row["score"],
                failure=FailureClass(row["failure"]) if row["failure"] else None,
                message=row["message"],
                trial_dir=Path(row["trial_dir"]) if row["trial_dir"] else None,
                data_version=row["data_version"], data_read=row["data_version_read"],
            )
            trial.attempt = len(attempts.get(trial.row_id, ())) or 1
            trial.interruptions = sum(
                1 for a in attempts.get(trial.row_id, ())
                if a["state"] not in (
                    "queued", "submitting", "submitted", "pending", "running", "succeeded",
                    "cancelled",
                )
            )
            for a in attempts.get(trial.row_id, ()):
                # What the retry policy remembers: ends a backend calls ambiguous (a kill
                # nobody here sent, a vanished job) and the nodes that interrupted it.
                if a["state"] in (JobState.KILLED.value, JobState.LOST.value):
                    trial.ambiguous_ends.append((a["attempt"], JobState(a["state"])))
                if a["node"] and a["node"] != "localhost" and a["state"] not in (
                    "queued", "submitting", "submitted", "pending", "running", "succeeded"
                ):
                    trial.failed_nodes.add(a["node"])
            if row["cache_of"] is not None:
                cache_of[trial.row_id] = row["cache_of"]
                trial.status = TrialStatus.CACHED if row["ended_at"] is None else trial.status
            trial.baseline_row = None
            if trial.proposal == 0:
                # A baseline run: not the agent's proposal, so keyed apart (and never fed).
                by_proposal[-trial.row_id] = trial
            else:
                by_proposal[trial.proposal] = trial
            by_row[trial.row_id] = trial
        originals = self._original_statuses(set(cache_of.values()), by_row)
        for row_id, original_row in cache_of.items():
            by_row[row_id].original_status = originals.get(original_row)
        return attempts, rejected, by_proposal, by_row, cache_of

    def _resume_attempts(
        self, now: float, attempts: Mapping[int, list[Any]], by_proposal: Mapping[int, _Trial],
        cache_of: Mapping[int, int],
    ) -> dict[str, JobSpec]:
        """Continue the attempts of a resumed run: queue again what waited, retry what was
        lost to the restart; return the jobs still running, to reattach."""
        reattach: dict[str, JobSpec] = {}
        for trial in by_proposal.values():
            if trial.row_id in cache_of:
                continue
            if trial.status is TrialStatus.CANCELLED and trial.trial_dir is not None:
                # A cancelled run is continued: its cancelled trials run again.
                trial.status = TrialStatus.RUNNING
                self._batch.trial_ends.append(
                    ("running", None, None, None, None, None, trial.row_id)
                )
                self.stats.cancelled -= 1
                self._resubmit(trial, now, resumed_from="cancelled")
                continue
            if trial.status is not TrialStatus.RUNNING:
                continue
            self._by_hash[trial.config_hash] = trial
            last = attempts[trial.row_id][-1]
            assert trial.trial_dir is not None
            spec = self.environment.prepare(TrialInfo(
                trial.trial_id, trial.number, last["attempt"], trial.params, trial.trial_dir,
                self.data_version,
            ))
            trial.spec, trial.attempt_row = spec, last["id"]
            trial.attempt_started = trial.granted_at = last["submitted_at"]
            if last["state"] == "queued":
                # It was waiting for the pool and never submitted: it waits again, as the
                # same attempt (nothing ran, so nothing was interrupted).
                trial.spec = self._avoiding(spec, trial)
                self._retries.append(trial)
                continue
            job_id = last["job_id"] or self.backend.job_id_for(spec)
            if job_id is not None and last["state"] in (
                "submitting", "submitted", "pending", "running"
            ):
                trial.job_id, trial.job_id_recorded = job_id, last["job_id"] is not None
                reattach[job_id] = spec
                self._running[job_id] = trial
                trial.reserved = self._worst(self._avoiding(spec, trial))
                self.ledger.reserve(trial.reserved, new_trial=False)
                continue
            lost = JobStatus("", JobState.LOST, reason="the controller restarted before"
                             " the job id was recorded")
            trial.status, trial.failure = TrialStatus.INTERRUPTED, FailureClass.CONTROLLER_RESTART
            self._batch.attempt_ends.append((
                None, JobState.LOST.value, None, None, None, lost.reason, None, None, now,
                None, trial.attempt_row,
            ))
            if not self._retry(trial, lost, now):
                self._record_end(trial, now)
        return reattach

    def _untold(
        self, by_proposal: Mapping[int, _Trial], observed: set[int]
    ) -> list[tuple[int, Observation]]:
        """What the agent is still to be told: the recorded ends of its proposals not among
        *observed*, as :meth:`_observation` has them now."""
        out = []
        for proposal, trial in sorted(by_proposal.items()):
            waiting = trial.original_status is TrialStatus.RUNNING
            if proposal <= 0 or trial.row_id in self._invalid_rows:
                continue  # a baseline, or an invalidated result: never fed to the agent
            if proposal in observed or waiting or trial.status in (
                TrialStatus.RUNNING, TrialStatus.CANCELLED
            ):
                continue
            out.append((proposal, self._observation(trial)))
        return out

    def _rebuild_agent(self) -> None:
        """A fresh agent told the record again, as a resumed run's is: after the data changed
        (results about other data are told without their metrics) or a result it was told was
        invalidated (left out), so the agent never holds what it may no longer learn from."""
        self._agent_stale = False
        if self._agent_factory is None:
            return
        self._commit()  # the record replayed is the whole of it
        _, rejected, by_proposal, _, _ = self._recorded()
        self.agent = self._agent_factory()
        observed = self._replay_agent(by_proposal, rejected, same_feedback=False)
        self._pending_obs = self._untold(by_proposal, observed)
        self._event(None, "agent_rebuilt", {
            "data_version": self.data_version, "trials": len(by_proposal),
        })
        self.listener.on_alert(
            self, f"agent rebuilt from the record of {len(by_proposal)} trial(s), forgetting"
            " results about other data and invalidated ones"
        )

    def _original_statuses(
        self, rows: set[int], by_row: Mapping[int, _Trial]
    ) -> dict[int, TrialStatus]:
        out = {r: by_row[r].status for r in rows if r in by_row}
        missing = sorted(r for r in rows if r not in by_row)
        if missing:
            marks = ",".join("?" * len(missing))
            for row in self.store.query(
                f"SELECT id, status FROM trials WHERE id IN ({marks})", missing
            ):
                out[row["id"]] = TrialStatus(row["status"])
        return out

    def _observation(self, trial: _Trial) -> Observation:
        """What the agent was (or will be) told about *trial*, rebuilt from the record."""
        current = self._current_data(trial)
        return Observation(
            params=trial.params,
            status=trial.original_status or trial.status,
            metrics=(trial.metrics or {}) if current else {},
            score=trial.score if current else None,
            trial_number=trial.number,
            failure=trial.failure,
            direction=self._ranking.direction,
        )

    def _restore_stats(
        self, by_proposal: Mapping[int, _Trial], rejected: Mapping[int, Any]
    ) -> None:
        stats = self.stats
        stats.steps = sum(1 for p in by_proposal if p > 0)
        stats.proposals = max([*by_proposal, *rejected, 0])
        stats.rejected = len(rejected)
        self._number = max((t.number for t in by_proposal.values()), default=0)
        self._batch_no = max((t.batch for t in by_proposal.values()), default=0)
        primary = self._ranking
        for trial in by_proposal.values():
            status = trial.status
            if status is TrialStatus.CACHED:
                if trial.original_status is not TrialStatus.RUNNING:
                    stats.cached += 1  # a cache hit still waiting for its original is not
            else:
                stats.count(status, trial, primary, rank=self._rankable(trial))
                stats.started += 1
        trailing = 0
        for proposal in range(stats.proposals, 0, -1):
            if proposal not in rejected:
                break
            trailing += 1
        self._consecutive_rejections = trailing

    def _replay_agent(
        self, by_proposal: Mapping[int, _Trial], rejected: Mapping[int, tuple[Any, str]],
        *, same_feedback: bool = True,
    ) -> set[int]:
        """Replay the agent's logged calls; return the proposals it has been told about.
        Without *same_feedback* (a rebuild told less than the agent was) its proposals may
        differ from the recorded ones, and that is no sign of a nondeterministic agent."""
        observed: set[int] = set()
        diverged: str | None = None
        space = self.campaign.space

        def params_of(proposal: int) -> Mapping[str, Any]:
            if proposal in by_proposal:
                return by_proposal[proposal].params
            params: Mapping[str, Any] = rejected[proposal][0]
            return params

        for entry in self.store.agent_log(self.campaign_id):
            numbers = json.loads(entry["proposals"])
            if entry["kind"] == "propose":
                in_flight = [params_of(p) for p in json.loads(entry["in_flight"] or "[]")]
                got = list(self.agent.propose(entry["n"], in_flight))[: entry["n"]]
                if diverged is None and len(got) < len(numbers):
                    diverged = f"asked for {entry['n']}, got {len(got)} instead of {len(numbers)}"
                for raw, proposal in zip(got, numbers, strict=False):
                    if diverged is not None:
                        break
                    try:
                        same = space.coerce(raw) == dict(params_of(proposal))
                    except ParamError:
                        same = dict(raw) == dict(params_of(proposal))
                    if not same:
                        diverged = f"proposal {proposal} differs"
                continue
            observations = []
            for proposal in numbers:
                if proposal in rejected:
                    params, reason = rejected[proposal]
                    observations.append(Observation(params=params, status=None, rejected=reason))
                elif by_proposal[proposal].row_id not in self._invalid_rows:
                    # An invalidated result is left out: the rebuilt agent never learns it.
                    observations.append(self._observation(by_proposal[proposal]))
            self.agent.observe(observations)
            observed.update(numbers)
        if diverged is not None and same_feedback:
            message = (
                f"the agent did not replay as recorded ({diverged}); it is not deterministic,"
                " so its state after the restart may differ"
            )
            self._event(None, "agent_replay_diverged", {"detail": diverged})
            self.listener.on_alert(self, message)
        return observed

    def _resubmit(self, trial: _Trial, now: float, *, resumed_from: str) -> None:
        """A new attempt of *trial* that is not an interruption (a cancelled trial resumed)."""
        assert trial.trial_dir is not None
        spec = self.environment.prepare(TrialInfo(
            trial.trial_id, trial.number, trial.attempt + 1, trial.params, trial.trial_dir,
            self.data_version,
        ))
        self._queue_attempt(trial, spec, now, after=resumed_from, cause=resumed_from, node=None)
        self._by_hash[trial.config_hash] = trial

    def _queue_attempt(
        self, trial: _Trial, spec: JobSpec, now: float, *, after: str, cause: str,
        node: str | None,
    ) -> None:
        """Record the next attempt of *trial* (intent first) and queue it for submission."""
        assert trial.trial_dir is not None
        resumed = (trial.trial_dir / "checkpoint" / CHECKPOINT_MARK).exists()
        trial.spec = self._avoiding(spec, trial)
        trial.attempt = spec.attempt
        trial.attempt_row = self.store.new_attempt_id()
        trial.attempt_started = now
        trial.job_id, trial.job_id_recorded = None, False
        trial.status, trial.failure, trial.message = TrialStatus.RUNNING, None, None
        self._batch.attempts.append((
            trial.attempt_row, trial.row_id, spec.attempt, self.backend.name, None,
            self._queued_state(), now, int(resumed),
        ))
        self._event(trial.row_id, "retry", {
            "trial": trial.number, "attempt": spec.attempt, "after": after, "class": cause,
            "node": node, "resumed": resumed,
        })
        self._retries.append(trial)

    def _avoiding(self, spec: JobSpec, trial: _Trial) -> JobSpec:
        """*spec* told to avoid the suspect nodes and those that interrupted *trial*, with the
        time limit that keeps it within the per-trial ceilings."""
        avoid = self._avoid | trial.failed_nodes
        limit = self.campaign.budget.trial.time_limit(
            spec.time_limit, spec.resources, self.campaign.price, self._overrun, trial.spent
        )
        if not avoid and limit == spec.time_limit:
            return spec
        return dataclasses.replace(
            spec, avoid_nodes=tuple(sorted(avoid)) or spec.avoid_nodes, time_limit=limit
        )

    # -- data versions --------------------------------------------------------------------

    def _set_data_version(self, version: str) -> None:
        """Make *version* the current one: new trials are dispatched (and deduplicated)
        against it, and "best so far" counts only its results."""
        self.data_version = version
        self._hasher = ConfigHasher(dict(self.environment.identity()), version)
        self.stats.best = None

    def _check_data_version(self) -> None:
        """Before a dispatch batch: has the data changed since it was last read?"""
        if self._versioner is None:
            return
        version = self._versioner.compute()
        if version != self.data_version:
            old = self.data_version
            self._event(None, "data_version_changed", {"old": old, "new": version})
            self.listener.on_alert(
                self, f"data changed: version {version} (was {old}); later trials use it"
            )
            self._set_data_version(version)
            self._agent_stale = True  # what it learnt about the old data must go

    def _rankable(self, trial: _Trial) -> bool:
        """Whether *trial* may count for "best so far": a valid result about current data."""
        return self._current_data(trial) and trial.row_id not in self._invalid_rows

    def _current_data(self, trial: _Trial) -> bool:
        """Whether *trial*'s result is about the current data (what the agent may learn from
        and rankings may use): the version it read, else the one it was dispatched against."""
        version = trial.data_read or trial.data_version
        return self.data_version is None or version is None or version == self.data_version

    # -- budget ---------------------------------------------------------------------------

    def _worst(self, spec: JobSpec) -> Spend:
        """The most one attempt of *spec* can spend: its time limit plus the backend's
        overrun, times its resources, priced (unbounded time: only wall and trial counts)."""
        return self._worst_case(spec.time_limit, spec.resources)

    def _worst_case(self, time_limit: float | None, resources: Resources) -> Spend:
        if time_limit is None:
            return Spend()
        wall = time_limit + self._overrun
        return Spend(wall, wall * resources.cpus, wall * resources.gpus, wall,
                     wall * self.campaign.price.per_second(resources))

    def _affordable(self, want: int, now: float) -> tuple[int, str | None]:
        """How many of *want* new trials (of the campaign's resources) the ledger can
        reserve now, and why not more."""
        if not self.ledger.budget.limited:
            return want, None
        env = self.campaign.environment
        limit = self.campaign.budget.trial.time_limit(
            env.time_limit, env.resources, self.campaign.price, self._overrun
        )
        return self.ledger.affordable(self._worst_case(limit, env.resources), now, want)

    def _reserve(self, trial: _Trial, now: float, *, new_trial: bool) -> str | None:
        """Reserve the worst case of *trial*'s next attempt; the refusal if it cannot be."""
        assert trial.spec is not None
        worst = self._worst(trial.spec)
        why = self.ledger.refusal(worst, now, new_trial=new_trial)
        if why is None:
            self.ledger.reserve(worst, new_trial=new_trial)
            trial.reserved = worst
        return why

    def _charge(self, trial: _Trial, status: JobStatus, ended_at: float) -> Spend:
        """What an ended attempt spent: its run time (or the backend's accounting), priced."""
        assert trial.spec is not None
        started = status.started_at
        elapsed = max(ended_at - started, 0.0) if started is not None else 0.0
        return self.campaign.price.charge(elapsed, trial.spec.resources, status.usage)

    def _settle(self, trial: _Trial, actual: Spend | None) -> None:
        """Replace *trial*'s reservation with what its attempt actually spent, and record it;
        ``None``: the backend never confirmed the end, so it is charged its reservation."""
        reserved, trial.reserved = trial.reserved or Spend(), None
        actual = reserved if actual is None else actual
        self.ledger.settle(reserved, actual)
        trial.spent = trial.spent + actual
        self._batch.attempt_spend.append((dumps(actual.as_dict()), trial.attempt_row))

    def _admit_retries(self, now: float) -> None:
        """Queue the retries the budget can afford; end those it never will."""
        waiting = []
        for trial in self._retries:
            why = self._reserve(trial, now, new_trial=False)
            if why is None:
                self._queue(trial, now)
            else:
                waiting.append((trial, why))
        self._retries.clear()
        if not waiting:
            return
        if self._running or self._to_submit:
            self._retries.extend(trial for trial, _ in waiting)
            return
        # Nothing runs, so nothing will free a reservation: these retries never fit.
        for trial, why in waiting:
            trial.status = TrialStatus.INTERRUPTED
            trial.message = f"not retried: {why}"
            self._batch.attempt_ends.append((
                None, JobState.CANCELLED.value, None, None, None, trial.message, None, None,
                now, None, trial.attempt_row,
            ))
            self._forget_running(trial)
            self._record_end(trial, now)

    def _check_deadline(self, now: float) -> None:
        """At the wall-clock ceiling, stop (cancelling what runs, unless it may finish)."""
        deadline = self.ledger.deadline
        if deadline is None or now < deadline or self._done == "budget_exhausted":
            return
        if self._done is not None and (self._running or self._retries):
            self._done = None  # work was left when the clock ran out: that is why it ended
        self._budget_exhausted("wall-clock ceiling reached")
        if self.campaign.budget.on_deadline == "cancel" and self._running:
            self._stop = "budget_exhausted"

    def _budget_exhausted(self, why: str) -> None:
        if self._done is None:
            self._done = "budget_exhausted"
            self._event(None, "budget_exhausted", {
                "reason": why, "spent": self.ledger.spent.as_dict(),
                "reserved": self.ledger.reserved.as_dict(),
            })
            self.listener.on_alert(self, f"budget exhausted: {why}")

    # -- the loop (driven by dse._pool.drive, one pass at a time) -----------------------------

    def _live(self) -> bool:
        """Whether the loop goes on: something runs, waits to be retried or for resources, or
        a pause is waited out."""
        return bool(
            self._running or self._retries or self._to_submit or self._waiting_out_pause()
        )

    def _pass(self) -> bool:
        """One polling pass: apply what changed, then queue what may start; False when the
        campaign stopped in it (what ran is cancelled and recorded)."""
        statuses = self.backend.poll()
        self.stats.passes += 1
        if self.backend.last_pass_commands:
            self._event(None, "backend_commands", {
                "pass": self.stats.passes, "commands": self.backend.last_pass_commands,
            })
        changed = self._apply(statuses)
        self._poll_wait = (
            self._poll_first if changed else min(self._poll_wait * 2, self._poll_max)
        )
        if self._stopping():
            self._commit()
            self._cancel_all()
            return False
        self._dispatch()
        self._commit()
        return True

    def _close(self, *, deliver: bool = True) -> None:
        """End the run: the last results are told too (the loop stops pulling once the agent
        is done or max_trials is reached, not once the agent has heard every trial)."""
        if self.finished is not None:
            return
        if deliver:
            self._deliver()
        reason = self._stop or self._done or "agent_exhausted"
        self._finish(_TERMINAL_STATUS.get(reason, "completed"), reason)

    def _abandon(self) -> None:
        """Asked twice to stop: cancel without waiting and leave a consistent record; trials
        still running are reattached when the campaign is resumed."""
        self.request_stop("cancelled")
        self.abandoned = True
        self._cancel_requested.update(self._running)
        self.backend.cancel(list(self._running))
        self._commit()
        self._close(deliver=False)

    def _crash(self, exc: BaseException) -> None:
        """The loop raised: cancel what runs and record the run as failed."""
        self._stop = self._stop or "error"
        self._event(None, "error", {"error": f"{type(exc).__name__}: {exc}"})
        try:
            self._cancel_all()
        finally:
            self._finish("failed", f"error: {type(exc).__name__}")

    def _waiting_out_pause(self) -> bool:
        """Dispatch is paused with nothing running: the campaign waits for the interruptions
        to leave the window, then carries on (it has not ended)."""
        return self._paused and not self._done and not self._stop

    def _dispatch(self) -> None:
        """Queue the waiting retries and pull new trials, unless dispatch is paused."""
        now = self.clock.time()
        self._check_deadline(now)
        self._check_pause(now)
        if not self._paused or (self._done == "budget_exhausted" and not self._running):
            # Past the wall-clock ceiling a paused campaign still ends its waiting retries.
            self._admit_retries(now)
            self._refill()

    def _wait_for(self) -> tuple[float, bool]:
        """How long to wait before the next pass, and whether to ask the backend (which may
        return sooner, when a job changed)."""
        if self._paused and not self._running and self._interruptions:
            # Nothing to poll: sleep until the oldest interruption leaves the window.
            oldest = self._interruptions[0][0]
            now = self.clock.time()
            left = max(oldest + self.campaign.interruption_window - now, self._poll_wait, 1e-3)
            deadline = self.ledger.deadline
            if deadline is not None and now < deadline:
                left = min(left, deadline - now)
            return left, False
        wait = self._poll_wait
        deadline = self.ledger.deadline
        if deadline is not None and self._done != "budget_exhausted":
            wait = max(min(wait, deadline - self.clock.time()), 0.0)
        return wait, True

    def _wait(self) -> None:
        wait, ask = self._wait_for()
        # Asked even with no wait: a backend may know nothing changes before some time.
        if not ask or (not self.backend.wait(wait) and wait > 0):
            self.clock.sleep(wait)

    def _refill(self) -> None:
        waves = self.campaign.mode == "waves"
        while not self._done and not self._stop:
            busy = len(self._running) + len(self._to_submit) + len(self._retries)
            if waves and busy:
                return
            self._deliver()
            room = self.campaign.max_parallelism - busy
            if not waves and self.pool is not None:
                room = self.pool.room(self)
            started = self._fill(room)
            if started or busy or not self._pending_obs:
                return

    def _fill(self, slots: int) -> int:
        """Pull proposals until *slots* trials started; return how many started."""
        started = 0
        campaign = self.campaign
        self._batch_no += 1
        self._budget_blocked = False
        self._check_data_version()
        if self._agent_stale:
            self._rebuild_agent()
        waiting = self._await_baseline(slots)
        if waiting is not None:
            return waiting
        while slots > 0 and not self._done and not self._stop and not self._budget_blocked:
            if campaign.max_trials is not None and self.stats.steps >= campaign.max_trials:
                self._done = "max_trials"
                break
            want = slots
            if campaign.max_trials is not None:
                want = min(want, campaign.max_trials - self.stats.steps)
            want, why = self._affordable(want, self.clock.time())
            if want == 0:
                if not self._running and not self._to_submit and not self._retries:
                    self._budget_exhausted(why or "budget")
                break
            flying = [*self._running.values(), *self._to_submit]
            in_flight = [t.params for t in flying]
            proposals = list(self.agent.propose(want, in_flight))
            if len(proposals) > want:
                self._event(None, "agent_overproposed", {"asked": want, "got": len(proposals)})
                proposals = proposals[:want]
            first = self.stats.proposals + 1
            log = self._batch.agent_log
            entry = len(log)
            log.append(())  # filled in below; it must precede the observe calls _take logs
            if not proposals:
                log[entry] = (self.campaign_id, "propose", want, "[]",
                              dumps([t.proposal for t in flying]))
                if self.agent.exhausted:
                    self._done = "agent_exhausted"
                elif not self._running and not self._to_submit and not self._pending_obs:
                    self._done = "agent_stalled"
                break
            try:
                for raw in proposals:
                    took = self._take(raw)
                    slots -= took
                    started += took
                    if self._done or self._stopping() or self._budget_blocked:
                        break
            finally:
                # Only the proposals the engine took get numbers; a replay compares those.
                log[entry] = (
                    self.campaign_id, "propose", want,
                    dumps(list(range(first, self.stats.proposals + 1))),
                    dumps([t.proposal for t in flying]),
                )
        return started

    def _take(self, raw: Mapping[str, Any]) -> int:
        """Turn one proposal into a trial, a cache hit or a rejection; 1 if it took a slot."""
        stats = self.stats
        stats.proposals += 1
        proposal = stats.proposals
        try:
            params = self.campaign.space.coerce(raw)
        except ParamError as exc:
            self._reject(proposal, dict(raw), f"outside the space: {exc}")
            return 0
        for constraint in self.campaign.constraints:
            if not constraint(params):
                self._reject(proposal, params, f"constraint {constraint.text!r}")
                return 0
        self._consecutive_rejections = 0
        stats.steps += 1
        trial = self._new_trial(params, proposal)
        return 1 if trial.status is TrialStatus.RUNNING else 0

    def _new_trial(self, params: dict[str, Any], proposal: int) -> _Trial:
        """Make *params* a trial, or a cache hit, of proposal *proposal* (0: the baseline);
        it is dispatched (status ``running``) when it took a slot."""
        stats = self.stats
        params_json = self._hasher.canonical(params)
        digest = self._hasher.digest(params_json)
        self._number += 1
        number = self._number
        now = self.clock.time()
        row_id = self.store.new_trial_id()
        trial = _Trial(row_id, number, proposal, self._batch_no, params, digest)
        trial.data_version = self.data_version
        original = self._reusable(digest)
        if original is not None:
            trial.status = TrialStatus.CACHED
            finished = original.status.is_finished()
            if finished:
                self._rescore(trial, original)
            self._batch.trials.append((
                row_id, self.campaign_id, number, proposal, self._batch_no, digest,
                params_json, TrialStatus.CACHED.value,
                original.failure.value if finished and original.failure else None,
                trial.message if finished else None,
                dumps(original.metrics) if finished and original.metrics is not None else None,
                trial.score if finished else None, original.row_id, None, now,
                now if finished else None,
            ))
            if finished:
                self._cached_end(trial, original)
            else:
                original.waiters.append(trial)
            return trial
        trial.trial_id = f"{self.campaign.name}-{self.campaign_id}-{number}"
        replaced = self._invalid_hashes.get(digest)
        if replaced is not None:
            # The trial it re-runs was invalidated: a new trial, linked to the one it replaces.
            self._batch.trial_links.append((None, replaced, row_id))
            self._event(row_id, "replaces", {"trial": number, "replaces": replaced})
        trial_dir = self.run_dir / f"{number:06d}"
        try:
            # A directory left by a controller that died before committing this trial is
            # reused: nothing ran in it, since submission follows the commit.
            with contextlib.suppress(FileExistsError):
                os.mkdir(trial_dir)
            spec = self.environment.prepare(
                TrialInfo(trial.trial_id, number, 1, params, trial_dir, self.data_version)
            )
        except Exception as exc:  # noqa: BLE001 - a trial that cannot be prepared fails alone
            trial.status = TrialStatus.FAILED
            trial.failure = FailureClass.PREPARE_ERROR
            trial.message = f"{type(exc).__name__}: {exc}"
            self._batch.trials.append((
                row_id, self.campaign_id, number, proposal, self._batch_no, digest,
                params_json, trial.status.value, trial.failure.value, trial.message, None,
                None, None, str(trial_dir), now, now,
            ))
            self._cache[digest] = trial
            self._ended(trial)
            return trial
        trial.spec = spec = self._avoiding(spec, trial)
        trial.trial_dir = trial_dir
        self._batch.trial_data.append((self.data_version, None, row_id))
        why = self._reserve(trial, now, new_trial=True)
        if why is not None:
            # Its resources differ from the campaign's, and its worst case does not fit: no
            # more pulls until something ends (or the campaign ends, if nothing runs).
            self._budget_blocked = True
            if not self._running and not self._to_submit and not self._retries:
                self._budget_exhausted(why)
            trial.status = TrialStatus.BUDGET_EXHAUSTED
            trial.message = f"not dispatched: {why}"
            self._batch.trials.append((
                row_id, self.campaign_id, number, proposal, self._batch_no, digest,
                params_json, trial.status.value, None, trial.message, None, None, None,
                str(trial_dir), now, now,
            ))
            self._ended(trial)
            return trial
        trial.attempt_started = now
        trial.attempt_row = self.store.new_attempt_id()
        self._batch.trials.append((
            row_id, self.campaign_id, number, proposal, self._batch_no, digest, params_json,
            TrialStatus.RUNNING.value, None, None, None, None, None, str(trial_dir), now, None,
        ))
        self._batch.attempts.append(
            (trial.attempt_row, row_id, 1, self.backend.name, None, self._queued_state(), now,
             0)
        )
        self._queue(trial, now)
        self._by_hash[digest] = trial
        stats.started += 1
        return trial

    def _reject(self, proposal: int, params: dict[str, Any], reason: str) -> None:
        self.stats.rejected += 1
        self._consecutive_rejections += 1
        self._event(None, "rejected", {"proposal": proposal, "params": params, "reason": reason})
        self._batch.agent_log.append(
            (self.campaign_id, "observe", None, dumps([proposal]), None)
        )
        self.agent.observe([Observation(params=params, status=None, rejected=reason)])
        if self._consecutive_rejections >= self.campaign.max_consecutive_rejections:
            self._done = "max_consecutive_rejections"
            self._event(
                None, "stopped", {"reason": "max_consecutive_rejections",
                                  "count": self._consecutive_rejections},
            )

    def _queued_state(self) -> str:
        """The state a new attempt is recorded in: ``queued`` while it may wait for the
        pool's resources (it becomes ``submitting`` when granted, committed before it is
        submitted), ``submitting`` when the pool starts every queued trial at once."""
        pool = self.pool
        return "queued" if pool is not None and not pool.trivial else "submitting"

    def _queue(self, trial: _Trial, now: float) -> None:
        """Queue *trial*'s attempt for the pool's resources."""
        trial.queued_at, trial.granted = now, False
        trial.expected = None
        self._to_submit.append(trial)

    def _submit(self) -> None:
        """Submit the queued attempts the pool granted, in the order they were queued."""
        if not self._to_submit:
            return
        trials = [t for t in self._to_submit if t.granted]
        if not trials:
            return
        self._to_submit = [t for t in self._to_submit if not t.granted]
        specs = [t.spec for t in trials]
        ids = self.backend.submit(specs)  # type: ignore[arg-type]
        for trial, job_id in zip(trials, ids, strict=True):
            trial.job_id = job_id
            self._running[job_id] = trial

    def _apply(self, statuses: Sequence[JobStatus]) -> bool:
        changed = False
        now = self.clock.time()
        batch = self._batch
        for status in statuses:
            trial = self._running.get(status.job_id)
            if trial is None:
                continue
            changed = True
            if not status.state.is_finished():
                trial.job_id_recorded = True
                batch.attempt_updates.append(
                    (status.job_id, status.state.value, status.started_at, trial.attempt_row)
                )
                continue
            del self._running[status.job_id]
            self._conclude(trial, status)
            ended_at = status.ended_at or now
            if self.pool is not None:
                self.pool.ended(self, trial, status, ended_at)
            self._settle(trial, self._charge(trial, status, ended_at))
            batch.attempt_ends.append((
                status.job_id, status.state.value, status.exit_code, status.signal,
                status.node, status.reason, status.peak_rss_kb, status.started_at,
                ended_at, self._work_lost(trial, status, ended_at), trial.attempt_row,
            ))
            if status.usage:
                batch.attempt_usage.append((dumps(dict(status.usage)), trial.attempt_row))
            if trial.status is TrialStatus.INTERRUPTED and self._stopping():
                # Not retried while the campaign stops; a resumed run will run it again.
                trial.message = f"{status.state.value} while the campaign was stopping"
                trial.status, trial.failure = TrialStatus.CANCELLED, None
            elif trial.status is TrialStatus.INTERRUPTED and self._retry(trial, status, now):
                continue
            self._forget_running(trial)
            self._record_end(trial, now)
        return changed

    # -- interruptions --------------------------------------------------------------------

    def _work_lost(self, trial: _Trial, status: JobStatus, ended_at: float) -> float | None:
        """Seconds of work an unsuccessful attempt lost since its last checkpoint."""
        if trial.status is TrialStatus.COMPLETED or trial.trial_dir is None:
            return None
        started = status.started_at or trial.attempt_started
        if started is None:
            return None
        try:
            mark = (trial.trial_dir / "checkpoint" / CHECKPOINT_MARK).stat().st_mtime
        except OSError:
            mark = None
        since = max(started, mark) if mark is not None else started
        return max(ended_at - since, 0.0)

    def _retry(self, trial: _Trial, status: JobStatus, now: float) -> bool:
        """Start a new attempt of an interrupted trial if the policy allows; True if so."""
        campaign = self.campaign
        self._note_interruption(trial, status, now)
        if status.node and status.node != "localhost":
            trial.failed_nodes.add(status.node)
        if status.ambiguous:
            earlier = [a for a, state in trial.ambiguous_ends if state is status.state]
            trial.ambiguous_ends.append((trial.attempt, status.state))
            if earlier:
                # The same configuration died the same way twice: a measurement, not a flake.
                trial.status = TrialStatus.FAILED
                trial.message = (
                    f"confirmed: attempts {earlier[-1]} and {trial.attempt} both ended"
                    f" {status.state.value}" + (f" ({trial.message})" if trial.message else "")
                )
                return False
        trial.interruptions += 1
        if trial.interruptions > campaign.max_interruptions:
            cause = trial.message or (trial.failure.value if trial.failure else "interrupted")
            trial.message = (
                f"{cause}; interrupted {trial.interruptions} times"
                f" (max_interruptions = {campaign.max_interruptions})"
            )
            return False
        assert trial.spec is not None
        assert trial.trial_dir is not None
        attempt = trial.attempt + 1
        try:
            spec = self.environment.prepare(TrialInfo(
                trial.trial_id, trial.number, attempt, trial.params, trial.trial_dir,
                self.data_version,
            ))
        except Exception as exc:  # noqa: BLE001 - a trial that cannot be prepared fails alone
            trial.status = TrialStatus.FAILED
            trial.failure = FailureClass.PREPARE_ERROR
            trial.message = f"{type(exc).__name__}: {exc}"
            return False
        limit = self._avoiding(spec, trial).time_limit
        if limit is not None and limit <= 0:
            trial.status = TrialStatus.BUDGET_EXHAUSTED
            trial.message = (
                f"{trial.message or status.state.value}; its per-trial ceiling is spent"
                f" after {trial.attempt} attempts"
            )
            return False
        cause = trial.failure.value if trial.failure else status.state.value
        self._queue_attempt(
            trial, spec, now, after=status.state.value, cause=cause, node=status.node
        )
        self.stats.retries += 1
        return True

    def _note_interruption(self, trial: _Trial, status: JobStatus, now: float) -> None:
        campaign = self.campaign
        self._interruptions.append((now, status.node))
        node = status.node
        if node and node != "localhost":
            trials = self._node_trials.setdefault(node, set())
            trials.add(trial.number)
            if len(trials) == campaign.node_interruption_threshold and node not in self._avoid:
                self._avoid.add(node)
                message = (
                    f"node {node} interrupted {len(trials)} trials; avoiding it from now on"
                )
                self._event(None, "suspect_node", {"node": node, "trials": sorted(trials)})
                self.listener.on_alert(self, message)
        self._check_pause(now)

    def _check_pause(self, now: float | None = None) -> None:
        """Pause dispatch while interruptions in the window reach the threshold."""
        campaign = self.campaign
        now = self.clock.time() if now is None else now
        window = self._interruptions
        while window and window[0][0] < now - campaign.interruption_window:
            window.popleft()
        systematic = len(window) >= campaign.interruption_threshold
        paused = systematic and campaign.pause_on_interruptions
        was_systematic, self._systematic = self._systematic, systematic
        if systematic and not was_systematic:
            message = (
                f"{len(window)} interruptions in the last {campaign.interruption_window:g}s"
                + ("; dispatch paused" if paused else "")
            )
            self._event(None, "systematic_interruptions", {
                "count": len(window), "window_s": campaign.interruption_window,
                "paused": paused,
            })
            self.listener.on_alert(self, message)
        elif self._paused and not paused:
            self._event(None, "dispatch_resumed", {"count": len(window)})
            self.listener.on_alert(self, "interruptions subsided; dispatch resumed")
        self._paused = paused
        self.stats.paused = paused

    def _conclude(self, trial: _Trial, status: JobStatus) -> None:
        if status.state is JobState.SUCCEEDED:
            assert trial.spec is not None
            try:
                evaluation = self.environment.evaluate(trial.spec, status)
            except Exception as exc:  # noqa: BLE001 - a broken result never crashes the loop
                evaluation = Evaluation(
                    failure=FailureClass.INCOMPLETE_OUTPUT,
                    message=f"evaluating the result raised {type(exc).__name__}: {exc}",
                )
            trial.metrics = dict(evaluation.metrics)
            self._note_data_read(trial, evaluation.data_version)
            if evaluation.environment is not None:
                self._note_environment(trial, evaluation.environment)
            if evaluation.ok:
                try:
                    trial.score, trial.baseline_row = self._score(trial, trial.metrics)
                    trial.status = TrialStatus.COMPLETED
                except ScoringError as exc:
                    trial.status = TrialStatus.FAILED
                    trial.failure = FailureClass.SCORER_ERROR
                    trial.message = str(exc)
            else:
                trial.status = TrialStatus.FAILED
                trial.failure = evaluation.failure
                trial.message = evaluation.message
            return
        trial.status, trial.failure, trial.message = classify_end(status)
        if status.state is JobState.CANCELLED and status.job_id not in self._cancel_requested:
            # Cancelled by someone else (an operator, scancel, a previous controller that
            # was interrupted twice): the trial did nothing wrong, so it is retried.
            trial.status = TrialStatus.INTERRUPTED
            trial.failure = FailureClass.CANCELLED_OUTSIDE
            trial.message = status.reason or "cancelled outside this campaign"

    def _note_environment(self, trial: _Trial, environment: Mapping[str, Any]) -> None:
        """Stamp *trial* with the digest of the environment it ran in (stored once)."""
        digest = environment_digest(environment)
        if digest not in self._environments:
            self._environments.add(digest)
            self._batch.environments.append(
                (digest, environment.get("python"), dumps(environment.get("distributions", {})))
            )
        self._batch.trial_links.append((digest, None, trial.row_id))

    # -- scores and baselines -------------------------------------------------------------

    def _score(self, trial: _Trial, metrics: Mapping[str, float]) -> tuple[float, int | None]:
        """The scorer's score of *metrics* for *trial*, and the baseline trial it compared
        against: the baseline of the data version *trial* ran against (a baseline run is
        compared with itself)."""
        if self._baseline_params is None:
            return compute_score(self.scorer, metrics, None), None
        base = trial if trial.proposal == 0 else self._baselines.get(trial.data_version)
        if base is None or (base is not trial and base.status is not TrialStatus.COMPLETED):
            raise ScoringError(
                f"no baseline result for data version {trial.data_version or '(none)'}"
            )
        baseline = metrics if base is trial else base.metrics or {}
        return compute_score(self.scorer, metrics, baseline), base.row_id

    def _reusable(self, digest: str) -> _Trial | None:
        """The trial of config *digest* a new one would reuse: one that ended (cached), else
        one still running; never one whose result was flagged invalid, even while it runs."""
        known = self._cache.get(digest) or self._by_hash.get(digest)
        if known is None or known.row_id in self._invalid_results:
            return None
        return known

    def _forget_running(self, trial: _Trial) -> None:
        """*trial* runs no more: new trials of its config stop waiting on it (a re-run of it,
        after it was invalidated, may hold its config by now)."""
        if self._by_hash.get(trial.config_hash) is trial:
            del self._by_hash[trial.config_hash]

    def _rescore(self, trial: _Trial, original: _Trial) -> None:
        """Score a cache hit: the reused metrics, by this campaign's scorer and baseline."""
        trial.score = None
        if original.status is not TrialStatus.COMPLETED or original.metrics is None:
            return
        try:
            trial.score, trial.baseline_row = self._score(trial, original.metrics)
        except ScoringError as exc:
            trial.message = str(exc)

    def _resolve_baseline(self) -> None:
        """Read the campaign's ``[baseline]``: its params, and a given trial's result."""
        spec = self.campaign.baseline
        if spec is None:
            return
        if spec.params is not None:
            self._baseline_params = dict(spec.params)
            return
        from dse._show import find_trial

        assert spec.trial is not None
        where = f"{self.campaign.source or '<campaign>'}: baseline.trial"
        try:
            _, row = find_trial(self.store, spec.trial)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if row["metrics"] is None or row["status"] not in ("completed", "cached"):
            raise ConfigError(f"{where}: trial {spec.trial} has no result ({row['status']})")
        if row["invalidation"] is not None:
            raise ConfigError(f"{where}: trial {spec.trial} was invalidated")
        try:
            params = self.campaign.space.coerce(json.loads(row["params"]))
        except ParamError as exc:
            raise ConfigError(f"{where}: trial {spec.trial} is outside the space: {exc}") from None
        self._baseline_params = params
        given = _Trial(int(row["id"]), int(row["number"]), -1, 0, params, row["config_hash"],
                       status=TrialStatus.COMPLETED, metrics=json.loads(row["metrics"]),
                       score=row["score"])
        given.data_version = row["data_version_read"] or row["data_version"]
        self._baseline_given = given

    def _await_baseline(self, slots: int) -> int | None:
        """``None`` when trials may be dispatched: the baseline of the current data version
        has its result. Otherwise the baseline is started if a slot is free (1 is returned:
        it took it) or still runs (0); a baseline that ended without a result ends the
        campaign."""
        if self._baseline_params is None:
            return None
        version = self.data_version
        base = self._baselines.get(version)
        if base is None:
            given = self._baseline_given
            digest = self._hasher(self._baseline_params)
            known = self._reusable(digest)
            if given is not None and given.data_version == version:
                base = given
            elif known is not None and known.status is TrialStatus.RUNNING:
                return 0  # the agent's trial of the same params: its result will serve
            elif known is not None:
                base = known
            elif slots <= 0:
                return 0
            else:
                base = self._new_trial(dict(self._baseline_params), 0)
                self._event(base.row_id, "baseline", {
                    "trial": base.number, "data_version": version,
                })
            self._baselines[version] = base
            if base.status is TrialStatus.RUNNING:
                return 1
        if base.status is TrialStatus.RUNNING:
            return 0
        if base.status is TrialStatus.COMPLETED:
            return None
        if self._done is None:
            self._done = "baseline_failed"
            why = base.message or (base.failure.value if base.failure else base.status.value)
            self._event(base.row_id, "baseline_failed", {"trial": base.number, "why": why})
            self.listener.on_alert(
                self, f"the baseline (trial {base.number}) ended {base.status.value}: {why};"
                " nothing can be compared against it"
            )
        return 0

    # -- invalidation ---------------------------------------------------------------------

    def _check_invalidations(self) -> None:
        """Take in results invalidated since the last look (``dse invalidate``, possibly from
        another process): never reuse them, never feed them to the agent, never rank them."""
        last = self.store.last_invalidation()
        if last == self._seen_invalidation:
            return
        self._seen_invalidation = last
        newly = []
        for row in self.store.invalid_trials():
            row_id = int(row["id"])
            if row_id in self._invalid_rows:
                continue
            self._invalid_rows.add(row_id)
            if row["invalidation"] is not None:
                # A flagged result is never reused; a flagged score only is (scored afresh).
                self._invalid_results.add(row_id)
                if row["cache_of"] is None:  # what a re-run replaces: the trial that ran
                    self._invalid_hashes[row["config_hash"]] = row_id
                cached = self._cache.get(row["config_hash"])
                if cached is not None and cached.row_id == row_id:
                    del self._cache[row["config_hash"]]
            if int(row["campaign_id"]) == self.campaign_id:
                self._invalid_numbers.add(int(row["number"]))
                newly.append(int(row["number"]))
        if not newly:
            return
        # Those still running (or waiting on a running trial), or ended but not yet told, the
        # agent never heard of; any other it was told, and must forget.
        untold = {obs.trial_number for _, obs in self._pending_obs}
        for trial in (*self._running.values(), *self._retries, *self._to_submit):
            untold.add(trial.number)
            untold.update(waiter.number for waiter in trial.waiters)
        if any(number not in untold for number in newly):
            self._agent_stale = True
        self._pending_obs = [
            (p, obs) for p, obs in self._pending_obs
            if obs.trial_number not in self._invalid_numbers
        ]
        best = self.stats.best
        if best is not None and best.number in self._invalid_numbers:
            self.stats.best = self._best_valid()
        self._event(None, "invalidated", {"trials": sorted(newly)})
        self.listener.on_alert(
            self, f"{len(newly)} result(s) of this run were invalidated; never fed to the"
            " agent from now on"
        )

    def _best_valid(self) -> BestTrial | None:
        """The best valid completed trial of this run about the current data (from the record)."""
        best: BestTrial | None = None
        direction = self._ranking.direction
        for row in self.store.trials(self.campaign_id):
            score = row["score"]
            if (
                row["status"] != "completed" or score is None
                or int(row["id"]) in self._invalid_rows
                or (self.data_version is not None
                    and (row["data_version_read"] or row["data_version"]) not in
                    (None, self.data_version))
            ):
                continue
            if best is None or direction.better(score, best.score):
                best = BestTrial(int(row["number"]), json.loads(row["params"]), float(score))
        return best

    def _note_data_read(self, trial: _Trial, read: str | None) -> None:
        if read is None:
            return
        trial.data_read = read
        self._batch.trial_data.append((None, read, trial.row_id))
        if trial.data_version is not None and read != trial.data_version:
            self._event(trial.row_id, "data_version_mismatch", {
                "trial": trial.number, "expected": trial.data_version, "read": read,
            })
            self.listener.on_alert(
                self, f"trial {trial.number} read data version {read}, expected"
                f" {trial.data_version}"
            )

    def _record_end(self, trial: _Trial, now: float) -> None:
        if trial.status is TrialStatus.COMPLETED and trial.score is not None:
            self._record_score(trial, now)
        self._batch.trial_ends.append((
            trial.status.value,
            trial.failure.value if trial.failure else None,
            trial.message,
            dumps(trial.metrics) if trial.metrics is not None else None,
            trial.score,
            now,
            trial.row_id,
        ))
        if trial.status.is_reusable() and trial.row_id not in self._invalid_rows:
            self._cache[trial.config_hash] = trial
        self._ended(trial)
        for waiter in trial.waiters:
            if trial.status.is_reusable():
                self._rescore(waiter, trial)
                self._batch.trial_ends.append((
                    TrialStatus.CACHED.value,
                    trial.failure.value if trial.failure else None,
                    waiter.message or trial.message,
                    dumps(trial.metrics) if trial.metrics is not None else None,
                    waiter.score, now, waiter.row_id,
                ))
                self._cached_end(waiter, trial)
            else:
                waiter.status = trial.status
                self._batch.trial_ends.append(
                    (trial.status.value, None, f"reused trial {trial.number}, which ended"
                     f" {trial.status.value}", None, None, now, waiter.row_id)
                )
                self._ended(waiter, reported_status=trial.status)
        trial.waiters.clear()

    def _record_score(self, trial: _Trial, now: float) -> None:
        self._batch.scores.append((
            trial.row_id, self.scorer.name, self.scorer.version, trial.score,
            trial.baseline_row, now,
        ))

    def _cached_end(self, trial: _Trial, original: _Trial) -> None:
        """A cache hit reached its end: scored (by :meth:`_rescore`) and told to the agent."""
        trial.metrics = original.metrics
        trial.failure = original.failure
        if trial.score is not None:
            self._record_score(trial, self.clock.time())
        self.stats.cached += 1
        if (
            trial.proposal > 0 and trial.number not in self._invalid_numbers
            and original.row_id not in self._invalid_results
        ):
            # A reuse of a result flagged while it ran is flagged with it: never fed.
            self._pending_obs.append((trial.proposal, Observation(
                params=trial.params,
                status=original.status,
                metrics=original.metrics or {},
                score=trial.score,
                trial_number=trial.number,
                failure=original.failure,
                direction=self._ranking.direction,
            )))
        self.listener.on_trial_end(self, trial.number, TrialStatus.CACHED)

    def _ended(self, trial: _Trial, reported_status: TrialStatus | None = None) -> None:
        status = reported_status or trial.status
        current = self._current_data(trial)
        self.stats.count(status, trial, self._ranking, rank=self._rankable(trial))
        if (
            status is not TrialStatus.CANCELLED and trial.proposal > 0
            and trial.number not in self._invalid_numbers
        ):
            # A result about other data than the current is never fed to the agent.
            self._pending_obs.append((trial.proposal, Observation(
                params=trial.params,
                status=status,
                metrics=(trial.metrics or {}) if current else {},
                score=trial.score if current else None,
                trial_number=trial.number,
                failure=trial.failure,
                direction=self._ranking.direction,
            )))
        self.listener.on_trial_end(self, trial.number, status)

    def _deliver(self) -> None:
        self._check_invalidations()
        if not self._pending_obs:
            return
        pending = sorted(self._pending_obs, key=lambda item: item[0])
        self._pending_obs = []
        self._batch.agent_log.append(
            (self.campaign_id, "observe", None, dumps([p for p, _ in pending]), None)
        )
        self.agent.observe([obs for _, obs in pending])

    def _commit(self) -> None:
        batch = self._batch
        for trial in self._running.values():
            if not trial.job_id_recorded:
                trial.job_id_recorded = True
                batch.attempt_updates.append((trial.job_id, "submitted", None, trial.attempt_row))
        self.stats.running = self.running
        self.store.commit(batch)

    def _event(self, trial_row: int | None, kind: str, data: Mapping[str, Any]) -> None:
        self._batch.events.append(
            (self.campaign_id, trial_row, self.clock.time(), kind, dumps(data))
        )

    # -- stopping -------------------------------------------------------------------------

    def _cancel_all(self, grace: float = 30.0) -> None:
        """Cancel what runs, collect final states for a while, record the rest as cancelled."""
        now = self.clock.time()
        self._to_submit.extend(self._retries)
        self._retries.clear()
        for trial in self._to_submit:
            trial.status = TrialStatus.CANCELLED
            trial.message = "cancelled before submission"
            self._batch.attempt_ends.append((
                None, JobState.CANCELLED.value, None, None, None, trial.message, None, None,
                now, None, trial.attempt_row,
            ))
            self._settle(trial, Spend())  # never submitted: nothing spent
            self._record_end(trial, now)
        self._to_submit = []
        if self._running:
            self._event(None, "cancel", {"running": len(self._running)})
            self._cancel_requested.update(self._running)
            self.backend.cancel(list(self._running))
            deadline = now + grace
            wait = 0.0
            while self._running and self.clock.time() < deadline:
                self._apply(self.backend.poll())
                if self._running:
                    wait = min(max(wait * 2, 0.01), 0.5)
                    self.clock.sleep(wait)
            now = self.clock.time()
            for job_id, trial in list(self._running.items()):
                del self._running[job_id]
                trial.status = TrialStatus.CANCELLED
                trial.message = "cancel requested; the backend did not confirm the end"
                self._batch.attempt_ends.append((
                    job_id, JobState.CANCELLED.value, None, None, None, trial.message, None,
                    None, now, None, trial.attempt_row,
                ))
                self._settle(trial, None)
                self._record_end(trial, now)
        self._commit()

    def _finish(self, status: str, reason: str) -> CampaignResult:
        self._batch.campaign_updates.append(
            (status, reason, self.clock.time(), self.campaign_id)
        )
        self._commit()
        result = CampaignResult(self.campaign_id, self.campaign.name, status, reason, self.stats)
        self.finished = result
        self.listener.on_finish(self, result)
        return result


def campaign_spec(campaign: Campaign) -> dict[str, Any]:
    """A JSON-able description of a campaign, stored with each run."""
    space = []
    for param in campaign.space:
        entry: dict[str, Any] = {"name": param.name, "type": param.kind}
        for key in ("choices", "low", "high", "step", "log"):
            if hasattr(param, key):
                value = getattr(param, key)
                entry[key] = list(value) if isinstance(value, tuple) else value
        space.append(entry)
    env = campaign.environment
    spec: dict[str, Any] = {
        "name": campaign.name,
        "space": space,
        "objectives": [
            {"metric": o.metric, "direction": o.direction.value} for o in campaign.objectives
        ],
        "agent": campaign.agent,
        "agent_options": dict(campaign.agent_options),
        "backend": campaign.backend,
        "backend_options": {k: str(v) for k, v in campaign.backend_options.items()},
        "mode": campaign.mode,
        "max_parallelism": campaign.max_parallelism,
        "max_trials": campaign.max_trials,
        "seed": campaign.seed,
        "constraints": [c.text for c in campaign.constraints],
        "max_consecutive_rejections": campaign.max_consecutive_rejections,
        "environment": {
            "command": list(env.command),
            "shell": env.shell,
            "time_limit": env.time_limit,
            "cpus": env.resources.cpus,
            "gpus": env.resources.gpus,
            "memory_mb": env.resources.memory_mb,
            **{f"{k}_param": v for k, v in env.resource_params.items()},
            **({"time_limit_param": env.time_limit_param} if env.time_limit_param else {}),
            "code_version": env.code_version,
        },
        "budget": campaign.budget.as_dict(),
        "price": {
            "cpu_hour": campaign.price.cpu_hour, "gpu_hour": campaign.price.gpu_hour,
            "node_hour": campaign.price.node_hour, "billing_hour": campaign.price.billing_hour,
        },
        "currency": campaign.budget.currency or campaign.price.currency,
        "serves": list(campaign.serves),
        "scorer": {
            "name": campaign.scorer.name,
            "direction": campaign.scorer.direction.value if campaign.scorer.direction else None,
            "options": dict(campaign.scorer.options),
        },
        "baseline": None if campaign.baseline is None else {
            "params": dict(campaign.baseline.params) if campaign.baseline.params else None,
            "trial": campaign.baseline.trial,
        },
    }
    if campaign.lookahead:
        spec["lookahead"] = campaign.lookahead
    return spec
