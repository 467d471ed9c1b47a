"""Campaigns of ``work.py`` trials on the tests' local Ray cluster (``support.raycluster``).

Each trial runs ``work.py``, which appends one line per run to ``runs.log`` in its checkpoint
directory (its attempt and the node it ran on, ``DSE_NODE``), so a test checks what ran, not
what the engine believes ran. A trial sleeps its ``seconds``, or until the test calls
:func:`release`. A trial of several tasks writes ``rank-<r>.json`` (its rank, node and the
attempt's nodes) in its trial directory; rank 0 reports the result.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from support.cli import write_plugin

WORK = r"""
import json, os, sys, time
from dse import trial

p = trial.params()
rank = int(os.environ.get("DSE_RANK", "0"))
if rank == 0:
    with open(os.path.join(os.environ["DSE_CHECKPOINT_DIR"], "runs.log"), "a") as log:
        log.write("%s %s\n" % (os.environ["DSE_ATTEMPT"], os.environ.get("DSE_NODE")))
with open(os.path.join(os.environ["DSE_TRIAL_DIR"], "rank-%d.json" % rank), "w") as out:
    json.dump({k: os.environ.get(k) for k in ("DSE_RANK", "DSE_LOCAL_RANK", "DSE_NODE_RANK",
               "DSE_WORLD_SIZE", "DSE_NODE", "DSE_NODES")}, out)
if p["mode"] == "exit3":
    sys.exit(3)
if p["mode"] == "oom":
    hog = b"x" * (400 << 20)
    time.sleep(30)
released = os.path.join(os.path.dirname(os.path.abspath(__file__)), "released")
deadline = time.monotonic() + p["seconds"]
while time.monotonic() < deadline and not os.path.exists(released):
    time.sleep(0.1)
trial.report({"value": p["i"] * 1.5}, complete=True)
"""

CAMPAIGN = """
[campaign]
name = "{name}"
agent = "list"
backend = "ray"
mode = "{mode}"
max_parallelism = {parallelism}
poll_interval = ["0.2s", "1s"]

[agent.list]
points = [{points}]

[environment]
command = ["python", "work.py"]
time_limit = "2m"
{environment}

[backend.ray]
address = "{address}"
namespace = "{name}"
grace = "2s"

[[objectives]]
metric = "value"

[space]
mode = ["ok", "exit3", "oom"]
i = {{ type = "int", low = 0, high = 1000 }}
seconds = {{ type = "float", low = 0, high = 600 }}
"""


def project_with(tmp_path: Path, name: str, address: str, points: list[dict[str, Any]], *,
                 parallelism: int, mode: str = "waves", environment: str = "") -> Path:
    """A project whose campaign *name* runs *points* on the Ray cluster at *address*."""
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    inline = ", ".join(
        "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in point.items()) + "}"
        for point in points
    )
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(
        name=name, mode=mode, parallelism=parallelism, points=inline, address=address,
        environment=environment,
    ))
    return tmp_path


def sleepers(count: int, seconds: float) -> list[dict[str, Any]]:
    return [{"mode": "ok", "i": i, "seconds": seconds} for i in range(count)]


def release(project: Path) -> None:
    """Let every trial of *project* still sleeping (and every later one) end now."""
    (project / "released").touch()


def record(project: Path, sql: str) -> list[sqlite3.Row]:
    """Rows of *sql* on the project's record (read-only; none while it is being made)."""
    path = project / ".dse" / "dse.sqlite"
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        return list(db.execute(sql))
    except sqlite3.OperationalError:
        return []  # its tables not made yet
    finally:
        db.close()


def trials(project: Path) -> dict[int, sqlite3.Row]:
    """Trial number → its row, for the last run of the project."""
    rows = record(project, "SELECT * FROM trials WHERE campaign_id = (SELECT MAX(id)"
                  " FROM campaigns) ORDER BY number")
    return {row["number"]: row for row in rows}


def attempts_by_trial(project: Path) -> dict[int, list[sqlite3.Row]]:
    """Trial number → its attempts (in order) from the last run of the project."""
    rows = record(project, """
        SELECT t.number, a.* FROM attempts a JOIN trials t ON a.trial_id = t.id
        WHERE t.campaign_id = (SELECT MAX(id) FROM campaigns) ORDER BY t.number, a.attempt
    """)
    out: dict[int, list[sqlite3.Row]] = {}
    for row in rows:
        out.setdefault(row["number"], []).append(row)
    return out


def runs_of(project: Path) -> dict[int, list[str]]:
    """Trial number → the lines its workload wrote (one per run that started)."""
    out = {}
    for number, row in trials(project).items():
        log = Path(row["trial_dir"]) / "checkpoint" / "runs.log"
        out[number] = log.read_text().splitlines() if log.exists() else []
    return out


def started_on(project: Path, node: str) -> bool:
    """Whether a trial's workload has started on *node* (its first attempt's line)."""
    return any(f"1 {node}" in log.read_text().splitlines()
               for log in project.glob(".dse/*/run-*/*/checkpoint/runs.log"))


def starts(project: Path) -> int:
    """How many runs of trial workloads have started (lines in every runs.log)."""
    return sum(len(log.read_text().splitlines())
               for log in project.glob(".dse/*/run-*/*/checkpoint/runs.log"))
