"""What the Pareto figures of `dse report --html` are drawn from (``dse.report._frontplot``, pure:
no matplotlib needed): the attainment staircase, the area the front dominates, the run's spend
when each trial ended; read from Pareto runs through the real engine (``support.pareto``).
The figures themselves are drawn in ``tests/backend_local/test_local_html_front.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dse.report._frontplot import cumulative_spend, dominated_region, staircase
from support.pareto import TWO, campaign, fronts, run, script

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import dse


def area(polygon: Sequence[tuple[float, float]]) -> float:
    """The shoelace formula."""
    pairs = zip(polygon, [*polygon[1:], polygon[0]], strict=True)
    return abs(sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in pairs)) / 2


def attempts(store: dse.Store, run_id: int) -> list[dict[str, Any]]:
    """The attempts as the HTML report hands them to its drawers."""
    numbers = {t.id: t.number for t in store.reads.trials(run_id)}
    return [{"number": numbers[a.trial_id], "end": a.ended_at,
             "money": a.spend.money if a.spend else 0.0,
             "cpu_s": a.spend.cpu_s if a.spend else 0.0} for a in store.reads.attempts(run_id)]


def test_the_staircase_joins_the_members_and_its_area_is_the_hypervolume(tmp_path: Path) -> None:
    objectives = ({**TWO[0], "reference": 60}, {**TWO[1], "reference": 40})
    store, run_id = run(campaign(tmp_path, objectives))
    (front,) = fronts(store, run_id)
    assert [m.number for m in front.members] == [1, 2, 5]
    # time is minimised, acc maximised: the steps go right then up, from the reference's
    # acc to its time.
    assert staircase(front) == [(10, 40), (10, 50), (20, 50), (20, 80), (50, 80), (50, 90),
                                (60, 90)]
    region = dominated_region(front)
    assert region == [*staircase(front), (60, 40)]
    assert area(region) == front.hypervolume == 50 * 10 + 40 * 30 + 10 * 10
    store.close()


def test_a_member_beyond_the_reference_is_on_the_staircase_and_outside_the_area(
    tmp_path: Path,
) -> None:
    objectives = ({**TWO[0], "reference": 45}, {**TWO[1], "reference": 40})
    store, run_id = run(campaign(tmp_path, objectives))
    (front,) = fronts(store, run_id)
    assert staircase(front) == [(10, 40), (10, 50), (20, 50), (20, 80), (50, 80), (50, 90)]
    region = dominated_region(front)
    assert region == [(10, 40), (10, 50), (20, 50), (20, 80), (45, 80), (45, 40)]
    assert area(region) == front.hypervolume == 35 * 10 + 25 * 30
    store.close()


def test_the_spend_axis_counts_every_attempt_ended_by_each_trial_failed_ones_too(
    tmp_path: Path,
) -> None:
    # Trial 3 fails after 30 s: its 30 cents are in the spend by trial 4.
    store, run_id = run(campaign(tmp_path, priced=True))
    (front,) = fronts(store, run_id)
    assert [t.number for t in front.trials] == [1, 2, 4, 5]
    spend, unit = cumulative_spend(front, attempts(store, run_id), "EUR")
    assert unit == "EUR"
    assert spend == pytest.approx([0.10, 0.30, 1.00, 1.50])
    store.close()


@pytest.mark.parametrize(("scale", "unit", "per"), [
    (0.1, "CPU-seconds", 1.0), (1.0, "CPU-minutes", 60.0), (100.0, "CPU-hours", 3600.0),
])
def test_an_unpriced_run_spends_cpu_time_in_a_unit_its_total_reads_in(
    tmp_path: Path, scale: float, unit: str, per: float,
) -> None:
    store, run_id = run(campaign(tmp_path, time_limit="2h"), play=script(scale=scale))
    (front,) = fronts(store, run_id)
    spend, got = cumulative_spend(front, attempts(store, run_id), "USD")
    assert got == unit
    assert spend == pytest.approx([scale * s / per for s in (10, 30, 100, 150)])
    store.close()


def test_a_run_that_scored_nothing_has_no_front(tmp_path: Path) -> None:
    store, run_id = run(campaign(tmp_path), (30, 70))
    assert fronts(store, run_id) == []
    store.close()
