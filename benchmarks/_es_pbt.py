"""Population based training in ``early_stopping.py``: dse's ``pbt`` campaigns read back from
their record, Ray Tune's runs read back from their log, both as the same plain run
(:class:`PbtRun`), and the per-seed comparison of the two.

A PBT run's members change: when a member is judged in the bottom quantile, a copy of a
top-quantile donor's checkpoint goes on with perturbed params. In dse that copy is a new trial
(a child, its own number, its checkpoint directory holding the donor's checkpoint); in Ray
Tune it is the same trial restarted from the donor's checkpoint. Either way the copy resumes
at the step the checkpoint saved and reports the steps after it, so where an attempt resumed
from is its first reported step less one (``resumed``), and its compute is the steps it
reported beyond that: the donor's steps are not counted again, as a promotion's are not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _es_schedule import step as schedule_step
from _peers import BenchmarkError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from _es_raytune import RayPoint

    import dse

Params = dict[str, Any]
Raw = tuple[float, int, int, int, float]
"""A point: ``(time, trial number, attempt, step, value)``."""


@dataclass(slots=True)
class PbtRun:
    """One PBT run on one seed: its points, its members' values at ``max_step``, where each
    attempt resumed from, and how many members were replaced."""

    points: list[Raw]
    finals: dict[int, float]
    wall_s: float
    resumed: dict[tuple[int, int], int] = field(default_factory=dict)
    exploited: int = 0
    """Members replaced by a perturbed copy of a donor (dse: members stopped by the rule)."""
    children: int = 0
    """Copies started (dse: trials started from a donor's checkpoint; Ray: restores with a
    donor's checkpoint and new params)."""
    rungs: dict[str, int] = field(default_factory=dict)
    """``"exploit@<step>"`` -> how many members were exploited at that step (dse's record)."""
    late: list[int] = field(default_factory=list)
    """Per exploit: steps the member reported beyond the step it was judged at (dse)."""
    unrecorded: int = 0
    """Steps in the trials' progress files that are not in the record (dse)."""


def same_lr(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def read_dse_pbt(store: dse.Store, campaign_id: int, metric: str, configs: list[Params],
                 max_step: int, wall: float, where: str) -> PbtRun:
    """dse's PBT campaign from its record: every trial's curve, the fresh members (the trials
    not in the lineage) checked to be the seed's configs in order, each child's first attempt
    resuming from its first reported step less one (at least the step its parent had reported
    when its checkpoint was copied: the copy holds that step or a later one). A child whose
    copy already held ``max_step`` reports no step: it ran nothing, and its result is its
    donor's."""
    parents = {r.number: r for r in store.stops.lineage(campaign_id)}
    points: list[Raw] = []
    run = PbtRun(points, {}, wall, children=len(parents))
    fresh: list[Params] = []
    reached: dict[tuple[int, int], int] = {}
    for row in store.reads.trials(campaign_id):
        status = row.status.value
        if status not in ("completed", "stopped"):
            raise BenchmarkError(f"{where}: trial {row.number} ended {status}: {row.message}")
        curve = store.reads.progress(row.id)
        points += [(p.at, row.number, p.attempt, p.step, float(p.metrics[metric]))
                   for p in curve]
        for p in curve:
            key = (row.number, p.attempt)
            reached[key] = max(reached.get(key, 0), p.step)
        parent = parents.get(row.number)
        if parent is None:
            fresh.append(dict(row.params))
        elif curve:
            first = min(curve, key=lambda p: (p.attempt, p.step))
            if first.step - 1 < parent.parent_step:
                raise BenchmarkError(
                    f"{where}: trial {row.number} first reported step {first.step}, before"
                    f" its parent {parent.parent}'s step {parent.parent_step} it was copied at")
            run.resumed[(row.number, first.attempt)] = first.step - 1
        if status == "completed":
            if curve and max(p.step for p in curve) != max_step:
                raise BenchmarkError(f"{where}: trial {row.number} completed before step"
                                     f" {max_step}")
            run.finals[row.number] = float((row.metrics or {})[metric])
        if row.trial_dir:
            path = Path(row.trial_dir) / "progress.jsonl"
            if path.exists():
                with open(path, encoding="utf-8") as handle:
                    run.unrecorded += sum(1 for line in handle if line.strip()) - len(curve)
    if len(fresh) != len(configs) or not all(
            same_lr(float(a["lr"]), float(b["lr"])) for a, b in zip(fresh, configs, strict=True)):
        raise BenchmarkError(f"{where}: the fresh members ran {[c['lr'] for c in fresh]}, not"
                             f" the seed's configs {[c['lr'] for c in configs]}")
    exploits = store.stops.run_decisions(campaign_id, ("exploit",))
    run.exploited = len(exploits)
    for d in exploits:
        run.rungs[f"exploit@{d.step}"] = run.rungs.get(f"exploit@{d.step}", 0) + 1
        run.late.append(reached.get((d.number, d.attempt), d.step) - d.step)
    return run


def read_ray_pbt(got: Sequence[RayPoint], max_step: int, wall: float) -> PbtRun:
    """Ray Tune's PBT run from its trainable's log: Ray trials numbered by id, each process
    run of a trial an attempt (in time order); a run that does not go on from the previous
    one's last step and rate is a copy of a donor."""
    numbers = {trial: i + 1 for i, trial in enumerate(sorted({p.trial for p in got}))}
    attempts: dict[str, int] = {}
    runs: dict[int, int] = {}
    last: dict[int, tuple[int, float]] = {}
    run = PbtRun([], {}, wall)
    for p in sorted(got, key=lambda p: (p.at, p.trial, p.step)):
        number = numbers[p.trial]
        if p.run not in attempts:
            runs[number] = attempts[p.run] = runs.get(number, 0) + 1
            run.resumed[(number, attempts[p.run])] = p.step - 1
            before = last.get(number)
            if before is not None and (before[0] != p.step - 1 or not same_lr(before[1], p.lr)):
                run.exploited += 1
                run.children += 1
        run.points.append((p.at, number, attempts[p.run], p.step, p.loss))
        last[number] = (p.step, p.lr)
        if p.step == max_step:
            run.finals[number] = p.loss
    return run


def schedule_stepper(params: Params) -> Callable[[], float]:
    """The schedule workload at a fixed ``lr``, stepped in process (Optuna's side)."""
    from _es_schedule import INITIAL

    lr = float(params["lr"])
    state = [INITIAL]

    def step_once() -> float:
        state[0] = schedule_step(state[0], lr)
        return state[0]

    return step_once


@dataclass(frozen=True, slots=True)
class SeedRatio:
    """One seed's comparison of the two PBTs: each one's compute to target (``None``: never)
    and Ray's whole compute."""

    seed: int
    dse: float | None
    ray: float | None
    ray_compute: float

    @property
    def ratio(self) -> float | None:
        """dse's compute to target over Ray's, read against dse where it cannot be told:
        when only dse reached the target, over Ray's whole compute (Ray would have needed
        more: the ratio is at most this); ``inf`` when only Ray reached it; ``None`` when
        neither did (nothing to compare)."""
        if self.dse is None:
            return None if self.ray is None else math.inf
        return self.dse / max(self.ray_compute if self.ray is None else self.ray, 1e-9)
