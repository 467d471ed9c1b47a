"""The learning curves of `dse report --html` drawn with matplotlib (the report extra): a line
per trial, a mark per stop and promotion, the rungs; the page has the plot only for a run
that has curves. Beside the local backend's tests, which run with every package and extra
installed (dse-core's own tests run without matplotlib)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from dse.report._curves import draw_curves
from support.cli import run_dse, write_plugin
from support.stopping import PLAIN_CAMPAIGN, build, curves_of, loss

if TYPE_CHECKING:
    from pathlib import Path


def test_the_figure_draws_a_line_per_trial_and_marks_each_decision(tmp_path: Path) -> None:
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.figure import Figure

    curves = curves_of(tmp_path)
    fig = Figure()
    caption = draw_curves(fig, curves)
    (ax,) = fig.axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("step", "loss (minimize)")
    (lines,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(lines.get_segments()) == sum(len(c.points) > 1 for c in curves.curves)
    stops, promotions = [c.get_offsets().tolist() for c in ax.collections
                         if isinstance(c, PathCollection)]
    assert sorted(map(tuple, stops)) == sorted(p for c in curves.curves for p in c.stops)
    assert sorted(map(tuple, promotions)) == [(1, loss(4, 1)), (1, loss(5, 1))]
    assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [1, 3]
    assert "all 6 trials that ran" in caption
    assert "(5 stops, 2 promotions drawn)" in caption


def test_the_html_report_has_the_curves_only_for_a_run_that_has_them(tmp_path: Path) -> None:
    write_plugin(tmp_path)
    build(tmp_path / ".dse")
    made = run_dse(tmp_path, "report", "es", "--html", "r.html", timeout=120)
    assert made.returncode == 0, made.stderr
    page = (tmp_path / "r.html").read_text()
    assert 'id="plot-curves"' in page
    assert re.search(r"Learning curves of all 6 trials that ran; 6 reported loss", page)
    assert "  rung 3       2 stopped, 0 promoted" in page
    (tmp_path / "plain.toml").write_text(PLAIN_CAMPAIGN)
    assert run_dse(tmp_path, "run", "plain.toml").returncode == 0
    made = run_dse(tmp_path, "report", "plain", "--html", "p.html", timeout=120)
    assert made.returncode == 0, made.stderr
    page = (tmp_path / "p.html").read_text()
    assert 'id="plot-outcomes"' in page
    assert 'id="plot-curves"' not in page
