"""Reading `dse show` back and checking it against the SQLite record (shared by the core
and local-backend tests of the run record)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import dse
from support.cli import run_dse

SECTIONS = ("1. What was run", "2. Against what data", "3. How it ended", "4. What it cost",
            "5. What was concluded")


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


def conclusions(db_path: Path) -> tuple[dict[int, list[sqlite3.Row]], dict[str, sqlite3.Row]]:
    """Scores by trial row, and environments by digest, straight from the SQLite file."""
    db = sqlite3.connect(db_path)
    db.row_factory = sqlite3.Row
    try:
        scores: dict[int, list[sqlite3.Row]] = {}
        for row in db.execute("SELECT * FROM scores ORDER BY id"):
            scores.setdefault(row["trial_id"], []).append(row)
        envs = {row["digest"]: row for row in db.execute("SELECT * FROM environments")}
    finally:
        db.close()
    return scores, envs


def assert_concluded(doc: dict[str, Any], trial: sqlite3.Row, db_path: Path) -> None:
    """The dependencies and scores of *doc* are what the record holds for *trial*."""
    scores, envs = conclusions(db_path)
    mine = scores.get(trial["id"], [])
    assert [(s["scorer"], s["version"], s["score"]) for s in doc["concluded"]["scores"]] == [
        (s["scorer"], s["scorer_version"], s["score"]) for s in mine]
    if mine:
        assert doc["concluded"]["score"] == mine[-1]["score"] == trial["score"]
    deps = doc["run"]["dependencies"]
    if trial["dependencies"] is None:
        # What the trial did not report: the result a cache hit reuses, else what the
        # controller found before dispatch (a Python command), else nothing.
        assert deps is None or deps["source"] in ("reused", "dispatch")
    else:
        env = envs[trial["dependencies"]]
        assert deps == {"digest": trial["dependencies"], "python": env["python"],
                        "distributions": json.loads(env["distributions"]), "source": "trial"}
    if deps is not None and deps["source"] != "trial":
        env = envs[deps["digest"]]
        assert (deps["python"], deps["distributions"]) == (
            env["python"], json.loads(env["distributions"]))


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
    assert doc["concluded"]["scorer"]["name"] == "default"
    assert doc["concluded"]["scorer"]["version"] == dse.__version__


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


def undocumented_keys(export: Any) -> list[str]:
    """The keys of *export* (a ``dse export`` or ``dse show --json`` document) that
    docs/record.md does not name."""
    docs = (Path(__file__).parents[2] / "docs" / "record.md").read_text(encoding="utf-8")
    return sorted(k for k in documented_keys(export) if f"`{k}`" not in docs
                  and f"{{{k}" not in docs and f", {k}" not in docs)
