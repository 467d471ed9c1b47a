"""Where a run's next proposals come from: the configurations enqueued for the campaign
first (numbered like the agent's own, logged as an ``enqueue`` call), then the agent (its
``propose`` call logged with what was in flight; an answer of more than it was asked cut,
recorded and said once a run). The :class:`~dse.engine._dispatch.Dispatcher` takes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._types import EndReason

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.engine._parts import Parts
    from dse.plugins._protocols import Agent


@dataclass(frozen=True, slots=True)
class Pulled:
    """Proposals to take, and the agent call that logs them."""

    proposals: Sequence[Mapping[str, Any]]
    kind: str
    """``propose`` (the agent's) or ``enqueue`` (the queue's)."""
    slot: int
    """The place of the call in the pass's log (it precedes the observe calls that taking
    the proposals logs)."""
    n: int | None = None
    """What the agent was asked for."""
    in_flight: list[int] | None = None
    """The proposals in flight when it was asked."""
    rows: Sequence[int] = ()
    """The enqueued configurations' rows of the record's queue."""


class ProposalSource:
    """The next proposals of a run (it owns whether the agent's overproposal was said)."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.overproposed = False
        """The agent was warned of for answering more than it was asked."""

    def pull(self, agent: Agent, want: int) -> Pulled | None:
        """Up to *want* proposals: enqueued configurations first, else the agent's; ``None``
        when the agent proposed nothing (its call logged, and the run told to end when it is
        exhausted, or stalled with nothing in flight)."""
        p = self.parts
        batch = p.journal.batch
        p.queue.refresh(p.store, p.campaign.name, p.journal.monotonic())
        enqueued = p.queue.take(want)
        if enqueued:
            return Pulled([params for _, params in enqueued], "enqueue",
                          batch.reserve_agent_call(), rows=[row for row, _ in enqueued])
        flying = p.feedback.in_flight(p.table.in_flight())
        guard = p.feedback.guard
        proposals = guard.propose(agent, want, [params for _, params in flying])
        if len(proposals) > want:
            self._overproposed(agent, want, len(proposals))
            proposals = proposals[:want]
        in_flight = [proposal for proposal, _ in flying]
        slot = batch.reserve_agent_call()
        if proposals:
            return Pulled(proposals, "propose", slot, n=want, in_flight=in_flight)
        batch.add_agent_call(campaign=p.journal.campaign_id, kind="propose", n=want,
                             proposals=[], in_flight=in_flight, slot=slot)
        if guard.exhausted(agent):
            p.end.done = EndReason.AGENT_EXHAUSTED
        elif not (p.table.running or p.table.queued or p.table.remote or p.feedback.pending()):
            p.end.done = EndReason.AGENT_STALLED
        return None

    def _overproposed(self, agent: Agent, asked: int, got: int) -> None:
        """The agent answered more than it was asked: the extra proposals are dropped (never
        numbered, never run, never told back), recorded each time and said once a run."""
        p = self.parts
        p.journal.event(None, "agent_overproposed", {"asked": asked, "got": got})
        if not self.overproposed:
            self.overproposed = True
            who = p.feedback.guard.describe(agent)
            p.journal.alert(f"{who} answered propose() with {got} proposals when asked for"
                            f" at most {asked}; the extra {got - asked} are dropped (said once;"
                            " every time is an agent_overproposed event)")
