"""The numbers that matter, read back from the record (DESIGN.md, "The numbers that matter").

* **throughput** — trials that reached an outcome (completed, failed, hit their ceiling or
  were interrupted for good; not cache hits, not cancelled) per hour of the run's wall clock;
* **effective rate** — trials with a usable result (completed and scored) per wall-clock hour;
* **cost per effective result** — everything the run spent (every attempt of every trial,
  failures included) divided by the number of usable results, in money and in compute.

Spend is attributed per attempt and rolled up to trial, run, and objective label (the
``serves`` labels of the campaign); a cache hit costs nothing and names the trial whose spend
it reuses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse._budget import Spend

if TYPE_CHECKING:
    from dse._store import Store

__all__ = ["RunSummary", "summarize"]

_FINISHED = ("completed", "failed", "budget_exhausted", "interrupted")


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run's spend and the three numbers."""

    campaign_id: int
    name: str
    status: str
    wall_s: float
    """From the run's creation to its end (or to *now* while it runs)."""
    finished: int
    effective: int
    cached: int
    spent: Spend
    currency: str
    budget: dict[str, Any]
    serves: tuple[str, ...]
    trial_spend: dict[int, Spend] = field(default_factory=dict)
    """Trial number → the sum of its attempts' spend."""
    failures: dict[str, int] = field(default_factory=dict)
    """Failure class → trials."""

    @property
    def throughput_per_h(self) -> float:
        return self.finished * 3600.0 / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def effective_per_h(self) -> float:
        return self.effective * 3600.0 / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cost_per_effective(self) -> float | None:
        """Money per usable result (``None`` before the first one)."""
        return self.spent.money / self.effective if self.effective else None

    def compute_per_effective_h(self, unit: str) -> float | None:
        """*unit*-hours (``cpu``, ``gpu``, ``node``) per usable result."""
        if not self.effective:
            return None
        return self.spent.compute_s(unit) / 3600.0 / self.effective


def summarize(store: Store, campaign_id: int, *, now: float | None = None) -> RunSummary:
    """The :class:`RunSummary` of run *campaign_id* as the record has it."""
    (run,) = store.query("SELECT * FROM campaigns WHERE id = ?", (campaign_id,))
    spec = json.loads(run["spec"]) if run["spec"] else {}
    end = run["ended_at"] if run["ended_at"] is not None else now
    if end is None:
        end = run["created_at"]
    counts: dict[str, int] = {}
    failures: dict[str, int] = {}
    number_of: dict[int, int] = {}
    for row in store.trials(campaign_id):
        counts[row["status"]] = counts.get(row["status"], 0) + 1
        number_of[row["id"]] = row["number"]
        if row["failure"] and row["status"] != "cached":
            failures[row["failure"]] = failures.get(row["failure"], 0) + 1
    spent = Spend()
    per_trial: dict[int, Spend] = {}
    for row in store.query(
        "SELECT a.trial_id, a.spend FROM attempts a JOIN trials t ON a.trial_id = t.id"
        " WHERE t.campaign_id = ? AND a.spend IS NOT NULL",
        (campaign_id,),
    ):
        spend = Spend(**json.loads(row["spend"]))
        spent = spent + spend
        number = number_of[row["trial_id"]]
        per_trial[number] = per_trial.get(number, Spend()) + spend
    budget = spec.get("budget") or {}
    return RunSummary(
        campaign_id=campaign_id,
        name=run["name"],
        status=run["status"],
        wall_s=max(float(end) - float(run["created_at"]), 0.0),
        finished=sum(counts.get(s, 0) for s in _FINISHED),
        effective=counts.get("completed", 0),
        cached=counts.get("cached", 0),
        spent=spent,
        currency=spec.get("currency") or budget.get("currency") or "USD",
        budget=budget,
        serves=tuple(spec.get("serves") or (run["name"],)),
        trial_spend=per_trial,
        failures=failures,
    )
