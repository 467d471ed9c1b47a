"""Invalidating a data version on real processes: its trials and the comparisons against its
baseline are flagged, export keeps them with the reason, and the agent is never fed them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from support.cli import run_dse, write_plugin

if TYPE_CHECKING:
    from pathlib import Path

# Each trial reads the dataset (its first line is a number) and reports time = x * that number.
CAMPAIGN = r'''
[campaign]
name = "inv"
agent = "list"
backend = "local"
max_parallelism = 2
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [{x = 2}, {x = 8}]
log = "told.jsonl"

[environment]
command = [
    "python", "-c",
    """import dse.trial; k = float(open('data.csv').read().split()[0]); \
       dse.trial.report(dict(time={x} * k))""",
]
time_limit = "30s"

[[objectives]]
metric = "time"

[space]
x = { type = "int", low = 1, high = 10 }

[scorer]
name = "ratio"

[baseline]
params = { x = 4 }

[data]
paths = ["data.csv"]
'''


def export(project: Path, target: str = "inv") -> dict[str, Any]:
    proc = run_dse(project, "export", target, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_invalidating_a_data_version_flags_comparisons_and_starves_the_agent(
    tmp_path: Path,
) -> None:
    project = write_plugin(tmp_path)
    (project / "data.csv").write_text("3\n")
    (project / "campaign.toml").write_text(CAMPAIGN)
    proc = run_dse(project, "run", "campaign.toml", timeout=120)
    assert proc.returncode == 0, proc.stderr
    first = export(project)
    records = first["trials"]
    # The baseline ran first (x = 4, time 12); x = 2 and x = 8 were compared against it.
    assert [(r["run"]["params"]["x"], r["run"]["baseline_run"]) for r in records] == [
        (4, True), (2, False), (8, False)]
    assert [r["concluded"]["score"] for r in records] == [1.0, 0.5, 2.0]
    base_id = records[0]["trial"]["id"]
    assert [r["concluded"]["baseline"]["trial"] for r in records] == [base_id] * 3
    version = records[0]["data"]["expected"]
    assert version.startswith("sha256:")
    told = (project / "told.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)[0] for line in told) == [2, 3]

    proc = run_dse(project, "invalidate", "--data-version", version, "--reason",
                   "data.csv was the wrong export")
    assert proc.returncode == 0, proc.stderr
    assert "3 trial(s) and 3 score(s) flagged invalid" in proc.stdout

    # Export keeps every result, flagged, with the reason; the comparisons are flagged too.
    flagged = export(project, str(first["run"]))
    assert len(flagged["trials"]) == 3
    for record in flagged["trials"]:
        concluded = record["concluded"]
        assert concluded["valid"] is False
        assert concluded["invalid"]["reason"] == "data.csv was the wrong export"
        assert concluded["invalid"]["kind"] == "data_version"
        assert [s["invalid"]["reason"] for s in concluded["scores"]] == [
            "data.csv was the wrong export"]
        assert concluded["score"] is not None  # kept, not deleted
    assert [t["valid"] for t in flagged["trajectory"]] == [False, False, False]
    report = run_dse(project, "report", "inv").stdout
    assert "INVALID      trials 1, 2, 3: data.csv was the wrong export (not ranked)" in report

    # The same campaign on the same data again: nothing flagged is reused or told.
    (project / "told.jsonl").unlink()
    proc = run_dse(project, "run", "campaign.toml", timeout=120)
    assert proc.returncode == 0, proc.stderr
    second = export(project)
    assert second["run"] != first["run"]
    assert [r["ended"]["outcome"] for r in second["trials"]] == ["completed"] * 3
    assert [r["ended"]["replaces"]["trial"] for r in second["trials"]] == [
        r["trial"]["id"] for r in records]
    assert all(r["concluded"]["valid"] for r in second["trials"])
    told = [json.loads(line) for line in (project / "told.jsonl").read_text().splitlines()]
    assert sorted(n for n, _, _ in told) == [2, 3]  # this run's own trials only
    show = run_dse(project, "show", f"{first['run']}:2").stdout
    assert "INVALID" in show
    assert f"replaced by   inv-{second['run']}-2" in show
