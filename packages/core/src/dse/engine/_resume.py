"""Resuming a run: its record read back into live trials, its counts and spend restored, the
agent rebuilt by replaying its logged calls, and the attempts it left continued."""

from __future__ import annotations

import contextlib
import gc
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.engine._live import LiveTrial, recorded_trial
from dse.engine._retry import controller_lost
from dse.engine._seeding import WARM_EVENT, Seeds
from dse.engine._stopping import as_stopped
from dse.model._space import ParamError
from dse.model._types import (
    AttemptState,
    FailureClass,
    JobState,
    JobStatus,
    Observation,
    TrialStatus,
)
from dse.plugins._protocols import TrialInfo

_UNFINISHED = frozenset({TrialStatus.RUNNING, TrialStatus.CANCELLED})
"""The statuses of trials a resumed run continues (a cancelled run's cancelled trials run
again)."""

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from dse.engine._dispatch import Dispatcher
    from dse.engine._interrupt import Interruptions
    from dse.model._types import JobSpec
    from dse.plugins._protocols import Agent, Runner
    from dse.record._records import AgentCall, Attempt, Trial


@dataclass(frozen=True, slots=True)
class Recorded:
    """A run's record read back."""

    attempts: dict[int, list[Attempt]]
    """Attempt rows by trial row."""
    rejected: dict[int, tuple[dict[str, Any], str]]
    """Rejected proposals: their params and why (with a snapshot's tail, only those the resume
    needs: the ones its calls name or it has not told, and the last ones in a row)."""
    rejections: int
    """How many proposals the run rejected (all of them, read or not)."""
    by_proposal: dict[int, LiveTrial]
    """Trials by proposal (a baseline run under minus its row id)."""
    by_row: dict[int, LiveTrial]
    """Trials by row."""
    cache_of: dict[int, int]
    """Cache hit row → the row of the trial it reuses."""
    dispatched: int
    """Trials the run made a directory for (what a trials ceiling counts; not cache hits)."""


@dataclass(frozen=True, slots=True)
class Tail:
    """What follows a restored agent snapshot."""

    after: int
    """The last ``agent_log`` row the snapshot covers."""
    entries: list[AgentCall]
    """The calls logged after it (to replay)."""
    unobserved: set[int]
    """The proposals numbered and not told back by the end of the log (the snapshot's,
    with those the calls after it numbered, less those they told)."""


class Resume:
    """Reads a run back and continues it (the state it rebuilds belongs to the parts)."""

    def __init__(self, dispatcher: Dispatcher, interruptions: Interruptions) -> None:
        self._dispatcher = dispatcher
        self._interruptions = interruptions
        self._parts = dispatcher.parts

    # -- reading the record back --------------------------------------------------------------

    def read(self, tail: Tail | None = None) -> Recorded:
        """This run's record read back. Only its unfinished trials (running, or cancelled and
        to run again) are rebuilt whole — directory, attempt history; a finished one is what
        the agent and the counts need of it. With the *tail* of an agent snapshot, only the
        trials the rest of the resume needs are read (the counts come from the record)."""
        p = self._parts
        store, cid = p.store, p.journal.campaign_id
        rejected: dict[int, tuple[dict[str, Any], str]] = {}
        if tail is None:
            rows = store.reads.trials(cid)
            for event in store.reads.events(cid, "rejected"):
                data = event.data or {}
                rejected[data["proposal"]] = (data["params"], data["reason"])
            rejections = len(rejected)
        else:
            # The snapshot stands for the rest: the trials the calls after it name, and those
            # not told back yet (in flight, or ended and still to be told).
            named = {n for e in tail.entries for n in (*e.proposals, *(e.in_flight or ()))}
            needed = named | tail.unobserved
            rows = store.reads.resume_rows(cid, needed)
            rejections, rejected = store.reads.rejections(
                cid, down_to=min(needed, default=math.inf))
        live = {row.id for row in rows if row.status in _UNFINISHED}
        attempts: dict[int, list[Attempt]] = {}
        for attempt in store.reads.attempts(cid, trials=live):
            attempts.setdefault(attempt.trial_id, []).append(attempt)
        by_proposal: dict[int, LiveTrial] = {}
        by_row: dict[int, LiveTrial] = {}
        cache_of: dict[int, int] = {}
        waiting: set[int] = set()
        dispatched = 0
        for row in rows:
            trial = self._trial(row, attempts.get(row.id) if row.id in live else None)
            if row.cache_of is not None:
                cache_of[trial.row_id] = row.cache_of
                trial.status = TrialStatus.CACHED if row.ended_at is None else trial.status
                if row.ended_at is None:
                    waiting.add(trial.row_id)
            elif row.trial_dir:
                dispatched += 1
            # A baseline run: not the agent's proposal, so keyed apart (and never fed).
            by_proposal[-trial.row_id if trial.proposal == 0 else trial.proposal] = trial
            by_row[trial.row_id] = trial
        originals = self._original_statuses(set(cache_of.values()), by_row)
        for row_id, original_row in cache_of.items():
            # A cache hit the record has not ended still waits, whatever its original did.
            by_row[row_id].original_status = (
                TrialStatus.RUNNING if row_id in waiting else originals.get(original_row))
        return Recorded(attempts, rejected, rejections, by_proposal, by_row, cache_of,
                        dispatched)

    def _trial(self, row: Trial, attempts: list[Attempt] | None) -> LiveTrial:
        """*row* as a live trial; with its *attempts* (an unfinished trial), whole."""
        p = self._parts
        return recorded_trial(row, f"{p.campaign.name}-{p.journal.campaign_id}-{row.number}",
                              p.campaign.space.names, attempts)

    def _original_statuses(
        self, rows: set[int], by_row: Mapping[int, LiveTrial]
    ) -> dict[int, TrialStatus]:
        out = {r: by_row[r].status for r in rows if r in by_row}
        missing = sorted(r for r in rows if r not in by_row)
        if missing:
            out.update(self._parts.store.reads.trial_statuses(missing))
        return out

    # -- restoring --------------------------------------------------------------------------

    def restore(self, agent: Agent, runner: Runner, now: float) -> dict[str, JobSpec]:
        """Rebuild the run from the record: counts, spend, the agent, running attempts;
        return the jobs still running, to reattach (*runner* is asked the job id of an
        attempt whose id was never recorded)."""
        with collector_paused():
            tail = self._restored(agent)
            recorded = self.read(tail)
            return self._restore(agent, runner, now, recorded, tail)

    def reattach_only(self, runner: Runner, now: float) -> dict[str, JobSpec]:
        """Reopen the run only to close it (:attr:`dse.Engine.superseding`): its counts and
        spend restored and its submitted attempts reattached, to finish and be recorded; the
        agent is neither rebuilt nor told (nothing new starts in the run). Return the jobs
        to reattach."""
        with collector_paused():
            return self._restore(None, runner, now, self.read(), None)

    def _restored(self, agent: Agent) -> Tail | None:
        """Restore the run's latest agent snapshot into *agent* when the agent is to be told
        what it was told (nothing invalidated, every result about the current data); the
        calls logged after it. ``None``: no snapshot restored, the whole log is replayed."""
        p = self._parts
        store, cid = p.store, p.journal.campaign_id
        snapshot = store.reads.agent_snapshot(cid)
        # A snapshot of a record older than schema 12 lacks what it had not told back.
        if snapshot is None or snapshot.unobserved is None or p.invalid.any_in_campaign or (
            p.data.version is not None and store.reads.stale_trials(cid, p.data.version)
        ):
            return None
        if not p.feedback.guard.restore(agent, snapshot.state):
            return None
        entries = store.reads.agent_log(cid, after=snapshot.log_id)
        unobserved = set(snapshot.unobserved)
        for entry in entries:
            if entry.kind in ("propose", "enqueue", "exploit"):
                unobserved.update(entry.proposals)
            else:
                unobserved.difference_update(entry.proposals)
        return Tail(snapshot.log_id, entries, unobserved)

    def _restore(self, agent: Agent | None, runner: Runner, now: float, recorded: Recorded,
                 tail: Tail | None) -> dict[str, JobSpec]:
        p = self._parts
        for key, trial in recorded.by_proposal.items():
            if key < 0:
                p.baselines.by_version[trial.data_version] = trial
        if tail is None:
            self._restore_stats(recorded)
            dispatched, trials = recorded.dispatched, len(recorded.by_proposal)
        else:
            dispatched = self._restore_counts(recorded)
            trials = sum(p.store.reads.trial_counts(p.journal.campaign_id).values())
        if p.campaign.pareto:
            p.results.rerank(p.store)  # the front (and best): read back from the record
        self._restore_spend(recorded, dispatched)
        # Results about other data, or flagged since, are told less than the agent was told:
        # its proposals may then differ from the recorded ones without it being at fault.
        same = tail is not None or (not p.invalid.any_in_campaign and all(
            p.data.current(t) for t in recorded.by_proposal.values()))
        observed = set() if agent is None else self.replay(agent, recorded, same_feedback=same,
                                                           tail=tail)
        if agent is not None:
            p.feedback.unobserved_are(self._unobserved(observed, tail))
        reattach = self._resume_attempts(now, recorded, runner)
        for row_id, original_row in recorded.cache_of.items():
            waiter, original = recorded.by_row[row_id], recorded.by_row.get(original_row)
            if waiter.original_status is not TrialStatus.RUNNING:
                continue
            if original is not None and original.status is TrialStatus.RUNNING:
                original.waiters.append(waiter)
            else:
                # Another controller's trial (or one that ended since): the record says.
                p.claims.wait(waiter, original_row)
        if agent is not None:
            p.feedback.replace(self.untold(recorded, observed))
        p.journal.event(None, "resumed" if agent is not None else "closing", {
            "running": len(reattach), "retrying": len(p.table.retries),
            "trials": trials, "pending_feedback": p.feedback.count(),
        })
        return reattach

    def rebuild(self, factory: Callable[[], Agent]) -> Agent:
        """A fresh agent from *factory*, told the record as it stands: results about other
        data without their metrics, invalidated ones left out."""
        p = self._parts
        with collector_paused():
            recorded = self.read()
            agent = factory()
            observed = self.replay(agent, recorded, same_feedback=False)
        p.feedback.unobserved_are(self._unobserved(observed, None))
        p.feedback.replace(self.untold(recorded, observed))
        p.journal.event(None, "agent_rebuilt", {
            "data_version": p.data.version, "trials": len(recorded.by_proposal),
        })
        p.journal.alert(
            f"agent rebuilt from the record of {len(recorded.by_proposal)} trial(s), forgetting"
            " results about other data and invalidated ones"
        )
        return agent

    def _restore_spend(self, recorded: Recorded, dispatched: int) -> None:
        p = self._parts
        unfinished = [row for row, t in recorded.by_row.items() if t.status in _UNFINISHED]
        for row in p.store.reads.trial_spends(unfinished):
            trial = recorded.by_row[row.trial_id]
            trial.spent = trial.spent + row.spend
        p.gate.restore([p.store.reads.spend_total(p.journal.campaign_id)], trials=dispatched)

    def _restore_stats(self, recorded: Recorded) -> None:
        p = self._parts
        stats, by_proposal, rejected = p.stats, recorded.by_proposal, recorded.rejected
        stats.steps = sum(1 for n in by_proposal if n > 0)
        stats.proposals = max([*by_proposal, *rejected, 0])
        stats.rejected = recorded.rejections
        self._dispatcher.number = max((t.number for t in by_proposal.values()), default=0)
        self._dispatcher.wave = max((t.batch for t in by_proposal.values()), default=0)
        for trial in by_proposal.values():
            if trial.status is TrialStatus.CACHED:
                if trial.original_status is not TrialStatus.RUNNING:
                    stats.cached += 1  # a cache hit still waiting for its original is not
            else:
                stats.count(trial.status, trial.number, trial.params, trial.score,
                            p.results.ranking, rank=p.results.rankable(trial))
                stats.started += 1
        self._dispatcher.rejections = _trailing(stats.proposals, rejected)

    def _restore_counts(self, recorded: Recorded) -> int:
        """The counts of :meth:`_restore_stats`, from the record (every result ranked); how
        many trials were dispatched."""
        p = self._parts
        stats, rejected = p.stats, recorded.rejected
        ranking = p.results.ranking
        counts = p.store.reads.run_counts(p.journal.campaign_id,
                                    lower_is_better=ranking.direction.better(0.0, 1.0))
        stats.steps, stats.cached = counts.steps, counts.cached
        stats.rejected = recorded.rejections
        stats.proposals = max([counts.proposal, *rejected, 0])
        self._dispatcher.number, self._dispatcher.wave = counts.number, counts.wave
        for status, n in counts.statuses.items():
            stats.tally(status, n)
            stats.started += n
        if counts.best is not None:
            stats.rank(*counts.best, ranking)
        self._dispatcher.rejections = _trailing(stats.proposals, rejected)
        return counts.dispatched

    def _resume_attempts(
        self, now: float, recorded: Recorded, runner: Runner
    ) -> dict[str, JobSpec]:
        """Continue the attempts of a resumed run: queue again what waited, retry what was
        lost to the restart; return the jobs still running, to reattach."""
        p = self._parts
        reattach: dict[str, JobSpec] = {}
        # The attempts an earlier controller of the run asked to end (Ctrl+C twice: it left
        # without waiting): their cancelled ends are dse's own, not someone else's.
        asked = {job for event in p.store.reads.events(p.journal.campaign_id, "cancel")
                 for job in (event.data or {}).get("jobs", ())}
        # The trials an exploit made (population-based training): each attempt keeps the copy
        # of another trial's checkpoint its directory was given, even one started afresh.
        seeded = {row.trial_row for row in p.store.stops.lineage(p.journal.campaign_id)}
        for trial in recorded.by_proposal.values():
            if trial.row_id in recorded.cache_of:
                continue
            trial.seeded = trial.row_id in seeded
            if trial.status is TrialStatus.CANCELLED and trial.trial_dir is not None:
                # A cancelled run is continued: its cancelled trials run again.
                trial.status = TrialStatus.RUNNING
                p.journal.batch.end_trial(row=trial.row_id, status=TrialStatus.RUNNING,
                                          ended_at=None)
                p.stats.cancelled -= 1
                self._dispatcher.resubmit(trial, now, resumed_from="cancelled")
            elif trial.status is TrialStatus.RUNNING:
                last = recorded.attempts[trial.row_id][-1]
                self._resume_attempt(trial, last, now, runner, reattach)
        p.results.cancelled_before.update(job for job in reattach if job in asked)
        return reattach

    def _resume_attempt(self, trial: LiveTrial, last: Attempt, now: float, runner: Runner,
                        reattach: dict[str, JobSpec]) -> None:
        p = self._parts
        p.table.dispatched(trial)
        assert trial.trial_dir is not None
        spec = p.environment.prepare(TrialInfo(
            trial.trial_id, trial.number, last.attempt, trial.params, trial.trial_dir,
            p.data.version,
        ))
        trial.spec, trial.attempt_row = spec, last.id
        trial.attempt_started = trial.granted_at = last.submitted_at
        state = last.state
        if state is AttemptState.QUEUED:
            # It was waiting for the pool and never submitted: it waits again, as the
            # same attempt (nothing ran, so nothing was interrupted).
            trial.spec = self._dispatcher.avoiding(spec, trial)
            p.table.wait_retry(trial)
            return
        job_id = last.job_id or runner.job_id_for(spec)
        if job_id is not None and state.is_submitted():
            trial.job_id_recorded = last.job_id is not None
            trial.adopted = True
            reattach[job_id] = spec
            p.table.submitted(trial, job_id)
            trial.reserved = p.gate.hold(self._dispatcher.avoiding(spec, trial))
            return
        lost = JobStatus("", JobState.LOST, reason=controller_lost(
            "the job id was not recorded before the controller stopped"))
        trial.status, trial.failure = TrialStatus.INTERRUPTED, FailureClass.CONTROLLER_RESTART
        p.journal.batch.end_attempt(row=trial.attempt_row, state=AttemptState.LOST,
                                    reason=lost.reason, ended_at=now)
        if not self._interruptions.retry(trial, lost, now):
            p.results.record_end(trial, now)

    # -- the agent --------------------------------------------------------------------------

    def _unobserved(self, observed: set[int], tail: Tail | None) -> set[int]:
        """The proposals not told back by the end of the log, given those *observed* in the
        replay (of the whole log, without a *tail*)."""
        if tail is not None:
            return tail.unobserved
        return {n for n in range(1, self._parts.stats.proposals + 1) if n not in observed}

    def untold(self, recorded: Recorded, observed: set[int]) -> list[tuple[int, Observation]]:
        """What the agent is still to be told: the recorded ends of its proposals not among
        *observed*."""
        p = self._parts
        out = []
        for proposal, trial in sorted(recorded.by_proposal.items()):
            waiting = trial.original_status is TrialStatus.RUNNING
            if proposal <= 0 or p.invalid.row_flagged(trial.row_id):
                continue  # a baseline, or an invalidated result: never fed to the agent
            if proposal in observed or waiting or trial.status in (
                TrialStatus.RUNNING, TrialStatus.CANCELLED
            ):
                continue
            out.append((proposal, p.feedback.observation(trial, current=p.data.current(trial))))
        return out

    def replay(self, agent: Agent, recorded: Recorded, *, same_feedback: bool = True,
               tail: Tail | None = None) -> set[int]:
        """Replay the agent's logged calls (with the *tail* of a snapshot restored into it,
        those after the snapshot); return the proposals it has been told about. Without
        *same_feedback* (a rebuild told less than the agent was) its proposals may differ
        from the recorded ones, and that is no sign of a nondeterministic agent."""
        p = self._parts
        cid = p.journal.campaign_id
        # Of the trials read with a tail, those not among its unobserved were told before.
        observed: set[int] = set() if tail is None else {
            n for n in recorded.by_proposal if n > 0 and n not in tail.unobserved}
        diverged: str | None = None
        for entry in p.store.reads.agent_log(cid) if tail is None else tail.entries:
            numbers = list(entry.proposals)
            if p.end.stopping() and not p.feedback.withheld:
                # Asked to stop while replaying (an agent may take seconds a call): the agent
                # is left as it is; the rest of the log only says what it was told.
                p.feedback.withheld = True
            if p.feedback.withheld:
                observed.update(numbers if entry.kind == "observe" else ())
                continue
            if entry.kind == "propose":
                got = self._replay_propose(agent, entry, numbers, recorded)
                diverged = diverged or got
                continue
            if entry.kind in ("enqueue", "exploit"):
                continue  # proposals the queue or an exploit gave: not the agent's
            if entry.kind == "warm":
                p.feedback.guard.observe(agent, self._warm_told(cid))
                continue
            observations = []
            for proposal in numbers:
                if proposal in recorded.rejected:
                    params, reason = recorded.rejected[proposal]
                    observations.append(Observation(params=params, status=None,
                                                    rejected=reason, proposal=proposal))
                elif not p.invalid.row_flagged(recorded.by_proposal[proposal].row_id):
                    # An invalidated result is left out: the rebuilt agent never learns it.
                    trial = recorded.by_proposal[proposal]
                    if entry.stops and proposal in entry.stops:  # as told: promoted since?
                        trial = as_stopped(p.store, trial, entry.stops[proposal])
                    observations.append(
                        p.feedback.observation(trial, current=p.data.current(trial)))
            p.feedback.guard.observe(agent, observations)
            observed.update(numbers)
        if diverged is not None and same_feedback:
            p.journal.event(None, "agent_replay_diverged", {"detail": diverged})
            p.journal.alert(
                f"the agent did not replay as recorded ({diverged}); it is not deterministic,"
                " so its state after the restart may differ"
            )
        return observed

    def _warm_told(self, run: int) -> list[Observation]:
        """What the run's warm start told its agent (its ``warm_start`` event)."""
        p = self._parts
        warm = Seeds(p.campaign, p.feedback, p.baselines)
        return [obs for event in p.store.reads.events(run, WARM_EVENT)
                for obs in warm.observations((event.data or {}).get("told", ()))]

    def _replay_propose(
        self, agent: Agent, entry: AgentCall, numbers: list[int], recorded: Recorded
    ) -> str | None:
        """Ask *agent* again what it was asked in *entry*; how its answer differs, if it does."""
        space = self._parts.campaign.space

        def params_of(proposal: int) -> Mapping[str, Any]:
            if proposal in recorded.by_proposal:
                return recorded.by_proposal[proposal].params
            params: Mapping[str, Any] = recorded.rejected[proposal][0]
            return params

        n = entry.n or 0
        in_flight = [params_of(number) for number in entry.in_flight or ()]
        got = self._parts.feedback.guard.propose(agent, n, in_flight)[:n]
        if len(got) < len(numbers):
            return f"asked for {n}, got {len(got)} instead of {len(numbers)}"
        for raw, proposal in zip(got, numbers, strict=False):
            try:
                same = space.coerce(raw) == dict(params_of(proposal))
            except ParamError:
                same = dict(raw) == dict(params_of(proposal))
            if not same:
                return f"proposal {proposal} differs"
        return None


def _trailing(proposals: int, rejected: Mapping[int, object]) -> int:
    """How many of the last proposals up to *proposals* were rejected in a row."""
    trailing = 0
    for proposal in range(proposals, 0, -1):
        if proposal not in rejected:
            break
        trailing += 1
    return trailing


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a record is read back, and what was
    read then frozen out of its later passes. Reading makes objects by the hundred thousand,
    none of them garbage, and the collector, run every few hundred allocations, walked them
    again and again: half the time of a resume at 50,000 trials."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()
