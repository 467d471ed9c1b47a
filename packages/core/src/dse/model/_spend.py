"""What an attempt (or a sum of attempts) used: :class:`Spend`, re-exported by
:mod:`dse.model._budget`; apart from it so that the commands reading the record (and the record's
rows) import it without the budget's parsing and ledger."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SPEND_METRICS", "Earlier", "Spend", "spend_metrics"]


@dataclass(frozen=True, slots=True)
class Spend:
    """What one attempt (or a sum of attempts) used: seconds of wall clock and of each kind of
    compute, and money in the campaign's currency."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    gpu_s: float = 0.0
    node_s: float = 0.0
    money: float = 0.0

    # Spelt out: several sums per attempt are on the engine's hot path, and a loop over
    # dataclasses.fields() cost more than the rest of the ledger's work.
    def __add__(self, other: Spend) -> Spend:
        return Spend(self.wall_s + other.wall_s, self.cpu_s + other.cpu_s,
                     self.gpu_s + other.gpu_s, self.node_s + other.node_s,
                     self.money + other.money)

    def __sub__(self, other: Spend) -> Spend:
        return Spend(self.wall_s - other.wall_s, self.cpu_s - other.cpu_s,
                     self.gpu_s - other.gpu_s, self.node_s - other.node_s,
                     self.money - other.money)

    def __mul__(self, factor: float) -> Spend:
        return Spend(self.wall_s * factor, self.cpu_s * factor, self.gpu_s * factor,
                     self.node_s * factor, self.money * factor)

    def compute_s(self, unit: str) -> float:
        """Seconds of *unit* (``cpu``, ``gpu`` or ``node``)."""
        return float(getattr(self, f"{unit}_s"))

    def as_dict(self) -> dict[str, float]:
        return {"wall_s": self.wall_s, "cpu_s": self.cpu_s, "gpu_s": self.gpu_s,
                "node_s": self.node_s, "money": self.money}


SPEND_METRICS = ("spend.wall_s", "spend.cpu_s", "spend.gpu_s", "spend.node_s", "spend.money")
"""The metric names an objective may give to optimise what a trial cost (what its attempts
were charged, retries included): seconds of wall clock, of CPU, GPU or node time, and money
in the campaign's currency."""


def spend_metrics(spend: Spend) -> dict[str, float]:
    """*spend* as the metrics :data:`SPEND_METRICS` name."""
    return {f"spend.{key}": value for key, value in spend.as_dict().items()}


@dataclass(frozen=True, slots=True)
class Earlier:
    """What a campaign's earlier runs spent, counted against its ceilings (``[budget] scope =
    "campaign"``): the record's figures, read when a run opens."""

    runs: tuple[int, ...] = ()
    """The ids of the earlier runs of the campaign (in the workspace)."""
    trials: int = 0
    """Trials they dispatched (not cache hits)."""
    spent: Spend = Spend()
    """What their attempts were charged."""
    run_s: float = 0.0
    """The time controllers drove them (what a wall-clock ceiling counts)."""
