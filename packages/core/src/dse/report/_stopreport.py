"""What ``dse report`` says of a run's early stopping (the ``[stopping]`` table): trials
stopped and promoted at each rung, what the trials that ended at each rung spent and what
those that ran to the end spent, and an estimate of the compute stopping saved.

Read through aggregates of the record (the decisions' counts by verdict and rung, one pass
over the stopped trials by their partial index): a run without a stopping rule costs one
indexed lookup. :mod:`dse.report._render` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._spend import Spend

if TYPE_CHECKING:
    from dse.record._base import Storage
    from dse.record._records import CampaignRun

__all__ = ["SAVED_METHOD", "RungRow", "StoppingDetail", "stopping_detail"]

SAVED_METHOD = ("an estimate: for each trial that ended stopped at step s, its attempts' spend"
                " x (max_step / s - 1)")
"""How :attr:`StoppingDetail.saved` is estimated (printed with it)."""
NO_MAX_STEP = "no estimate: the run's record holds no max_step"
POPULATION = ("no estimate: population-based training's stopped members go on in the trials"
              " made in their place")


@dataclass(frozen=True, slots=True)
class RungRow:
    """One rung of a run's stopping rule."""

    rung: int
    """The rung's step."""
    stopped: int
    """Stop decisions made at this rung (a trial promoted since counts here too)."""
    promoted: int
    """Promotions from this rung (trials stopped here and resumed later)."""
    ended: int
    """Trials whose end is a stop at this rung (not promoted since)."""
    spent: Spend
    """What every attempt of those trials spent."""


@dataclass(frozen=True, slots=True)
class StoppingDetail:
    """A run's early stopping as ``dse report`` shows it."""

    rule: str
    """The rule's name (from the run's spec, else from its decisions)."""
    version: str | None
    """The version of the rule that made the run's latest decision, or ``None``: none yet."""
    metric: str | None
    direction: str | None
    max_step: int | None
    """The step a full run ends at (the run's ``[stopping]`` spec), or ``None`` if the record
    does not hold it."""
    rungs: tuple[RungRow, ...]
    ended_stopped: int
    """Trials that ended stopped (at any rung)."""
    promotions: int
    to_end: int
    """Trials that ran to their end (completed, not cache hits)."""
    to_end_spent: Spend
    saved: Spend | None
    """The estimate of what stopping saved (:data:`SAVED_METHOD`), or ``None``: see
    :attr:`no_estimate`."""
    no_estimate: str = NO_MAX_STEP
    """Why there is no estimate, when there is none."""

    @property
    def stopped_spent(self) -> Spend:
        """What the trials that ended stopped spent."""
        return sum((row.spent for row in self.rungs), Spend())


def stopping_detail(store: Storage, run: CampaignRun) -> StoppingDetail | None:
    """The :class:`StoppingDetail` of *run*, or ``None`` when it has no stopping rule and no
    decision in the record."""
    spec: dict[str, Any] = run.spec.get("stopping") or {}
    counts = store.stops.decision_counts(run.id)
    if not spec and not counts:
        return None
    found = store.stops.stopping_rule(run.id)
    max_step = spec.get("max_step")
    max_step = int(max_step) if isinstance(max_step, int | float) and max_step > 0 else None
    population = spec.get("rule") == "pbt"
    tallies = store.stops.stop_tallies(run.id)
    ended: dict[int, tuple[int, Spend]] = {}
    saved = Spend()
    for tally in tallies:
        n, spent = ended.get(tally.rung, (0, Spend()))
        ended[tally.rung] = (n + tally.trials, spent + tally.spend)
        if max_step is not None and 0 < tally.step < max_step:
            saved = saved + tally.spend * (max_step / tally.step - 1.0)
    steps = sorted({rung for _, rung in counts} | set(ended))
    rungs = tuple(
        RungRow(rung, counts.get(("stop", rung), 0) + counts.get(("exploit", rung), 0),
                counts.get(("promote", rung), 0),
                ended.get(rung, (0, Spend()))[0], ended.get(rung, (0, Spend()))[1])
        for rung in steps
    )
    to_end, to_end_spent = store.stops.completed_spend(run.id)
    return StoppingDetail(
        rule=str(spec.get("rule") or (found[0] if found else "?")),
        version=found[1] if found else None,
        metric=spec.get("metric"), direction=spec.get("direction"), max_step=max_step,
        rungs=rungs, ended_stopped=sum(t.trials for t in tallies),
        promotions=sum(n for (verdict, _), n in counts.items() if verdict == "promote"),
        to_end=to_end, to_end_spent=to_end_spent,
        saved=saved if max_step is not None and not population else None,
        no_estimate=POPULATION if population else NO_MAX_STEP,
    )
