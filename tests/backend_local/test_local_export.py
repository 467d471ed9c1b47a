"""`dse export --format csv` on a real local run: one row per trial, one column per param and
per metric, with the facts of the record a data scientist filters on (status, failure class,
attempts and interruptions, times, spend, node, data version, validity), read by pandas'
own CSV reader when pandas is installed and by :mod:`csv` always."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path

import pytest

from dse.report._export import TABLE_HEAD, TABLE_TAIL
from support.cli import run_dse, write_plugin

CAMPAIGN = """\
[campaign]
name = "table"
agent = "list"
max_parallelism = 2
max_interruptions = 1

[agent.list]
points = [{x = 1, mode = "fast"}, {x = 2, mode = "slow"}, {x = 3, mode = "fast"},
          {x = 4, mode = "fast"}, {x = 1, mode = "fast"}]

[environment]
command = ["python", "trial.py", "{x}"]
time_limit = "60s"

[data]
version = "2026-11"

[[objectives]]
metric = "loss"

[space]
x = { type = "int", low = 1, high = 4 }
mode = { type = "categorical", choices = ["fast", "slow"] }
"""

TRIAL = """\
import os, signal, sys
from dse import trial
x = int(sys.argv[1])
if x == 3:
    sys.exit(3)  # a result about the design: failed, never retried
if x == 4 and trial.attempt() == 1:
    os.kill(os.getpid(), signal.SIGKILL)  # an interruption: retried
trial.report({"loss": float(x * x), "extra": 0.5} if x == 2 else {"loss": float(x * x)})
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    project = write_plugin(tmp_path_factory.mktemp("export"))
    (project / "trial.py").write_text(TRIAL)
    (project / "campaign.toml").write_text(CAMPAIGN)
    ran = run_dse(project, "run", "campaign.toml", timeout=180)
    assert ran.returncode == 0, ran.stderr
    proc = run_dse(project, "export", "table")
    assert proc.returncode == 0, proc.stderr
    return project, proc.stdout


def test_the_csv_has_a_column_per_param_and_metric_and_the_records_facts(
    exported: tuple[Path, str],
) -> None:
    _, text = exported
    reader = csv.DictReader(io.StringIO(text))
    columns = list(reader.fieldnames or ())
    assert columns == [*TABLE_HEAD, "param.x", "param.mode", "metric.loss", "metric.extra",
                       *TABLE_TAIL]
    rows = {int(r["trial"]): r for r in reader}
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert [(rows[n]["param.x"], rows[n]["param.mode"]) for n in (1, 2, 3)] == [
        ("1", "fast"), ("2", "slow"), ("3", "fast")]
    assert (rows[1]["status"], rows[1]["score"], rows[1]["metric.loss"]) == (
        "completed", "1.0", "1.0")
    assert (rows[2]["metric.extra"], rows[1]["metric.extra"]) == ("0.5", "")
    assert (rows[3]["status"], rows[3]["failure_class"], rows[3]["score"]) == (
        "failed", "nonzero_exit", "")
    assert (rows[3]["attempts"], rows[3]["interruptions"]) == ("1", "0")
    # Killed on its first attempt (an interruption), retried and completed on the second.
    assert (rows[4]["status"], rows[4]["attempts"], rows[4]["interruptions"]) == (
        "completed", "2", "1")
    assert rows[4]["failure_class"] == ""
    # The fifth proposal is the first's configuration: a cache hit naming what it reuses.
    assert (rows[5]["status"], rows[5]["reuses"], rows[5]["attempts"]) == (
        "cached", rows[1]["trial_id"], "0")
    for n in (1, 2, 3, 4):
        row = rows[n]
        assert row["trial_id"] == f"table-1-{n}"
        assert row["valid"] == "true"
        # The version dispatched against; the one a result says it read (none without one).
        assert (row["data_version"], row["data_version_read"]) == (
            "2026-11", "" if n == 3 else "2026-11")
        assert row["node"]
        started = datetime.fromisoformat(row["started_at"])
        ended = datetime.fromisoformat(row["ended_at"])
        assert started.utcoffset() is not None
        assert float(row["duration_s"]) == pytest.approx(
            (ended - started).total_seconds(), abs=2e-3)
        assert float(row["wall_s"]) > 0
        assert float(row["money"]) == 0.0
        assert Path(row["trial_dir"]).is_dir()


def test_the_report_counts_the_interruption_that_was_retried(
    exported: tuple[Path, str],
) -> None:
    project, _ = exported
    (run,) = json.loads(run_dse(project, "report", "table", "--json").stdout)["runs"]
    assert run["interruptions"] == {"retried": 1, "trials": 1, "resumed": 0,
                                    "by_class": {"killed": 1}, "nodes": {"localhost": 1}}
    text = run_dse(project, "report", "table").stdout
    assert ("  retries      1 after an interruption (killed 1) in 1 trial(s), 0 resumed from"
            " a checkpoint; on localhost 1") in text


def test_an_invalidated_trial_is_kept_and_flagged(exported: tuple[Path, str]) -> None:
    project, _ = exported
    flagged = run_dse(project, "invalidate", "--trial", "table:2", "--reason", "bad disk")
    assert flagged.returncode == 0, flagged.stderr
    rows = {int(r["trial"]): r for r in csv.DictReader(io.StringIO(
        run_dse(project, "export", "table").stdout))}
    assert rows[2]["valid"] == "false"
    assert rows[1]["valid"] == "true"


def test_pandas_reads_one_typed_column_per_param(exported: tuple[Path, str]) -> None:
    pd = pytest.importorskip("pandas")
    _, text = exported
    frame = pd.read_csv(io.StringIO(text))
    assert len(frame) == 5
    assert str(frame["param.x"].dtype) == "int64"
    assert frame.loc[frame["trial"] == 4, "metric.loss"].item() == 16.0
    assert frame["interruptions"].sum() == 1


def test_the_trajectory_and_jsonl_formats_stay(exported: tuple[Path, str]) -> None:
    project, _ = exported
    trajectory = list(csv.DictReader(io.StringIO(
        run_dse(project, "export", "table", "--format", "trajectory").stdout)))
    assert [json.loads(r["action"])["x"] for r in trajectory] == [1, 2, 3, 4, 1]
    lines = run_dse(project, "export", "table", "--format", "jsonl").stdout.splitlines()
    assert len(lines) == 6
    assert json.loads(lines[4])["record"]["ended"]["attempts"][0]["state"] == "killed"
