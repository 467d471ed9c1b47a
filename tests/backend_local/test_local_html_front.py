"""The Pareto figures of `dse report --html` drawn with matplotlib (the report extra): the
front (its members highlighted, the trials off it, the attainment staircase, the reference
point; pairwise projections for three objectives or more) and the hypervolume against trials
and spend; a Pareto run's page has both, a single-objective run's neither. Beside the local
backend's tests, which run with every package and extra installed (dse-core's own tests run
without matplotlib; ``tests/core/report/test_front_report.py`` checks what the figures are drawn
from)."""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.report._frontplot import (
    FRONT_PLOTS,
    MEMBERS,
    OTHERS,
    REFERENCE,
    STAIRCASE,
    cumulative_spend,
    draw_front,
    draw_hypervolume,
    staircase,
)
from dse.report._html import PLOTS, render_html, write_html_report
from support.pareto import THREE, campaign, fronts, run, script

if TYPE_CHECKING:
    from pathlib import Path

    from dse.report._front import Front


def by_gid(ax: Any, gid: str) -> list[tuple[float, ...]]:
    """The points drawn on *ax* as the scatter *gid*."""
    (found,) = [c for c in ax.collections if c.get_gid() == gid]
    return [tuple(p) for p in found.get_offsets().tolist()]


def projected(trials: Any, i: int, j: int) -> list[tuple[float, ...]]:
    return [(t.scores[i], t.scores[j]) for t in trials]


def figure() -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(10, 4.2))


def test_a_pareto_page_has_the_front_figures_first_and_a_plain_page_none(
    tmp_path: Path,
) -> None:
    store, run_id = run(campaign(tmp_path / "mo", priced=True))
    page = write_html_report(store, run_id, tmp_path / "mo.html").read_text()
    ids = re.findall(r'<img id="plot-([a-z]+)"', page)
    assert ids == [*FRONT_PLOTS, *PLOTS]
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert captions[0].startswith(
        "The Pareto front of the data: 4 valid trials scored on both objectives, the 3 on the"
        " front highlighted and joined by their attainment staircase, the 1 off it lighter.")
    assert "in time \N{MULTIPLICATION SIGN} acc" in captions[1]
    assert "spent by then in USD" in captions[1]
    store.close()

    plain = dse.campaign_from_dict(
        {"campaign": {"name": "one", "max_parallelism": 1},
         "space": {"x": {"type": "int", "low": 0, "high": 100}},
         "objectives": [{"metric": "time"}, {"metric": "acc", "direction": "maximize"}]},
        workspace=tmp_path / "one",
    )
    store, run_id = run(plain)
    page = write_html_report(store, run_id, tmp_path / "one.html").read_text()
    assert re.findall(r'<img id="plot-([a-z]+)"', page) == list(PLOTS)
    store.close()


def test_the_front_highlights_exactly_its_members_on_their_staircase(tmp_path: Path) -> None:
    store, run_id = run(campaign(tmp_path))
    (front,) = fronts(store, run_id)
    fig = figure()
    caption = draw_front(fig, [front])
    (ax,) = fig.axes
    assert by_gid(ax, MEMBERS) == [(10, 50), (20, 80), (50, 90)]
    assert by_gid(ax, MEMBERS) == projected(front.members, 0, 1)
    assert by_gid(ax, OTHERS) == [(40, 60)]
    assert by_gid(ax, REFERENCE) == [front.reference]
    (line,) = [ln for ln in ax.lines if ln.get_gid() == STAIRCASE]
    assert list(zip(line.get_xdata(), line.get_ydata(), strict=True)) == staircase(front)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("time (lower is better)",
                                                  "acc (higher is better)")
    assert f"hypervolume ({front.hypervolume:.4g})" in caption
    store.close()


@pytest.mark.parametrize(("count", "panels"), [(3, 3), (5, 6)])
def test_three_objectives_or_more_are_drawn_as_pairwise_projections(
    tmp_path: Path, count: int, panels: int,
) -> None:
    objectives = [*THREE, {"metric": "acc2", "direction": "maximize"},
                  {"metric": "time2"}][:count]
    metrics = [str(o["metric"]) for o in objectives]
    plain = script()

    def play(params: Any) -> Any:
        scripted = plain(params)
        if scripted.metrics is None:
            return scripted
        values = dict(scripted.metrics)
        values.update(acc2=values["acc"] / 2, time2=values["time"] * 2)
        return dse.testing.ProbeScript(seconds=scripted.seconds, metrics=values)

    store, run_id = run(campaign(tmp_path, objectives), play=play)
    (front,) = fronts(store, run_id)
    assert 0 < len(front.members) < len(front.trials)
    fig = figure()
    caption = draw_front(fig, [front])
    pairs = list(itertools.combinations(range(min(count, 4)), 2))
    assert len(fig.axes) == panels == len(pairs)
    for ax, (i, j) in zip(fig.axes, pairs, strict=True):
        assert by_gid(ax, MEMBERS) == projected(front.members, i, j)
        assert sorted(by_gid(ax, OTHERS)) == sorted(
            projected([t for t in front.trials if t.rank > 1], i, j))
        assert ax.get_xlabel().startswith(f"{metrics[i]} (")
        assert ax.get_ylabel().startswith(f"{metrics[j]} (")
    assert not [ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == STAIRCASE]
    assert ("time2 not drawn" in caption) == (count == 5)
    store.close()


def test_the_hypervolume_is_drawn_against_trials_and_the_runs_spend(tmp_path: Path) -> None:
    store, run_id = run(campaign(tmp_path, priced=True))
    (front,) = fronts(store, run_id)
    numbers = {t.id: t.number for t in store.reads.trials(run_id)}
    attempts = [{"number": numbers[a.trial_id], "end": a.ended_at,
                 "money": a.spend.money if a.spend else 0.0,
                 "cpu_s": a.spend.cpu_s if a.spend else 0.0} for a in store.reads.attempts(run_id)]
    fig = figure()
    caption = draw_hypervolume(fig, [front], attempts, "USD")
    left, right = fig.axes
    ((xs, ys),) = [(ln.get_xdata(), ln.get_ydata()) for ln in left.lines]
    assert (list(xs), list(ys)) == ([1, 2, 3, 4], list(front.history))
    ((xs, ys),) = [(ln.get_xdata(), ln.get_ydata()) for ln in right.lines]
    assert list(xs) == cumulative_spend(front, attempts, "USD")[0]
    assert list(ys) == list(front.history)
    assert right.get_xlabel() == "the run's spend (USD)"
    assert left.get_ylabel() == "hypervolume (time \N{MULTIPLICATION SIGN} acc)"
    assert f"{front.hypervolume:.4g} at the end" in caption
    store.close()


def test_the_front_drawn_is_the_last_data_versions(tmp_path: Path) -> None:
    store, run_id = run(campaign(tmp_path), (10, 20, 40, 50),
                        script(versions={10: "v1", 20: "v2", 40: "v2", 50: "v2"}))
    found: list[Front] = fronts(store, run_id)
    assert [f.version for f in found] == ["v1", "v2"]
    fig = figure()
    caption = draw_front(fig, found)
    (ax,) = fig.axes
    assert by_gid(ax, MEMBERS) == [(20, 80), (50, 90)]
    assert by_gid(ax, OTHERS) == [(40, 60)]
    assert caption.startswith("The Pareto front of data version v2 (the last of 2; the earlier"
                              " versions' trials are not drawn): 3 valid trials")
    store.close()


def test_a_pareto_run_that_scored_nothing_yet_says_so_in_both_figures(tmp_path: Path) -> None:
    store, run_id = run(campaign(tmp_path), (30, 70))
    # render_html reads the fronts itself when not handed them (write_html_report hands them).
    page = render_html(store, run_id, tmp_path / "r.html", ["report"]).read_text()
    assert re.findall(r'<img id="plot-([a-z]+)"', page) == [*FRONT_PLOTS, *PLOTS]
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert captions[:2] == ["No valid trial scored on every objective yet: no front to draw."] * 2
    store.close()
