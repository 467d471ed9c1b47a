"""What a later run reuses, with real `dse run` processes on the local backend (issue 17).

A result is reused only for a measurement of the same thing: the identity (docs/record.md,
"The identity of a result") and the table of reused failure classes are checked here by
changing each part and each non-part of a campaign and running it again in the same workspace.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from dse import REUSED_FAILURES, FailureClass
from support.cli import last_run, run_dse, run_exit, write_plugin

DOCS = Path(__file__).resolve().parents[2] / "docs" / "record.md"

WORK = r"""
import os, sys
from dse import trial
x = int(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "ok"
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs.log"), "a") as log:
    log.write("%d\n" % x)
if mode == "exit":
    sys.exit(3)
if mode == "nometric":
    trial.report({"other": 1.0})
    sys.exit(0)
trial.report({"value": (x - 3) ** 2 + float(os.environ.get("OFFSET", "0"))})
"""

BASE = {
    "campaign": {"name": "reuse", "agent": "grid", "max_parallelism": 2, "max_trials": 4},
    "environment": {"command": ["python", "work.py", "{x}"], "env": {"OFFSET": "0"},
                    "cpus": 1, "memory_mb": 512, "code_version": "v1", "time_limit": "60s"},
    "objectives": [{"metric": "value", "direction": "minimize"}],
    "space": {"x": [1, 2, 3, 4]},
}


def toml_value(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def write_campaign(project: Path, data: dict[str, object]) -> None:
    """*data* as a campaign file (tables of scalars, lists and inline tables only)."""
    lines = []
    for table, body in data.items():
        if isinstance(body, list):
            for item in body:
                lines.append(f"[[{table}]]")
                lines += [f"{k} = {toml_value(v)}" for k, v in item.items()]
            continue
        assert isinstance(body, dict)
        lines.append(f"[{table}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in body.items() if not isinstance(v, dict)]
        for key, sub in body.items():
            if isinstance(sub, dict):
                lines.append(f"[{table}.{key}]")
                lines += [f"{k} = {toml_value(v)}" for k, v in sub.items()]
    (project / "campaign.toml").write_text("\n".join(lines) + "\n")


def project(tmp_path: Path, data: dict[str, object] | None = None) -> Path:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    write_campaign(tmp_path, data or BASE)
    return tmp_path


def changed(path: str, value: object) -> dict[str, object]:
    """BASE with the key at *path* (``table.key``, or ``table.key.sub``) set to *value* (a
    whole table *path*: its keys updated with *value*'s)."""
    data = json.loads(json.dumps(BASE))
    *tables, key = path.split(".")
    node = data
    for table in tables:
        node = node.setdefault(table, {})
    if isinstance(value, dict) and isinstance(node.get(key), dict) and not tables:
        node[key].update(value)
    else:
        node[key] = value
    return data


def runs(project: Path) -> int:
    """Workload processes that ran in *project* so far."""
    log = project / "runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def run_ok(project: Path, *args: str) -> None:
    """`dse run`, which exits 0, or 4 (``NO_RESULT``) when no trial of the run completed."""
    proc = run_dse(project, "run", "campaign.toml", *args, timeout=120)
    assert proc.returncode == run_exit(project), proc.stderr


# -- the identity -------------------------------------------------------------------------

PARTS = {
    "command": ("environment.command", ["python", "work.py", "{x}", "ok"]),
    "shell": ("environment", {"shell": True, "command": "python work.py {x}"}),
    "env": ("environment.env", {"OFFSET": "1"}),
    "code_version": ("environment.code_version", "v2"),
    "cpus": ("environment.cpus", 2),
    "memory_mb": ("environment.memory_mb", 1024),
}
NON_PARTS = {
    "max_parallelism": ("campaign.max_parallelism", 1),
    "mode": ("campaign.mode", "rolling"),
    "poll_interval": ("campaign.poll_interval", ["0.05s", "0.2s"]),
    "seed": ("campaign.seed", 11),
    "agent": ("campaign.agent", "random"),
    "time_limit": ("environment.time_limit", "90s"),
    "budget": ("budget.wall_clock", "1h"),
}


@pytest.mark.parametrize("name", sorted(PARTS))
def test_changing_a_part_of_the_identity_misses_the_cache(tmp_path: Path, name: str) -> None:
    where = project(tmp_path)
    run_ok(where)
    assert last_run(where) == {"completed": 4}
    path, value = PARTS[name]
    write_campaign(where, changed(path, value))
    run_ok(where)
    assert last_run(where) == {"completed": 4}, name
    assert runs(where) == 8


@pytest.mark.parametrize("name", sorted(NON_PARTS))
def test_changing_anything_else_still_hits_it(tmp_path: Path, name: str) -> None:
    where = project(tmp_path)
    run_ok(where)
    path, value = NON_PARTS[name]
    data = changed(path, value)
    if name == "agent":  # random proposes until its allowance: every proposal a known x
        data["campaign"]["max_trials"] = 4  # type: ignore[index]
    write_campaign(where, data)
    run_ok(where)
    assert last_run(where) == {"cached": 4}, name
    assert runs(where) == 4


def test_the_data_version_is_part_of_the_identity(tmp_path: Path) -> None:
    data = changed("data.paths", ["input.txt"])
    where = project(tmp_path, data)
    (where / "input.txt").write_text("one")
    run_ok(where)
    run_ok(where)
    assert last_run(where) == {"cached": 4}
    (where / "input.txt").write_text("two")
    run_ok(where)
    assert last_run(where) == {"completed": 4}


def test_the_documented_identity_names_every_part_tested(tmp_path: Path) -> None:
    text = DOCS.read_text()
    section = text[text.index("## The identity of a result"):text.index("## `dse invalidate`")]
    for name in [*PARTS, "data version", "backend", "placement"]:
        assert name.replace("_", "") in section.replace("_", ""), name
    words = {"poll_interval": "polling", "budget": "budgets", "seed": "agent"}
    for name in NON_PARTS:
        assert words.get(name, name) in section, name


# -- what is reused ------------------------------------------------------------------------

def test_every_failure_class_is_in_the_reuse_table_as_the_code_reuses_it() -> None:
    text = DOCS.read_text()
    rows = re.findall(r"^\| (`[a-z_`, ]+`) \| (yes|no) \|", text, flags=re.MULTILINE)
    table = {name.strip("`"): answer == "yes" for names, answer in rows
             for name in names.split(", ")}
    assert set(table) == {f.value for f in FailureClass}
    assert {FailureClass(name) for name, yes in table.items() if yes} == REUSED_FAILURES


@pytest.mark.parametrize(("mode", "failure"), [("exit", "nonzero_exit"),
                                               ("nometric", "missing_metric")])
def test_a_design_failure_is_reused(tmp_path: Path, mode: str, failure: str) -> None:
    where = project(tmp_path, changed("environment.command", ["python", "work.py", "{x}", mode]))
    run_ok(where)
    assert last_run(where) == {"failed": 4}
    run_ok(where)
    assert last_run(where) == {"cached": 4}
    assert runs(where) == 4


def test_resources_the_backend_can_never_give_are_one_line_before_anything_runs(
    tmp_path: Path,
) -> None:
    data = changed("environment.gpus", 1)
    data["backend"] = {"local": {"gpus": 0}}  # this machine, as the local backend sees it
    where = project(tmp_path, data)
    proc = run_dse(where, "run", "campaign.toml", timeout=120)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "environment: asks for 1 CPUs and 1 GPUs; this machine has" in line, line
    assert runs(where) == 0


def test_a_resource_mistake_is_not_reused_once_fixed_with_or_without_fresh(
    tmp_path: Path,
) -> None:
    # Trials that ask for a GPU (a param sets it) on a backend with none are refused
    # (invalid_job): a failure of the setup, not of the design.
    data = changed("environment.gpus", "{g}")
    data["space"] = {"x": [1, 2], "g": [0, 1]}  # type: ignore[assignment]
    data["backend"] = {"local": {"gpus": 0}}
    where = project(tmp_path, data)
    run_ok(where)
    db = sqlite3.connect(where / ".dse" / "dse.sqlite")
    try:
        ends = db.execute("SELECT params, status, failure, message FROM trials").fetchall()
    finally:
        db.close()
    refused = [json.loads(p) for p, status, failure, message in ends
               if (status, failure) == ("failed", "invalid_job") and "GPU" in message]
    assert sorted(p["x"] for p in refused) == [1, 2]
    assert all(p["g"] == 1 for p in refused)
    assert runs(where) == 2
    # The fix: a GPU is there now. The refused trials run; the completed ones are reused.
    data["backend"] = {"local": {"gpus": 1}}
    write_campaign(where, data)
    run_ok(where)
    assert last_run(where) == {"completed": 2, "cached": 2}
    assert runs(where) == 4
    run_ok(where, "--fresh")
    assert last_run(where) == {"completed": 4}  # --fresh reuses nothing
    assert runs(where) == 8


def test_a_forgotten_backend_key_runs_the_command_on_local(tmp_path: Path) -> None:
    where = project(tmp_path)  # no backend key, a command: the local backend runs it
    run_ok(where)
    assert last_run(where) == {"completed": 4}
    assert runs(where) == 4


def test_the_probe_refuses_a_campaign_with_a_command_before_recording_anything(
    tmp_path: Path,
) -> None:
    where = project(tmp_path, changed("campaign.backend", "probe"))
    proc = run_dse(where, "run", "campaign.toml")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "campaign.backend: the probe backend runs no command" in line
    assert not (where / ".dse" / "dse.sqlite").exists() or last_run(where) == {}


def test_probe_results_are_never_reused_by_the_local_backend(tmp_path: Path) -> None:
    probe = json.loads(json.dumps(BASE))
    del probe["environment"]["command"]
    probe["campaign"]["backend"] = "probe"
    where = project(tmp_path, probe)
    run_ok(where)
    assert sum(last_run(where).values()) == 4
    write_campaign(where, BASE)
    run_ok(where)
    assert last_run(where) == {"completed": 4}
    assert runs(where) == 4


def test_fresh_reuses_nothing(tmp_path: Path) -> None:
    where = project(tmp_path)
    run_ok(where)
    run_ok(where, "--fresh")
    assert last_run(where) == {"completed": 4}
    assert runs(where) == 8


def test_a_rerun_of_cache_hits_reports_the_best_and_one_line_per_pass(tmp_path: Path) -> None:
    where = project(tmp_path)
    run_ok(where)
    proc = run_dse(where, "run", "campaign.toml")
    assert proc.returncode == 0, proc.stderr
    assert last_run(where) == {"cached": 4}
    assert "best: trial 3 value=0" in proc.stderr + proc.stdout
    assert not re.search(r"trial \d+ cached", proc.stderr)
    assert re.search(r"\d cache hits \(trials [0-9, -]+\)", proc.stderr), proc.stderr
    report = run_dse(where, "report", "campaign.toml", "--json")
    assert report.returncode == 0, report.stderr
    runs_json = json.loads(report.stdout)["runs"]
    assert runs_json[-1]["best"]["trial"] == 3


# -- records of the previous release ----------------------------------------------------------

def test_results_hashed_by_the_previous_release_are_kept_but_not_reused(tmp_path: Path) -> None:
    import hashlib

    from dse import canonical_json

    where = project(tmp_path)
    run_ok(where)
    # What the previous release wrote: hashes over the command, shell and code version only.
    db = sqlite3.connect(where / ".dse" / "dse.sqlite")
    workload = canonical_json({"command": BASE["environment"]["command"],  # type: ignore[index]
                               "shell": False, "code_version": "v1"})
    for row_id, params in db.execute("SELECT id, params FROM trials").fetchall():
        digest = hashlib.sha256(
            f"dse-config-v1\n{workload}\nnull\n{canonical_json(json.loads(params))}".encode()
        ).hexdigest()
        db.execute("UPDATE trials SET config_hash = ? WHERE id = ?", (digest, row_id))
    db.commit()
    db.close()
    run_ok(where)
    assert last_run(where) == {"completed": 4}  # measured again under the full identity
    db = sqlite3.connect(where / ".dse" / "dse.sqlite")
    try:
        assert db.execute("SELECT COUNT(*) FROM trials").fetchone() == (8,)
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()


def test_the_reference_example_says_in_one_line_why_it_cannot_run_without_a_gpu(
    tmp_path: Path,
) -> None:
    from dse_local import detect_gpus

    if detect_gpus() > 0:
        pytest.skip("this machine has a GPU: the example's gpus = 1 can run here")
    text = (DOCS.parent / "campaign.md").read_text()
    start = text.index("```toml\n") + len("```toml\n")
    example = text[start:text.index("```\n", start)]
    (tmp_path / "campaign.toml").write_text(example)
    (tmp_path / "data").mkdir()
    proc = run_dse(write_plugin(tmp_path), "run", "campaign.toml")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "environment: asks for 1 CPUs and 1 GPUs" in line, line
    assert "0 GPUs" in line, line


@pytest.mark.parametrize("mode", ["ok", "exit"])
def test_summary_counts_add_up_with_a_baseline(tmp_path: Path, mode: str) -> None:
    data = changed("environment.command", ["python", "work.py", "{x}", mode])
    data["baseline"] = {"params": {"x": 3}}
    where = project(tmp_path, data)
    proc = run_dse(where, "run", "campaign.toml", timeout=120)
    summary = re.search(r"; (\d+) trials: (\d+) completed, (\d+) failed, (\d+) cached,"
                        r" (\d+) rejected, (\d+) cancelled; baseline (\w+)", proc.stdout)
    assert summary is not None, proc.stdout + proc.stderr
    total, *counts, baseline = summary.groups()
    assert sum(int(n) for n in counts) == int(total)
    if mode == "ok":
        assert proc.returncode == 0, proc.stderr
        assert (int(total), baseline) == (4, "completed")
    else:  # the baseline failed: the campaign stops before any trial
        assert (int(total), baseline) == (0, "failed")


def test_invalidate_selectors_with_a_dry_run(tmp_path: Path) -> None:
    where = project(tmp_path, changed("environment.command", ["python", "work.py", "{x}", "exit"]))
    run_ok(where)
    assert last_run(where) == {"failed": 4}

    dry = run_dse(where, "invalidate", "--failed", "nonzero_exit", "--campaign", "reuse",
                  "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would flag 4 trial(s)" in dry.stdout
    run_ok(where)  # a dry run changed nothing: every failure is reused
    assert last_run(where) == {"cached": 4}

    bad = run_dse(where, "invalidate", "--failed", "no_such_class", "--reason", "x")
    assert bad.returncode == 2
    [line] = bad.stderr.strip().splitlines()
    assert "no such failure class" in line
    assert "nonzero_exit" in line
    none = run_dse(where, "invalidate", "--run", "99", "--reason", "x")
    assert none.returncode == 2
    assert "no trial in the record matches run=99" in none.stderr

    done = run_dse(where, "invalidate", "--failed", "--run", "1", "--reason", "bad disk",
                   "--json")
    assert done.returncode == 0, done.stderr
    flagged = json.loads(done.stdout)
    # Run 1's four failures, and the four cache hits of run 2 that reuse them.
    assert (flagged["trials"], flagged["dry_run"]) == (8, False)
    run_ok(where)
    assert last_run(where) == {"failed": 4}  # measured again
    assert runs(where) == 8
