"""`dse report --html` of a finished campaign draws the params' importance, their slices and
the contour of the top two (``dse.report._landscapeplot``), with labelled axes and no text
overlapping. It needs matplotlib (``dse-core[report]``), which the isolation session of
dse-core alone does not install: it lives with the other report pages' tests."""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any

from dse.report._landscapeplot import LANDSCAPE_PLOTS
from support.cli import run_dse, write_plugin
from support.landscape import points

if TYPE_CHECKING:
    from pathlib import Path

def figures(page: str) -> dict[str, dict[str, Any]]:
    """Each figure of a report page: its caption and what its image says (axes, texts,
    overlaps), by id."""
    found = {}
    for match in re.finditer(
            r'<img id="plot-([a-z]+)"[^>]* data-axes="([^"]*)" data-texts="([^"]*)"'
            r' data-overlaps="([^"]*)"[^>]*><figcaption>(.*?)</figcaption>', page):
        key, axes, texts, overlaps, caption = match.groups()
        found[key] = {"axes": json.loads(html.unescape(axes)),
                      "texts": json.loads(html.unescape(texts)),
                      "overlaps": json.loads(html.unescape(overlaps)),
                      "caption": html.unescape(caption)}
    return found


CAMPAIGN = """
[campaign]
name = "land"
agent = "list"
backend = "probe"
max_parallelism = 4
poll_interval = "1ms"

[agent.list]
points = [{points}]

[backend.probe]
script = "land_script:timed"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "int", low = 0, high = 15 }}
lr = {{ type = "float", low = 1e-4, high = 1.0, log = true }}
layout = ["row", "col", "tile"]
noise = {{ type = "float", low = 0.0, high = 1.0 }}
"""

SCRIPT = '''
import math
from dse.testing import ProbeScript


def timed(p):
    return ProbeScript(seconds=0.01, metrics={
        "loss": (p["x"] - 7) ** 2 + 20 * abs(math.log10(p["lr"]) + 2)})
'''


def test_report_html_of_a_finished_campaign_draws_importance_slices_and_contour(
    tmp_path: Path,
) -> None:
    project = write_plugin(tmp_path)
    (project / "land_script.py").write_text(SCRIPT)
    listed = ", ".join("{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in p.items()) + "}"
                       for p in points(60))
    (project / "campaign.toml").write_text(CAMPAIGN.format(points=listed))
    done = run_dse(project, "run", "campaign.toml", timeout=120)
    assert done.returncode == 0, done.stderr
    out = project / "report.html"
    made = run_dse(project, "report", "campaign.toml", "--html", str(out), timeout=120)
    assert made.returncode == 0, made.stderr
    page = out.read_text()
    found = figures(page)
    assert set(LANDSCAPE_PLOTS) <= set(found)
    ids = re.findall(r'<img id="plot-([a-z]+)"', page)
    assert ids[ids.index("parameters") + 1:][:3] == ["importance", "slices", "contour"]
    for key in LANDSCAPE_PLOTS:
        assert found[key]["overlaps"] == [], (key, found[key]["overlaps"])
        assert found[key]["texts"], key
    importance = found["importance"]
    (bars,) = importance["axes"]
    assert bars["yticks"][:2] == ["x", "lr"]
    assert sorted(bars["yticks"]) == ["layout", "lr", "noise", "x"]
    assert bars["xlabel"].startswith("share of the importance (PED-ANOVA")
    assert "PED-ANOVA (Watanabe et al., IJCAI 2023)" in importance["caption"]
    assert "6 of the 60 completed, valid trials" in importance["caption"]
    slices_axes = found["slices"]["axes"]
    assert [a["xlabel"].split(" (")[0] for a in slices_axes] == bars["yticks"]
    by_label = {a["xlabel"].split(" (")[0]: a for a in slices_axes}
    assert by_label["lr"]["xscale"] == "log"
    assert by_label["layout"]["xticks"] == ["row", "col", "tile"]
    texts = " ".join(t[0] for t in found["slices"]["texts"])
    assert "a trial (60)" in texts
    assert "loss (lower is better)" in texts
    plane, bar = found["contour"]["axes"]
    assert (plane["xlabel"], plane["ylabel"], plane["yscale"]) == ("x", "lr", "log")
    assert bar["ylabel"] == "mean loss (lower is better)"
    assert "the two most important params" in found["contour"]["caption"]
