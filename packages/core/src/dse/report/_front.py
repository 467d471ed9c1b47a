"""A Pareto campaign's fronts as the record has them: what `dse report`, `dse show`, `dse
export` and the HTML report show of a run whose objectives are optimised together
(``[campaign] objectives = "pareto"``).

A front is drawn among the run's valid scored trials about one data version (the version read,
else the expected): no ranking crosses versions, an invalidated result or score never counts,
and since it is read from the record, an invalidation changes it at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._pareto import default_reference, hypervolume, hypervolume_history, pareto_ranks

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.record._base import Storage
    from dse.record._records import Trial

__all__ = ["Front", "FrontMember", "pareto_fronts", "pareto_objectives", "pareto_ranks_by_row"]


@dataclass(frozen=True, slots=True)
class FrontMember:
    """A trial of a front's data version: its scores and Pareto rank."""

    number: int
    params: dict[str, Any]
    scores: tuple[float, ...]
    """Its score of each objective (in the objectives' order and units)."""
    rank: int
    """1 on the front; 2 on the front of the trials off it; and so on."""
    ended_at: float | None
    config_hash: str = ""


@dataclass(frozen=True, slots=True)
class Front:
    """The Pareto front of a run's trials about one data version."""

    version: str | None
    objectives: tuple[tuple[str, str], ...]
    """(metric, direction) of each objective."""
    reference: tuple[float, ...]
    """The hypervolume's reference point, in the objectives' units: each objective's
    ``reference``, else beyond the worst value seen by a tenth of the range."""
    trials: tuple[FrontMember, ...]
    """The valid scored trials of the version, in the order they ended (a cache hit of a
    config listed already is left out: it is the same result)."""
    hypervolume: float
    """The volume the front dominates up to the reference point (in the objectives' units)."""
    history: tuple[float, ...]
    """The hypervolume after each trial of :attr:`trials` ended."""

    @property
    def members(self) -> list[FrontMember]:
        """The trials on the front, by their first objective's score (best first)."""
        on = [t for t in self.trials if t.rank == 1]
        maximise = self.objectives[0][1] == "maximize"
        return sorted(on, key=lambda t: (-t.scores[0] if maximise else t.scores[0], t.number))


def pareto_objectives(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """(metric, direction) of each objective of a Pareto run's spec; ``None`` for a run that
    optimises one."""
    if not spec.get("pareto"):
        return None
    return tuple((str(o.get("metric")), str(o.get("direction", "minimize")))
                 for o in spec.get("objectives") or [])


def pareto_fronts(store: Storage, campaign_id: int, spec: Mapping[str, Any]) -> list[Front]:
    """The fronts of run *campaign_id* (*spec* its recorded spec), one per data version in
    the order the versions first ended a trial (the trials that name none first: a cache hit
    of a trial that read a version it was not dispatched against names none); empty for a
    run that optimises one objective, or has no scored trial yet."""
    if pareto_objectives(spec) is None:
        return []
    return _fronts(store.summaries.pareto_trials(campaign_id), spec)


def _fronts(rows: Sequence[Trial], spec: Mapping[str, Any]) -> list[Front]:
    """:func:`pareto_fronts` of the valid scored trials *rows* (in the order they ended)."""
    objectives = pareto_objectives(spec)
    assert objectives is not None
    given = [o.get("reference") for o in spec.get("objectives") or []]
    groups: dict[str | None, list[Trial]] = {}
    seen: set[tuple[str | None, str]] = set()
    for row in rows:
        scores = row.scores
        version = row.data_version_read or row.data_version
        if scores is None or len(scores) != len(objectives) or (version, row.config_hash) in seen:
            continue  # a cache hit of a config the front has already: the same result
        seen.add((version, row.config_hash))
        groups.setdefault(version, []).append(row)
    # Trials that name no data version first: the last front is the latest version's.
    ordered = sorted(groups.items(), key=lambda item: item[0] is not None)
    return [_front(version, group, objectives, given) for version, group in ordered]


def pareto_ranks_by_row(
    store: Storage, campaign_id: int, spec: Mapping[str, Any]
) -> dict[int, int]:
    """Trial row -> its Pareto rank among the valid scored trials of its data version, for
    every such trial of run *campaign_id* (a cache hit has the rank of the result it reuses);
    empty for a run that optimises one objective."""
    if pareto_objectives(spec) is None:
        return {}
    rows = store.summaries.pareto_trials(campaign_id)  # read once: the fronts and the ranks' rows
    rank = {(f.version, t.config_hash): t.rank for f in _fronts(rows, spec) for t in f.trials}
    out: dict[int, int] = {}
    for row in rows:
        found = rank.get((row.data_version_read or row.data_version, row.config_hash))
        if found is not None:
            out[row.id] = found
    return out


def _front(
    version: str | None, rows: Sequence[Trial], objectives: tuple[tuple[str, str], ...],
    given: Sequence[Any],
) -> Front:
    signs = [-1.0 if direction == "maximize" else 1.0 for _, direction in objectives]
    vectors = [row.scores or () for row in rows]
    losses = [tuple(s * x for s, x in zip(signs, v, strict=True)) for v in vectors]
    placed = default_reference(losses)
    reference = tuple(
        sign * float(value) if value is not None else auto
        for sign, value, auto in zip(signs, given, placed, strict=True)
    )
    ranks = pareto_ranks(losses)
    history = hypervolume_history(losses, reference)
    trials = tuple(
        FrontMember(row.number, row.params, vector, rank, row.ended_at, row.config_hash)
        for row, vector, rank in zip(rows, vectors, ranks, strict=True)
    )
    return Front(
        version=version, objectives=objectives,
        reference=tuple(s * r for s, r in zip(signs, reference, strict=True)),
        trials=trials, hypervolume=hypervolume(losses, reference), history=tuple(history),
    )
