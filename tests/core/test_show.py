"""`dse show TRIAL` and `dse export --format json`: the five answers of the run record, read
back in real subprocesses and checked against the SQLite record they come from."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dse
from support.cli import run_dse, write_plugin

PROBE_CAMPAIGN = """
[campaign]
name = "demo"
agent = "list"
backend = "probe"
max_parallelism = 2
poll_interval = "1ms"

[backend.probe]
write_results = true

[agent.list]
points = [{x = 1}, {x = 2}, {x = 3}, {x = 2}]

[[objectives]]
metric = "value"

[space]
x = { type = "int", low = 0, high = 10 }
"""

# A real process per trial: x < 3 reports a complete result having read the data it was given,
# anything else a partial one having read other data.
LOCAL_CAMPAIGN = r'''
[campaign]
name = "real"
agent = "list"
backend = "local"
max_parallelism = 2
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [{x = 1}, {x = 7}]

[environment]
command = [
    "python", "-c",
    """import dse.trial; dse.trial.report(dict(value={x} / 10), complete={x} < 3, \
       data_version=None if {x} < 3 else 'v0')""",
]
code_version = "abc123"
time_limit = "30s"

[backend.local]
cpus = 2

[backend.local.price]
cpu_hour = 36
currency = "EUR"

[[objectives]]
metric = "value"
direction = "maximize"

[space]
x = { type = "int", low = 0, high = 10 }

[data]
version = "2024-06"
'''

SECTIONS = ("1. What was run", "2. Against what data", "3. How it ended", "4. What it cost",
            "5. What was concluded")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding the throwaway plugin module next to where campaigns go."""
    return write_plugin(tmp_path)


def ran(project: Path, text: str) -> Path:
    (project / "campaign.toml").write_text(text)
    proc = run_dse(project, "run", "campaign.toml", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return project / ".dse" / "dse.sqlite"


def show_json(project: Path, trial: str) -> dict[str, Any]:
    proc = run_dse(project, "show", trial, "--json")
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def record(db_path: Path) -> tuple[sqlite3.Row, list[sqlite3.Row], list[sqlite3.Row]]:
    """The run, its trials and their attempts, straight from the SQLite file."""
    db = sqlite3.connect(db_path)
    db.row_factory = sqlite3.Row
    try:
        (run,) = db.execute("SELECT * FROM campaigns").fetchall()
        trials = db.execute("SELECT * FROM trials ORDER BY number").fetchall()
        attempts = db.execute("SELECT * FROM attempts ORDER BY trial_id, attempt").fetchall()
    finally:
        db.close()
    return run, trials, attempts


def assert_matches_record(doc: dict[str, Any], run: sqlite3.Row, trial: sqlite3.Row,
                          attempts: list[sqlite3.Row]) -> None:
    """Every answer of *doc* is what the record holds for *trial*."""
    mine = [a for a in attempts if a["trial_id"] == trial["id"]]
    spec = json.loads(run["spec"])
    name, _, version = run["agent"].partition("==")
    assert doc["trial"] == {"id": f"{run['name']}-{run['id']}-{trial['number']}",
                            "campaign": run["name"], "run": run["id"],
                            "number": trial["number"]}
    # 1. what was run
    assert doc["run"]["params"] == json.loads(trial["params"])
    assert doc["run"]["config_hash"] == trial["config_hash"]
    assert doc["run"]["code_version"] == spec["environment"]["code_version"]
    assert doc["run"]["agent"] == {"name": name, "version": version}
    assert doc["run"]["proposal"] == trial["proposal"]
    # 2. against what data
    keys = trial.keys()
    expected = trial["data_version"] if "data_version" in keys else None
    read = trial["data_version_read"] if "data_version_read" in keys else None
    assert doc["data"] == {"expected": expected, "read": read,
                           "mismatch": None not in (expected, read) and expected != read}
    # 3. how it ended
    ended = doc["ended"]
    assert (ended["outcome"], ended["failure"], ended["message"]) == (
        trial["status"], trial["failure"], trial["message"])
    assert [(a["attempt"], a["job_id"], a["state"], a["exit_code"], a["signal"], a["node"],
             a["started_at"], a["ended_at"]) for a in ended["attempts"]] == [
        (a["attempt"], a["job_id"], a["state"], a["exit_code"], a["signal"], a["node"],
         a["started_at"], a["ended_at"]) for a in mine]
    # 4. what it cost
    spends = [json.loads(a["spend"]) for a in mine]
    assert [{k: c[k] for k in s} for c, s in zip(doc["cost"]["attempts"], spends,
                                                 strict=True)] == spends
    for key in ("wall_s", "cpu_s", "money"):
        assert doc["cost"]["total"][key] == pytest.approx(sum(s[key] for s in spends))
    assert doc["cost"]["currency"] == spec["currency"]
    # 5. what was concluded
    assert doc["concluded"]["score"] == trial["score"]
    assert doc["concluded"]["metrics"] == (json.loads(trial["metrics"])
                                           if trial["metrics"] else {})
    assert doc["concluded"]["scorer"] == {"name": "default", "distribution": "dse-core",
                                          "version": dse.__version__}


def test_show_answers_the_five_questions_from_the_record(project: Path) -> None:
    run, trials, attempts = record(ran(project, PROBE_CAMPAIGN))
    for trial in trials:
        doc = show_json(project, f"demo-{run['id']}-{trial['number']}")
        assert_matches_record(doc, run, trial, attempts)
    # The three spellings of a trial name the same record.
    assert show_json(project, "demo:2") == show_json(project, f"{run['id']}:2") == show_json(
        project, f"demo-{run['id']}-2")

    text = run_dse(project, "show", "demo:1")
    assert text.returncode == 0, text.stderr
    positions = [text.stdout.index(title) for title in SECTIONS]
    assert positions == sorted(positions)
    assert f"scorer        default (dse-core {dse.__version__})" in text.stdout
    assert "agent list 1, proposal 1" in text.stdout


def test_a_cache_hit_says_which_trial_it_reuses(project: Path) -> None:
    run, trials, _ = record(ran(project, PROBE_CAMPAIGN))
    hit = next(t for t in trials if t["status"] == "cached")
    original = next(t for t in trials if t["id"] == hit["cache_of"])
    doc = show_json(project, f"demo:{hit['number']}")
    assert doc["ended"]["reuses"] == {"trial": f"demo-{run['id']}-{original['number']}",
                                      "run": run["id"], "number": original["number"]}
    assert doc["ended"]["attempts"] == []
    assert doc["cost"]["total"]["money"] == 0.0
    text = run_dse(project, "show", f"demo:{hit['number']}").stdout
    assert f"reuses trial {original['number']}" in text


def test_export_json_carries_every_record_and_keeps_the_trajectory(project: Path) -> None:
    run, trials, attempts = record(ran(project, PROBE_CAMPAIGN))
    proc = run_dse(project, "export", "demo", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1
    assert (doc["campaign"], doc["run"], doc["status"]) == ("demo", run["id"], run["status"])
    assert [step["step"] for step in doc["trajectory"]] == [1, 2, 3, 4]
    assert [r["trial"]["number"] for r in doc["trials"]] == [t["number"] for t in trials]
    for exported, trial in zip(doc["trials"], trials, strict=True):
        assert exported == show_json(project, f"demo:{trial['number']}")
        assert_matches_record(exported, run, trial, attempts)


def test_a_trial_that_read_other_data_than_expected_is_flagged(project: Path) -> None:
    db_path = ran(project, PROBE_CAMPAIGN)
    db = sqlite3.connect(db_path)
    try:
        with db:
            db.execute("UPDATE trials SET data_version = 'v1', data_version_read = 'v2'"
                       " WHERE number = 1")
            db.execute("UPDATE trials SET data_version = 'v1', data_version_read = 'v1'"
                       " WHERE number = 2")
    finally:
        db.close()
    assert show_json(project, "demo:1")["data"] == {"expected": "v1", "read": "v2",
                                                    "mismatch": True}
    assert show_json(project, "demo:2")["data"] == {"expected": "v1", "read": "v1",
                                                    "mismatch": False}
    assert "read v2, expected v1" in run_dse(project, "show", "demo:1").stdout
    assert "read v1, expected" not in run_dse(project, "show", "demo:2").stdout
    text = run_dse(project, "show", "demo:3").stdout
    assert "expected      not declared" in text


@pytest.mark.parametrize(
    ("target", "needle"),
    [("nonsense", "expected <campaign>-<run>-<number>"), ("demo:9", "has no trial 9"),
     ("other:1", "no campaign run named 'other'"), ("other-1-1", "no run 1 of a campaign")],
)
def test_a_bad_trial_is_one_error_line(project: Path, target: str, needle: str) -> None:
    ran(project, PROBE_CAMPAIGN)
    proc = run_dse(project, "show", target)
    assert_one_line_error(proc, needle)


def test_show_without_a_record_is_one_error_line(project: Path) -> None:
    assert_one_line_error(run_dse(project, "show", "demo:1"), "no dse record here")


def test_a_real_local_trial_answers_all_five_and_a_partial_one_has_no_score(
    project: Path,
) -> None:
    pytest.importorskip("dse_local")
    run, trials, attempts = record(ran(project, LOCAL_CAMPAIGN))
    complete, partial = trials
    for trial in trials:
        assert_matches_record(show_json(project, f"real:{trial['number']}"), run, trial,
                              attempts)

    doc = show_json(project, "real:1")
    assert doc["run"]["code_version"] == "abc123"
    assert doc["run"]["command"][0] == "python"
    assert doc["run"]["argv"][2].startswith("import dse.trial; dse.trial.report(dict(value=1 /")
    assert "data_version=None if 1 < 3" in doc["run"]["argv"][2]
    (attempt,) = doc["ended"]["attempts"]
    assert (attempt["state"], attempt["exit_code"]) == ("succeeded", 0)
    assert attempt["node"]
    assert doc["ended"]["outcome"] == "completed"
    assert doc["cost"]["currency"] == "EUR"
    assert doc["cost"]["total"]["wall_s"] > 0
    assert doc["cost"]["total"]["money"] == pytest.approx(doc["cost"]["total"]["cpu_s"] / 100)
    assert doc["concluded"]["score"] == pytest.approx(0.1) == complete["score"]
    assert doc["concluded"]["no_score"] is None
    assert doc["data"] == {"expected": "2024-06", "read": "2024-06", "mismatch": False}

    doc = show_json(project, "real:2")
    assert partial["score"] is None
    assert doc["concluded"]["score"] is None
    assert doc["ended"]["failure"] == "incomplete_output"
    assert doc["concluded"]["no_score"] == partial["message"]
    assert "not marked complete" in doc["concluded"]["no_score"]
    assert doc["data"] == {"expected": "2024-06", "read": "v0", "mismatch": True}
    text = run_dse(project, "show", "real:2").stdout
    assert "read v0, expected 2024-06" in text
    assert f"no score: {partial['message']}" in text
    for title in SECTIONS:
        assert title in text


def assert_one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dse: error: ")]
    assert len(errors) == 1, proc.stderr
    assert needle in errors[0], errors[0]
    assert proc.stdout == ""


def test_show_help_names_the_trial_forms() -> None:
    proc = subprocess.run([sys.executable, "-m", "dse", "show", "--help"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert "<campaign>:<number>" in proc.stdout


def documented_keys(value: Any, path: str = "") -> set[str]:
    """Every key of a record, leaving out the free-form maps (params, metrics, usage)."""
    keys: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            keys.add(key)
            if key not in ("params", "metrics", "usage", "action", "observation"):
                keys |= documented_keys(item, key)
    elif isinstance(value, list):
        for item in value:
            keys |= documented_keys(item, path)
    return keys


def test_every_key_of_show_and_export_is_documented(project: Path) -> None:
    ran(project, PROBE_CAMPAIGN)
    export = json.loads(run_dse(project, "export", "demo", "--format", "json").stdout)
    docs = (Path(__file__).parents[2] / "docs" / "record.md").read_text(encoding="utf-8")
    missing = sorted(k for k in documented_keys(export) if f"`{k}`" not in docs
                     and f"{{{k}" not in docs and f", {k}" not in docs)
    assert missing == []
