"""What starts: proposals pulled from the agent become trials (or cache hits, or rejections),
each attempt's worst case is reserved from the budget before it is queued, and retries wait
until the budget admits them.

The dispatcher owns the numbering of a run (proposals, trials, batches) and the count of
rejections in a row; everything else it changes belongs to the part it is passed.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dse.engine._live import LiveTrial
from dse.engine._parts import reusable
from dse.engine._proposals import ProposalSource
from dse.engine._trialdirs import TrialDirs
from dse.model._outcome import Retry
from dse.model._space import ParamError
from dse.model._types import AttemptState, EndReason, FailureClass, TrialStatus
from dse.plugins._protocols import TrialInfo

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.engine._parts import Hashed, Parts
    from dse.model._types import JobSpec
    from dse.plugins._protocols import Agent


def claim_configs(p: Parts, proposals: Sequence[Mapping[str, Any]]) -> list[Hashed | None]:
    """Claim in the record, in one transaction, the configs of *proposals* the run's table
    cannot reuse; return each one's coerced params, their canonical JSON and config hash
    (``None``: outside the space, or no config hash)."""
    hasher = p.data.hasher
    coerced: list[Hashed | None] = []
    digests = []
    for raw in proposals:
        try:
            params = p.campaign.space.coerce(raw)
            params_json = hasher.canonical(params)
        except (ParamError, ValueError):
            coerced.append(None)
            continue
        digest = hasher.digest(params_json)
        coerced.append((params, params_json, digest))
        if reusable(p, digest) is None:
            digests.append(digest)
    p.claims.claim(digests, p.journal.now())
    return coerced


class Dispatcher:
    """Turns proposals into trials and attempts into queued work, within the budget."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.number = 0
        """The last trial number given."""
        self.wave = 0
        """The current dispatch batch."""
        self.rejections = 0
        """Proposals rejected in a row."""
        self.blocked = False
        """A trial's worst case did not fit: no more pulls until something ends."""
        self.first_state = AttemptState.SUBMITTING
        """What a new attempt is recorded as: ``queued`` while it may wait for the pool's
        resources (``submitting`` once granted), ``submitting`` when every queued attempt
        starts at once."""
        self.dirs = TrialDirs(parts.journal.event, parts.journal.alert)
        self.source = ProposalSource(parts)
        """Where the next proposals come from (the queue, then the agent)."""

    # -- pulling proposals ------------------------------------------------------------------

    def fill(self, agent: Agent, slots: int, now: float) -> int:
        """Pull proposals until *slots* are taken (trials, cache hits); return how many.
        *now*: the monotonic clock's reading (the budget's)."""
        p = self.parts
        campaign, stats, end = p.campaign, p.stats, p.end
        started = 0
        while slots > 0 and not end.ending() and not self.blocked:
            if campaign.max_trials is not None and stats.steps >= campaign.max_trials:
                end.done = EndReason.MAX_TRIALS
                break
            left = p.stopping.members_left(stats.steps) if p.stopping is not None else None
            if left == 0:
                end.done = EndReason.POPULATION  # the exploits' trials still start
                break
            want = slots if left is None else min(slots, left)
            if campaign.max_trials is not None:
                want = min(want, campaign.max_trials - stats.steps)
            want, why = p.gate.affordable(want, now, campaign.environment)
            if want == 0 and p.gate.answers_from_record():
                want = 1  # a spent campaign's rerun: what the record answers costs nothing
            elif want == 0:
                if not p.table.busy():
                    self.exhaust_budget(why or "budget")
                break
            took = self._pull(agent, want)
            if took is None:
                break
            slots -= took
            started += took
        return started

    def _pull(self, agent: Agent, want: int) -> int | None:
        """Take up to *want* proposals (:class:`ProposalSource`) until the run ends or the
        budget blocks; how many took a slot (``None``: the agent proposed nothing)."""
        p = self.parts
        pulled = self.source.pull(agent, want)
        if pulled is None:
            return None
        batch, campaign_id, rows = p.journal.batch, p.journal.campaign_id, pulled.rows
        proposals = pulled.proposals
        first = p.stats.proposals + 1
        took = taken = 0
        try:
            for raw, hashed in zip(proposals, claim_configs(p, proposals), strict=True):
                took += self._take(agent, raw, hashed)
                if rows:
                    batch.take_enqueued(row=rows[taken], run=campaign_id,
                                        proposal=p.stats.proposals)
                taken += 1
                if p.end.ending() or self.blocked:
                    break
        finally:
            if rows:  # the enqueued configurations not taken wait again
                p.queue.give_back(list(zip(rows[taken:], proposals[taken:], strict=True)))
            # Only the proposals the engine took get numbers; a replay compares those.
            batch.add_agent_call(campaign=campaign_id, kind=pulled.kind, n=pulled.n,
                                 in_flight=pulled.in_flight, slot=pulled.slot,
                                 proposals=range(first, p.stats.proposals + 1))
            p.claims.release_unused(batch)
        return took

    def _take(self, agent: Agent, raw: Mapping[str, Any], hashed: Hashed | None) -> int:
        """Turn one proposal (*hashed*: coerced and hashed, if it could be) into a trial, a
        cache hit or a rejection; 1 if it took a slot."""
        p = self.parts
        p.stats.proposals += 1
        proposal = p.stats.proposals
        p.feedback.numbered(proposal)
        try:
            params = hashed[0] if hashed is not None else p.campaign.space.coerce(raw)
        except ParamError as exc:
            self._reject(agent, proposal, dict(raw), f"outside the space: {exc}")
            return 0
        for constraint in p.campaign.constraints:
            if not constraint(params):
                self._reject(agent, proposal, params, f"constraint {constraint.text!r}")
                return 0
        self.rejections = 0
        p.stats.steps += 1
        trial = self.new_trial(params, proposal, hashed)
        return int(p.table.takes_slot(trial, waves=p.campaign.mode == "waves"))

    def _reject(self, agent: Agent, proposal: int, params: dict[str, Any], reason: str) -> None:
        p = self.parts
        p.stats.rejected += 1
        self.rejections += 1
        p.journal.event(None, "rejected", {"proposal": proposal, "params": params,
                                           "reason": reason})
        p.feedback.reject(agent, p.journal.batch, p.journal.campaign_id, proposal, params,
                          reason)
        if self.rejections >= p.campaign.max_consecutive_rejections:
            p.end.done = EndReason.MAX_CONSECUTIVE_REJECTIONS
            p.journal.event(None, "stopped", {"reason": "max_consecutive_rejections",
                                              "count": self.rejections})

    # -- making a trial ---------------------------------------------------------------------

    def number_spawned(self) -> int:
        """Number a trial of params the agent did not propose (an exploit's, in population-
        based training) as the next proposal, logged as an ``exploit`` call; its number."""
        p = self.parts
        p.stats.proposals += 1
        p.stats.steps += 1
        proposal = p.stats.proposals
        p.feedback.numbered(proposal)
        p.journal.batch.add_agent_call(campaign=p.journal.campaign_id, kind="exploit",
                                       proposals=[proposal])
        return proposal

    def new_trial(
        self, params: dict[str, Any], proposal: int, hashed: Hashed | None = None
    ) -> LiveTrial:
        """Make *params* a trial, or a cache hit, of proposal *proposal* (0: the baseline);
        it is dispatched (status ``running``) when it took a slot. *hashed*: the params with
        their canonical JSON and config hash, when already known."""
        p = self.parts
        if hashed is None:
            params_json = p.data.hasher.canonical(params)
            digest = p.data.hasher.digest(params_json)
        else:
            params_json, digest = hashed[1], hashed[2]
        self.number += 1
        now = p.journal.now()
        original = reusable(p, digest)
        if original is not None:
            row = p.store.new_trial_id()
        else:
            row, original = p.claims.settle(digest, now)
        trial = LiveTrial(row, self.number, proposal, self.wave, params, digest)
        trial.data_version = p.data.version
        if original is not None:
            self._cache_hit(trial, original, params_json, now)
            return trial
        self.launch(trial, now, params_json)
        return trial

    def launch(self, trial: LiveTrial, now: float, params_json: str | None = None) -> None:
        """Prepare, reserve and queue *trial*: a new one (recorded with *params_json*), or —
        without — a cache hit recorded waiting on another controller's trial, which ended
        without a result to reuse (it becomes a trial of its own)."""
        p = self.parts
        digest = trial.config_hash
        campaign_id = p.journal.campaign_id
        trial.trial_id = f"{p.campaign.name}-{campaign_id}-{trial.number}"
        replaced = p.invalid.replaced(digest)
        if replaced is not None:
            # The trial it re-runs was invalidated: a new trial, linked to the one it replaces.
            p.journal.batch.link_trial(row=trial.row_id, replaces=replaced)
            p.journal.event(trial.row_id, "replaces", {"trial": trial.number,
                                                       "replaces": replaced})
        trial_dir = self.dirs.path(trial.number)
        try:
            self.dirs.make(trial.number, trial.row_id)
            spec = p.environment.prepare(TrialInfo(
                trial.trial_id, trial.number, 1, trial.params, trial_dir, p.data.version))
        except Exception as exc:  # noqa: BLE001 - a trial that cannot be prepared fails alone
            trial.status, trial.failure = TrialStatus.FAILED, FailureClass.PREPARE_ERROR
            trial.message = f"{type(exc).__name__}: {exc}"
            self._record_ended(trial, params_json, str(trial_dir), now)
            p.results.ended(trial)  # a setup failure: never reused (REUSED_FAILURES)
            return
        trial.spec = self.avoiding(spec, trial)
        trial.trial_dir = trial_dir
        if params_json is None:  # a new trial records it with its row
            p.journal.batch.set_trial_data(row=trial.row_id, expected=p.data.version)
        reserved = p.gate.reserve(trial.spec, p.journal.monotonic(), new_trial=True)
        if isinstance(reserved, str):
            self._refused(trial, reserved, params_json, str(trial_dir), now)
            return
        trial.reserved = reserved
        self._dispatch(trial, params_json, str(trial_dir), now)

    def _record_ended(self, trial: LiveTrial, params_json: str | None, trial_dir: str,
                      now: float, expected: str | None = None) -> None:
        """Record a trial that ended as it was made (it could not be prepared or afforded;
        *expected*: the data version it was prepared against)."""
        p = self.parts
        if params_json is None:
            p.journal.batch.run_cache_hit(row=trial.row_id, status=trial.status,
                                          trial_dir=trial_dir, ended_at=now,
                                          failure=trial.failure, message=trial.message)
            return
        self._add_row(trial, params_json, trial.status, now, failure=trial.failure,
                      message=trial.message, trial_dir=trial_dir, ended_at=now,
                      data_version=expected)

    def _add_row(self, trial: LiveTrial, params_json: str, status: TrialStatus, now: float,
                 **more: Any) -> None:
        """Record the row of *trial*, made of a proposal in this pass (as *status*, with
        *more* of :meth:`~dse.record._batch.Batch.add_trial`'s columns): the one writer of a
        new trial's row."""
        p = self.parts
        p.journal.batch.add_trial(
            row=trial.row_id, campaign=p.journal.campaign_id, number=trial.number,
            proposal=trial.proposal, wave=trial.batch, config_hash=trial.config_hash,
            params_json=params_json, status=status, created_at=now, **more)

    def _cache_hit(self, trial: LiveTrial, original: LiveTrial, params_json: str,
                   now: float) -> None:
        p = self.parts
        trial.status = TrialStatus.CACHED
        finished = original.status.is_finished()
        if finished:
            p.baselines.rescore(trial, original)
        self._add_row(
            trial, params_json, TrialStatus.CACHED, now,
            failure=original.failure if finished else None,
            message=trial.message if finished else None,
            metrics=original.metrics if finished else None,
            score=trial.score if finished else None, cache_of=original.row_id,
            ended_at=now if finished else None,
            step=original.step if finished else None, scores=trial.scores if finished else None,
        )
        if finished:
            p.results.cached_end(trial, original)
        else:
            original.waiters.append(trial)

    def _refused(self, trial: LiveTrial, why: str, params_json: str | None, trial_dir: str,
                 now: float) -> None:
        """Its resources differ from the campaign's, and its worst case does not fit: no more
        pulls until something ends (or the campaign ends, if nothing runs)."""
        p = self.parts
        self.blocked = True
        if not p.table.busy():
            self.exhaust_budget(why)
        trial.status = TrialStatus.BUDGET_EXHAUSTED
        trial.message = f"not dispatched: {why}"
        self._record_ended(trial, params_json, trial_dir, now, p.data.version)
        p.results.ended(trial)

    def _dispatch(self, trial: LiveTrial, params_json: str | None, trial_dir: str,
                  now: float) -> None:
        p = self.parts
        batch = p.journal.batch
        trial.attempt_started = now
        trial.attempt_row = p.store.new_attempt_id()
        if params_json is None:
            batch.run_cache_hit(row=trial.row_id, status=TrialStatus.RUNNING, trial_dir=trial_dir)
        else:
            self._add_row(trial, params_json, TrialStatus.RUNNING, now, trial_dir=trial_dir,
                          data_version=p.data.version)
        batch.add_attempt(row=trial.attempt_row, trial=trial.row_id, attempt=1,
                          backend=p.backend, state=self.first_state, submitted_at=now)
        p.table.queue(trial, now)
        p.table.dispatched(trial)
        p.stats.started += 1

    # -- attempts ---------------------------------------------------------------------------

    def avoiding(self, spec: JobSpec, trial: LiveTrial) -> JobSpec:
        """*spec* told to avoid the suspect nodes and those that interrupted *trial*, with the
        time limit that keeps it within the per-trial ceilings (and, for a trial made by an
        exploit, that its checkpoint directory was seeded)."""
        avoid = self.parts.watch.avoid | trial.history.failed_nodes
        limit = self.parts.gate.time_limit(spec, trial.spent)
        if not avoid and limit == spec.time_limit and spec.seeded == trial.seeded:
            return spec
        return dataclasses.replace(
            spec, avoid_nodes=tuple(sorted(avoid)) or spec.avoid_nodes, time_limit=limit,
            seeded=trial.seeded or spec.seeded,
        )

    def next_attempt(
        self, trial: LiveTrial, spec: JobSpec, now: float, *, after: str, cause: str,
        node: str | None,
    ) -> None:
        """Record the next attempt of *trial* (intent first); it waits to be admitted."""
        p = self.parts
        mark = trial.checkpoint_mark
        assert mark is not None
        resumed = mark.exists()
        trial.spec = self.avoiding(spec, trial)
        trial.attempt = spec.attempt
        trial.attempt_row = p.store.new_attempt_id()
        trial.attempt_started = now
        trial.job_id, trial.job_id_recorded, trial.adopted = None, False, False
        p.journal.retried(trial.row_id, Retry(trial.number, spec.attempt, after, cause, node,
                                              resumed, trial.message))
        trial.status, trial.failure, trial.message = TrialStatus.RUNNING, None, None
        p.journal.batch.add_attempt(
            row=trial.attempt_row, trial=trial.row_id, attempt=spec.attempt, backend=p.backend,
            state=self.first_state, submitted_at=now, resumed=resumed,
        )
        p.table.wait_retry(trial)

    def resubmit(self, trial: LiveTrial, now: float, *, resumed_from: str) -> None:
        """A new attempt of *trial* that is not an interruption (a cancelled trial resumed)."""
        assert trial.trial_dir is not None
        p = self.parts
        spec = p.environment.prepare(TrialInfo(
            trial.trial_id, trial.number, trial.attempt + 1, trial.params, trial.trial_dir,
            p.data.version,
        ))
        self.next_attempt(trial, spec, now, after=resumed_from, cause=resumed_from, node=None)
        p.table.dispatched(trial)

    def admit_retries(self, now: float) -> list[tuple[LiveTrial, str]]:
        """Queue the waiting attempts the budget can afford; return those it never will
        (nothing runs, so nothing will free a reservation), with why."""
        p = self.parts
        if p.stopping is not None:  # stopped trials the rule promotes go first
            p.stopping.promote(self, p.campaign.max_parallelism - p.table.busy(), now)
        waiting = []
        for trial in p.table.take_retries():
            assert trial.spec is not None
            reserved = p.gate.reserve(trial.spec, p.journal.monotonic(), new_trial=False)
            if isinstance(reserved, str):
                waiting.append((trial, reserved))
            else:
                trial.reserved = reserved
                p.table.queue(trial, now)
        if waiting and (p.table.running or p.table.queued):
            for trial, _ in waiting:
                p.table.wait_retry(trial)
            return []
        return waiting

    def exhaust_budget(self, why: str) -> None:
        """The budget ended the run (unless something else already had)."""
        p = self.parts
        if p.end.finish(EndReason.BUDGET_EXHAUSTED):
            p.journal.event(None, "budget_exhausted", {"reason": why, **p.gate.figures()})
            p.journal.alert(f"budget exhausted: {why}")

    # -- the baseline -----------------------------------------------------------------------

    def await_baseline(self, slots: int) -> int | None:
        """``None`` when trials may be dispatched: the baseline of the current data version
        has its result. Otherwise the baseline is started if a slot is free (1 is returned:
        it took it) or still runs (0); a baseline that ended without a result ends the
        campaign."""
        p = self.parts
        baselines = p.baselines
        if baselines.params is None:
            return None
        version = p.data.version
        base = baselines.by_version.get(version)
        if base is None:
            given = baselines.given
            known = reusable(p, p.data.hasher(baselines.params))
            if given is not None and given.data_version == version:
                base = given
            elif known is not None and known.status is TrialStatus.RUNNING:
                return 0  # the agent's trial of the same params: its result will serve
            elif known is not None:
                base = known
            elif slots <= 0:
                return 0
            elif (other := p.claims.look(p.data.hasher(baselines.params), p.journal.now())):
                if other.status is TrialStatus.RUNNING:
                    return 0  # another controller runs it: its result will serve
                base = other
            else:
                base = self.new_trial(dict(baselines.params), 0)
                p.journal.event(base.row_id, "baseline", {"trial": base.number,
                                                          "data_version": version})
            baselines.by_version[version] = base
            if base.status is TrialStatus.RUNNING:
                return 1
        if base.status is TrialStatus.RUNNING:
            return 0
        if base.status is TrialStatus.COMPLETED:
            return None
        if p.end.finish(EndReason.BASELINE_FAILED):
            why = base.message or (base.failure.value if base.failure else base.status.value)
            p.journal.event(base.row_id, "baseline_failed", {"trial": base.number, "why": why})
            p.journal.alert(
                f"the baseline (trial {base.number}) ended {base.status.value}: {why};"
                " nothing can be compared against it"
            )
        return 0
