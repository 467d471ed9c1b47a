"""`dse show` on real processes: a trial of the local backend answers all five questions, and
one without a complete marker has no score."""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING

import pytest

import dse
from support.cli import run_dse, write_plugin
from support.show import (
    SECTIONS,
    assert_concluded,
    assert_matches_record,
    ran,
    record,
    show_json,
)

if TYPE_CHECKING:
    from pathlib import Path

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


def test_a_real_local_trial_answers_all_five_and_a_partial_one_has_no_score(
    tmp_path: Path,
) -> None:
    project = write_plugin(tmp_path)
    db_path = ran(project, LOCAL_CAMPAIGN)
    run, trials, attempts = record(db_path)
    complete, partial = trials
    for trial in trials:
        doc = show_json(project, f"real:{trial['number']}")
        assert_matches_record(doc, run, trial, attempts)
        assert_concluded(doc, trial, db_path)

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
    # What ran includes the environment dse.trial.report() saw: this very Python's packages.
    deps = doc["run"]["dependencies"]
    assert deps["digest"].startswith("sha256:")
    assert deps["python"] == platform.python_version()
    assert deps["distributions"]["dse-core"] == dse.__version__
    assert deps["distributions"]["dse-backend-local"]
    (score,) = doc["concluded"]["scores"]
    assert (score["scorer"], score["version"], score["baseline"], score["invalid"]) == (
        "default", dse.__version__, None, None)
    assert doc["concluded"]["valid"] is True

    doc = show_json(project, "real:2")
    assert partial["score"] is None
    assert doc["concluded"]["score"] is None
    assert doc["ended"]["failure"] == "incomplete_output"
    assert doc["concluded"]["no_score"] == partial["message"]
    assert "not marked complete" in doc["concluded"]["no_score"]
    assert doc["data"] == {"expected": "2024-06", "read": "v0", "mismatch": True}
    assert doc["concluded"]["scores"] == []  # no complete marker: never scored
    text = run_dse(project, "show", "real:2").stdout
    assert "read v0, expected 2024-06" in text
    assert f"no score: {partial['message']}" in text
    for title in SECTIONS:
        assert title in text
