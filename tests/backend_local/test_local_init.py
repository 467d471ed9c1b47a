"""`dse init` -> edit -> `dse run --set max_parallelism=4` -> `dse report`, as a user types it:
the starter runs on real local processes, the override takes effect and is recorded with
the run, and the report says so (text and JSON)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from support.cli import run_dse, write_plugin


def test_init_edit_run_with_set_and_report(tmp_path: Path) -> None:
    write_plugin(tmp_path)  # the tests' plugin module, which every `dse` here loads
    init = run_dse(tmp_path, "init", "study.toml")
    assert init.returncode == 0, init.stderr
    assert "wrote study.toml and trial.py" in init.stderr + init.stdout
    campaign = tmp_path / "study.toml"
    # The user's edit: fewer trials, and a budget uncommented.
    text = campaign.read_text().replace("max_trials = 20", "max_trials = 8")
    text = text.replace("# [budget]\n# trials = 100", "[budget]\ntrials = 100")
    campaign.write_text(text)

    ran = run_dse(tmp_path, "run", "study.toml", "--set", "max_parallelism=4",
                  "--set", "environment.time_limit=30s", "--json", timeout=180)
    assert ran.returncode == 0, ran.stderr
    outcome = json.loads(ran.stdout)
    assert outcome["status"] == "completed", outcome
    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    (parallelism, spec), = db.execute("SELECT max_parallelism, spec FROM campaigns")
    db.close()
    assert parallelism == 4
    recorded = json.loads(spec)
    assert recorded["overrides"] == ["max_parallelism=4", "environment.time_limit=30s"]
    assert recorded["environment"]["time_limit"] == 30.0
    assert recorded["budget"]["trials"] == 100
    assert recorded["max_trials"] == 8

    report = run_dse(tmp_path, "report", "study.toml", "--json")
    assert report.returncode == 0, report.stderr
    (run,) = json.loads(report.stdout)["runs"]
    assert run["overrides"] == ["max_parallelism=4", "environment.time_limit=30s"]
    assert run["trials"]["completed"] == 8
    assert run["interruptions"] == {"retried": 0, "trials": 0, "resumed": 0, "by_class": {},
                                    "nodes": {}}
    text_report = run_dse(tmp_path, "report", "study.toml").stdout
    assert "  overrides    --set max_parallelism=4 --set environment.time_limit=30s" in \
        text_report
    assert "  retries      none" in text_report

    # The next run without --set is the file's own again, and records no override.
    again = run_dse(tmp_path, "run", "study.toml", "--fresh", "--json", timeout=180)
    assert again.returncode == 0, again.stderr
    runs = json.loads(run_dse(tmp_path, "report", "study.toml", "--json").stdout)["runs"]
    assert [r["overrides"] for r in runs] == [["max_parallelism=4",
                                               "environment.time_limit=30s"], []]
