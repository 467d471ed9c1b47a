"""``examples/quickstart/pareto.toml`` as a user runs it: `dse run` (real trial processes on
the local backend, the Bayesian agent on two objectives), then `dse report`, `dse show` and
`dse export` read the front back from the record."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dse.model._pareto import dominates

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def dse(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DSE_DEBUG", "DSE_PLUGINS")}
    proc = subprocess.run([sys.executable, "-m", "dse", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_the_pareto_example_runs_and_every_reader_shows_its_front(tmp_path: Path) -> None:
    project = tmp_path / "quickstart"
    shutil.copytree(EXAMPLE, project)
    campaign = project / "pareto.toml"
    text = campaign.read_text()
    assert "max_trials = 30" in text
    campaign.write_text(text.replace("max_trials = 30", "max_trials = 14"))
    ran = dse(project, "run", "pareto.toml")
    assert "front: " in ran.stdout
    assert "hypervolume" in ran.stdout

    doc = json.loads(dse(project, "report", "pareto", "--json").stdout)
    (run,) = doc["runs"]
    (front,) = run["pareto"]["fronts"]
    assert run["pareto"]["objectives"] == [{"metric": "time_ms", "direction": "minimize"},
                                           {"metric": "smem_kb", "direction": "minimize"}]
    assert front["reference"]["smem_kb"] == 48.0
    members = {m["trial"]: (m["scores"]["time_ms"], m["scores"]["smem_kb"])
               for m in front["members"]}
    assert members
    assert front["hypervolume"] > 0

    rows = list(csv.DictReader(io.StringIO(dse(project, "export", "pareto", "--format",
                                                "csv").stdout)))
    vectors = {int(r["trial"]): (float(r["score.time_ms"]), float(r["score.smem_kb"]))
               for r in rows if r["score.time_ms"]}
    # The CSV's ranks agree with the report's front, and the front is the undominated.
    on_front = {int(r["trial"]) for r in rows if r["pareto_rank"] == "1"}
    assert on_front == set(members)
    assert on_front == {n for n, v in vectors.items()
                        if not any(dominates(w, v) for w in vectors.values())}
    assert all(int(r["pareto_rank"]) > 1 for r in rows
               if r["score.time_ms"] and int(r["trial"]) not in on_front)

    first = min(members)
    shown = dse(project, "show", f"pareto:{first}").stdout
    assert "pareto rank   1 (on the front) among the valid trials" in shown
    record = json.loads(dse(project, "show", f"pareto:{first}", "--json").stdout)
    assert record["concluded"]["pareto"]["rank"] == 1
    assert record["concluded"]["pareto"]["scores"] == {
        "time_ms": members[first][0], "smem_kb": members[first][1]}
