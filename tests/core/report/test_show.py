"""`dse show TRIAL` and `dse export --format json`: the five answers of the run record, read
back in real subprocesses and checked against the SQLite record they come from."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import dse
from support.cli import run_dse, write_plugin
from support.probe import probe_campaign
from support.show import (
    SECTIONS,
    assert_matches_record,
    ran,
    record,
    show_json,
    undocumented_keys,
)

PROBE_CAMPAIGN = probe_campaign("{x = 1}, {x = 2}, {x = 3}, {x = 2}")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding the throwaway plugin module next to where campaigns go."""
    return write_plugin(tmp_path)


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
    assert f"scorer        default {dse.__version__} (minimize)" in text.stdout
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
    assert doc["schema"] == 2
    assert (doc["campaign"], doc["run"], doc["status"]) == ("demo", run["id"], run["status"])
    assert [step["step"] for step in doc["trajectory"]] == [1, 2, 3, 4]
    assert [r["trial"]["number"] for r in doc["trials"]] == [t["number"] for t in trials]
    for exported, trial in zip(doc["trials"], trials, strict=True):
        assert exported == show_json(project, f"demo:{trial['number']}")
        assert_matches_record(exported, run, trial, attempts)


def test_export_jsonl_round_trips_every_trial_of_the_json_document(project: Path) -> None:
    _, trials, _ = record(ran(project, PROBE_CAMPAIGN))
    whole = json.loads(run_dse(project, "export", "demo", "--format", "json").stdout)
    proc = run_dse(project, "export", "demo", "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr
    head, *lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert head == {k: whole[k] for k in ("schema", "campaign", "run", "status",
                                          "invalidations")}
    assert [line["trajectory"] for line in lines] == whole["trajectory"]
    assert [line["record"] for line in lines] == whole["trials"]
    assert len(lines) == len(trials) == 4


def test_an_export_written_a_page_at_a_time_is_the_whole_document(project: Path) -> None:
    from dse.report._export import export_text

    db = ran(project, PROBE_CAMPAIGN)
    whole = run_dse(project, "export", "demo", "--format", "json").stdout
    csv_text = run_dse(project, "export", "demo", "--format", "csv").stdout
    store = dse.Store(db)
    try:
        run = store.reads.find_campaign("demo")
        assert run is not None
        # Pages of one and three trials: the pieces join into the same bytes.
        for page in (1, 3):
            assert "".join(export_text(store, run, "json", page)) == whole
            assert "".join(export_text(store, run, "csv", page)) == csv_text
        assert json.loads(whole)["trials"]
    finally:
        store.close()


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
    store = dse.Store(db_path)  # rows written outside a pass: the summaries built again
    try:
        store.rebuild_summaries()
    finally:
        store.close()
    assert show_json(project, "demo:1")["data"] == {"expected": "v1", "read": "v2",
                                                    "mismatch": True}
    assert show_json(project, "demo:2")["data"] == {"expected": "v1", "read": "v1",
                                                    "mismatch": False}
    assert "read v2, expected v1" in run_dse(project, "show", "demo:1").stdout
    assert "read v1, expected" not in run_dse(project, "show", "demo:2").stdout
    text = run_dse(project, "show", "demo:3").stdout
    assert "expected      not declared" in text
    report = run_dse(project, "report", "demo")
    assert "FLAGGED      read other data than expected: trials 1\n" in report.stdout
    (run,) = json.loads(run_dse(project, "report", "demo", "--json").stdout)["runs"]
    assert run["mismatched"] == [1]


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


def test_every_key_of_show_and_export_is_documented(project: Path) -> None:
    ran(project, PROBE_CAMPAIGN)
    export = json.loads(run_dse(project, "export", "demo", "--format", "json").stdout)
    assert undocumented_keys(export) == []


def test_show_says_what_a_trial_spanning_nodes_asked_for(project: Path) -> None:
    text = PROBE_CAMPAIGN.replace("[space]", '[environment]\nnodes = "{x}"\ntasks_per_node = 2\n'
                                  "gpus_per_node = 1\nmemory_mb = 512\n\n[space]")
    text = text.replace("low = 0, high = 10", "low = 1, high = 10")
    ran(project, text)
    shown = json.loads(run_dse(project, "show", "demo-1-3", "--json").stdout)
    assert shown["run"]["resources"] == {"nodes": 3, "tasks_per_node": 2, "cpus": 1,
                                         "gpus": 1, "memory_mb": 512}
    lines = run_dse(project, "show", "demo-1-3").stdout.splitlines()
    assert "  resources     3 nodes x 2 tasks x 1 CPU; 1 GPU, 512 MiB per node" in lines
    one = json.loads(run_dse(project, "show", "demo-1-1", "--json").stdout)["run"]["resources"]
    assert (one["nodes"], one["tasks_per_node"]) == (1, 2)
