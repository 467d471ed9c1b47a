"""What the agent is still to be told, and the agent's calls as the record logs them.

Results are told a batch at a time (never one by one mid-pass), in proposal order; every
``propose`` and ``observe`` call is logged so that a restarted controller can replay them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dse.model._types import Observation, TrialStatus
from dse.plugins._guard import AgentGuard

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from dse.engine._live import LiveTrial
    from dse.model._types import Direction, Objective
    from dse.plugins._protocols import Agent
    from dse.record._batch import Batch


SNAPSHOT_AFTER_S = 1.0
"""Seconds spent in agent calls since its last snapshot after which a commit snapshots it (at
the latest)."""
SNAPSHOT_AFTER_CALLS = 1_000
"""Agent calls since its last snapshot after which a commit snapshots it (cheap calls)."""
SNAPSHOT_COST_RATIO = 5.0
"""A commit snapshots the agent sooner, once its calls since the last snapshot took this many
times what taking that snapshot did: an agent that fits a model per proposal is snapshot after
every proposal (a resume then replays none of them: the Bayesian agent's snapshot at 1,000
observations takes a tenth of its proposal's time), and snapshots cost at most a fifth of the
agent's own time."""


class Feedback:
    """The observations waiting to be told to the agent (one owner of them).

    :param direction: which way the campaign's scores are better (told with each one).
    """

    def __init__(
        self, direction: Direction, guard: AgentGuard | None = None,
        objectives: tuple[Objective, ...] = (),
    ) -> None:
        self.direction = direction
        self.objectives = objectives
        """A Pareto campaign's objectives (told with each observation), else empty."""
        self.max_step: int | None = None
        """The step a full run ends at, when the campaign stops trials early."""
        self.partial: Callable[[LiveTrial], float | None] | None = None
        """Scores a stopped trial's metrics at its step (what the agent is told of it: the
        record keeps no score for a trial that did not run to its end)."""
        self.guard = guard or AgentGuard()
        """Every call into the agent goes through it (it names the agent when one fails)."""
        self._pending: list[tuple[int, Observation]] = []
        self._snapped = (0, 0.0)
        """The agent calls and their seconds when it was last snapshot."""
        self._snapshot_s = 0.0
        """What taking the last snapshot cost (seconds)."""
        self._unobserved: set[int] = set()
        """The proposals numbered and not yet told back as the record logs it (those in
        flight, waiting to be told, or never to be): recorded with a snapshot, so that a
        resume reads only these trials and those the calls after it name."""
        self.withheld = False
        """The agent is no longer told anything (the run stopped while the agent was being
        rebuilt, so it is not the agent the log describes): results are still logged as
        told, and the next run's replay tells them."""

    def observation(
        self, trial: LiveTrial, *, status: TrialStatus | None = None, current: bool = True
    ) -> Observation:
        """What the agent is told of *trial* (with *status*, default its own); a result about
        other data than the current is told without its metrics and score."""
        told = status or trial.original_status or trial.status
        score = trial.score if current else None
        if told is TrialStatus.STOPPED and current and self.partial is not None:
            score = self.partial(trial)
        return Observation(
            params=trial.params,
            status=told,
            metrics=(trial.metrics or {}) if current else {},
            score=score,
            objectives=self.objectives,
            scores=trial.scores if current and told is not TrialStatus.STOPPED else None,
            trial_number=trial.number,
            failure=trial.failure,
            direction=self.direction,
            step=trial.step,
            max_step=self.max_step,
            proposal=trial.proposal,
        )

    def numbered(self, proposal: int) -> None:
        """*proposal* was given its number (its results are to be told back)."""
        self._unobserved.add(proposal)

    def unobserved_are(self, proposals: Iterable[int]) -> None:
        """The proposals not yet told back are *proposals* (a resumed run's, from its log)."""
        self._unobserved = set(proposals)

    def tell(self, proposal: int, observation: Observation) -> None:
        """Tell the agent *observation* about *proposal* at the next delivery."""
        self._pending.append((proposal, observation))

    def replace(self, pending: Iterable[tuple[int, Observation]]) -> None:
        """Wait to tell exactly *pending* (a rebuilt agent's untold results)."""
        self._pending = list(pending)

    def pending(self) -> bool:
        return bool(self._pending)

    def in_flight(self, flying: Iterable[LiveTrial]) -> list[tuple[int, Mapping[str, Any]]]:
        """What the agent is shown in flight, as (proposal, params) in proposal order: the
        trials *flying* (running, queued, waiting on another) and the results it is still
        to be told (a cache hit taken in this wave is in flight until the wave is told, as
        the trial it reuses was). The order is the proposals', never the order trials were
        started or ended in: a rerun shows what the run it reuses showed."""
        shown: list[tuple[int, Mapping[str, Any]]] = [(t.proposal, t.params) for t in flying]
        shown += [(p, obs.params) for p, obs in self._pending]
        return sorted(shown, key=lambda item: item[0])

    def count(self) -> int:
        return len(self._pending)

    def untold(self) -> set[int]:
        """The trial numbers waiting to be told."""
        return {obs.trial_number for _, obs in self._pending if obs.trial_number is not None}

    def drop(self, numbers: set[int]) -> None:
        """Never tell the results of trials *numbers* (they were invalidated)."""
        self._pending = [(p, obs) for p, obs in self._pending if obs.trial_number not in numbers]

    def snapshot(self, agent: Agent, batch: Batch, campaign_id: int) -> None:
        """Record the agent's state with the calls it covers (every call the record logs up to
        this commit), once replaying the calls since its last snapshot would cost a second of
        its time (or :data:`SNAPSHOT_COST_RATIO` snapshots) or a thousand calls: a resume then
        restores it and replays only the calls after it. An agent without
        ``snapshot``/``restore`` is replayed whole."""
        guard = self.guard
        calls, busy = guard.calls - self._snapped[0], guard.busy_s - self._snapped[1]
        due = min(SNAPSHOT_AFTER_S, SNAPSHOT_COST_RATIO * self._snapshot_s)
        if self.withheld or not calls or (busy < due and calls < SNAPSHOT_AFTER_CALLS):
            return
        self._snapped = (guard.calls, guard.busy_s)
        began = time.perf_counter()
        state = guard.snapshot(agent)
        self._snapshot_s = time.perf_counter() - began
        if state is not None:
            batch.set_agent_snapshot(campaign=campaign_id, state=state, unobserved=self._unobserved)

    def deliver(self, agent: Agent, batch: Batch, campaign_id: int) -> None:
        """Tell the agent every waiting result, in proposal order, and log the call."""
        if not self._pending:
            return
        pending = sorted(self._pending, key=lambda item: item[0])
        self._pending = []
        stops = {p: obs.step for p, obs in pending
                 if obs.status is TrialStatus.STOPPED and obs.step is not None}
        batch.add_agent_call(campaign=campaign_id, kind="observe",
                             proposals=[p for p, _ in pending], stops=stops)
        self._unobserved.difference_update(p for p, _ in pending)
        if not self.withheld:
            self.guard.observe(agent, [obs for _, obs in pending])

    def reject(
        self, agent: Agent, batch: Batch, campaign_id: int, proposal: int,
        params: dict[str, object], reason: str,
    ) -> None:
        """Tell the agent at once that *proposal* was rejected, and log the call."""
        batch.add_agent_call(campaign=campaign_id, kind="observe", proposals=[proposal])
        self._unobserved.discard(proposal)
        self.guard.observe(agent, [Observation(params=params, status=None, rejected=reason,
                                               proposal=proposal)])

