"""What a run's agent starts from besides its own proposals: the configurations enqueued for
the campaign (run before its proposals, their results told to it like its own), and the
results of earlier runs it is told before its first proposal (``[agent] warm_start``).

Both are logged as agent calls so a resumed run replays them exactly: an ``enqueue`` entry
numbers the proposals the queue gave (the agent made none of them), a ``warm`` entry says the
agent was told what the run's ``warm_start`` event holds — the observations themselves, not a
query of the record, which may have changed since.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

from dse.engine._live import LiveTrial
from dse.model._errors import ConfigError, DseError
from dse.model._space import ParamError
from dse.model._types import FailureClass, Observation, TrialStatus
from dse.plugins._scoring import ScoringError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from dse.campaign._model import Campaign
    from dse.engine._baseline import Baselines
    from dse.engine._feedback import Feedback
    from dse.engine._journal import Journal
    from dse.plugins._protocols import Agent
    from dse.record._base import Storage
    from dse.record._records import CampaignRun, Trial

QUEUE_READ_EVERY_S = 1.0
"""How often a run looks for configurations enqueued while it runs (``dse enqueue``)."""

WARM_EVENT = "warm_start"
"""The event holding what a warm start told the agent."""


class EnqueuedQueue:
    """The configurations enqueued for the campaign that the run has not taken yet (one owner
    of them): read from the record at most every :data:`QUEUE_READ_EVERY_S`, taken in order."""

    def __init__(self) -> None:
        self._waiting: deque[tuple[int, dict[str, Any]]] = deque()
        self._taken: set[int] = set()
        self._read_at: float | None = None

    def refresh(self, store: Storage, campaign: str, now: float) -> None:
        """Read the record's queue again if it was last read :data:`QUEUE_READ_EVERY_S` ago
        (*now* on the monotonic clock)."""
        if self._read_at is not None and now - self._read_at < QUEUE_READ_EVERY_S:
            return
        self._read_at = now
        self._waiting = deque((row.id, row.params) for row in store.reads.enqueued(campaign)
                              if row.id not in self._taken)

    def take(self, n: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to *n* waiting configurations, oldest first: (row, params)."""
        out: list[tuple[int, dict[str, Any]]] = []
        while self._waiting and len(out) < n:
            row, params = self._waiting.popleft()
            self._taken.add(row)
            out.append((row, params))
        return out


    def give_back(self, items: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
        """*items* were taken and not used: they come first again."""
        for row, params in reversed(items):
            self._taken.discard(row)
            self._waiting.appendleft((row, dict(params)))


def resolve_sources(store: Storage, campaign: Campaign) -> list[CampaignRun]:
    """The runs ``[agent] warm_start`` names (each run of a named campaign: asked before the
    new run is recorded, they are all earlier), or a :class:`ConfigError` naming the first it
    cannot find."""
    warm = campaign.warm_start
    if warm is None:
        return []
    runs = store.reads.campaigns()
    where = f"{campaign.source or '<campaign>'}: agent.warm_start"
    found: dict[int, CampaignRun] = {}
    for source in warm.sources:
        if isinstance(source, int):
            named = [r for r in runs if r.id == source]
            what = f"run {source}"
        else:
            named = [r for r in runs if r.name == source]
            what = f"campaign {source!r}"
        if not named:
            raise ConfigError(f"{where}: no {what} in the record {store.where}")
        found.update((r.id, r) for r in named)
    return [found[k] for k in sorted(found)]


class Seeds:
    """What a new run's agent starts from (one owner of the runs it is warm started from,
    and of the line that says so): the campaign file's ``[[enqueue]]`` put in the record's
    queue, the results of the runs its ``warm_start`` names told to it."""

    def __init__(self, campaign: Campaign, feedback: Feedback, baselines: Baselines) -> None:
        self._campaign = campaign
        self._feedback = feedback
        self._baselines = baselines
        self._sources: list[CampaignRun] = []
        self.note: str | None = None
        """What the warm start told the agent, said when the run starts."""

    def resolve(self, store: Storage, *, new: bool) -> None:
        """Find the runs a *new* run is warm started from, before it is recorded (a
        :class:`ConfigError` naming one the record lacks)."""
        self._sources = resolve_sources(store, self._campaign) if new else []

    def plant(self, agent: Agent, store: Storage, journal: Journal, data_version: str | None,
              now: float) -> None:
        """Enqueue the campaign file's configurations; tell *agent* the valid results of the
        runs it is warm started from, log the call and the event, and commit them at once (a
        resume replays what the record says it was told); :attr:`note` says what was told
        and what was left out."""
        if self._campaign.enqueue:
            store.enqueue(self._campaign.name, self._campaign.enqueue, "campaign file", now)
        sources = self._sources
        if not sources:
            return
        told, dropped = self._gather(store, sources, data_version)
        journal.batch.add_agent_call(campaign=journal.campaign_id, kind="warm", proposals=[])
        journal.event(None, WARM_EVENT, {
            "sources": [r.id for r in sources], "told": told, "dropped": dict(dropped),
        })
        observations = self.observations(told)
        self._feedback.guard.observe(agent, observations)
        store.commit(journal.batch)
        runs = ", ".join(f"{r.name} (run {r.id})" for r in sources)
        line = f"warm start: the agent was told {len(observations)} result(s) of {runs}"
        if dropped:
            line += "; left out " + ", ".join(f"{n} {why}" for why, n in sorted(dropped.items()))
        self.note = line

    def observations(self, told: Iterable[Mapping[str, Any]]) -> list[Observation]:
        """The observations a ``warm_start`` event holds, as the agent is told them."""
        feedback = self._feedback
        out = []
        for item in told:
            status = TrialStatus(item["status"])
            scores = item.get("scores")
            out.append(Observation(
                params=item["params"], status=status, metrics=item.get("metrics") or {},
                score=item.get("score"), objectives=feedback.objectives,
                scores=None if scores is None else tuple(scores),
                failure=None if item.get("failure") is None else FailureClass(item["failure"]),
                direction=feedback.direction, max_step=feedback.max_step, proposal=None,
            ))
        return out

    def _gather(self, store: Storage, sources: list[CampaignRun], data_version: str | None
                ) -> tuple[list[dict[str, Any]], Counter[str]]:
        """The sources' valid results as the agent is told them (one per config, the first
        recorded), and how many were left out, by why."""
        warm = self._campaign.warm_start
        assert warm is not None
        space = self._campaign.space
        told: dict[str, dict[str, Any]] = {}
        dropped: Counter[str] = Counter()
        for source in sources:
            for row in store.reads.trials(source.id):
                if row.proposal == 0 or row.status not in (TrialStatus.COMPLETED,
                                                           TrialStatus.FAILED):
                    continue  # a baseline, or no result about the design
                if row.invalidation is not None:
                    dropped["invalidated"] += 1
                    continue
                if (warm.data == "current" and data_version is not None
                        and row.data_version != data_version):
                    dropped["about other data"] += 1
                    continue
                params = {k: v for k, v in row.params.items() if k in space.names}
                params = {**warm.fill, **params}
                try:
                    params = space.coerce(params)
                except ParamError:
                    lacking = any(n not in params for n in space.active(params))
                    dropped["lacking params" if lacking else "outside the space"] += 1
                    continue
                key = json.dumps(params, sort_keys=True)
                if key in told:
                    continue
                item = self._item(row, params)
                if item is None:
                    dropped["not scored by this campaign's scorer"] += 1
                    continue
                told[key] = item
        return list(told.values()), dropped

    def _item(self, row: Trial, params: dict[str, Any]) -> dict[str, Any] | None:
        """*row*'s result as a ``warm_start`` event keeps it (``None``: it cannot be scored
        by this campaign's scorer)."""
        item: dict[str, Any] = {"params": params, "status": row.status.value}
        if row.status is TrialStatus.FAILED:
            item["failure"] = None if row.failure is None else row.failure.value
            return item
        metrics = row.metrics or {}
        trial = LiveTrial(row.id, row.number, row.proposal, row.wave, params, row.config_hash)
        trial.data_version = row.data_version
        try:
            score, scores, _ = self._baselines.score(trial, metrics)
        except (ScoringError, DseError):
            return None
        item.update(metrics=dict(metrics), score=score,
                    scores=None if scores is None else list(scores))
        return item
