"""What a test campaign left, read back whatever its backend: the record's rows (read-only
SQLite) and the lines its ``work.py`` trials wrote (``support.slurm_work``,
``support.ray_work``: each run appends ``<attempt> <node>`` to ``checkpoint/runs.log``).

A read made while the controller may still be making the record (a test's wait) passes
``missing_ok=True`` and gets nothing until the record and its tables exist; an assertion's read
is strict, so that a record that is not there says so.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

RUNS_LOGS = ".dse/*/run-*/*/checkpoint/runs.log"


def record(project: Path, sql: str, *args: Any, missing_ok: bool = False) -> list[sqlite3.Row]:
    """Rows of *sql* on the project's dse record (read-only)."""
    path = project / ".dse" / "dse.sqlite"
    if missing_ok and not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        return list(db.execute(sql, args))
    except sqlite3.OperationalError:
        if missing_ok:
            return []  # its tables not made yet
        raise
    finally:
        db.close()


def trials(project: Path, *, missing_ok: bool = False) -> dict[int, sqlite3.Row]:
    """Trial number → its row, for the last run of the project."""
    rows = record(project, "SELECT * FROM trials WHERE campaign_id = (SELECT MAX(id)"
                  " FROM campaigns) ORDER BY number", missing_ok=missing_ok)
    return {row["number"]: row for row in rows}


def attempts_by_trial(project: Path, *, missing_ok: bool = False
                      ) -> dict[int, list[sqlite3.Row]]:
    """Trial number → its attempts (in order) from the last run of the project."""
    rows = record(project, """
        SELECT t.number, a.* FROM attempts a JOIN trials t ON a.trial_id = t.id
        WHERE t.campaign_id = (SELECT MAX(id) FROM campaigns) ORDER BY t.number, a.attempt
    """, missing_ok=missing_ok)
    out: dict[int, list[sqlite3.Row]] = {}
    for row in rows:
        out.setdefault(row["number"], []).append(row)
    return out


def recorded(project: Path, state: str) -> bool:
    """Whether the record holds an attempt that ended *state* (the engine saw it)."""
    return any(a["state"] == state
               for tries in attempts_by_trial(project, missing_ok=True).values() for a in tries)


def sleepers(count: int, seconds: float) -> list[dict[str, Any]]:
    """*count* ``work.py`` trials that succeed after *seconds* (or when released)."""
    return [{"mode": "ok", "i": i, "seconds": seconds} for i in range(count)]


def runs_of(project: Path) -> dict[int, list[str]]:
    """Trial number → the lines its workload wrote (one per run that started)."""
    out = {}
    for number, row in trials(project).items():
        log = Path(row["trial_dir"]) / "checkpoint" / "runs.log"
        out[number] = log.read_text().splitlines() if log.exists() else []
    return out


def started_on(project: Path, node: str) -> bool:
    """Whether a trial's workload has started on *node* (its first attempt's line)."""
    return any(f"1 {node}" in log.read_text().splitlines() for log in project.glob(RUNS_LOGS))


def starts(project: Path) -> int:
    """How many runs of trial workloads have started (lines in every runs.log)."""
    return sum(len(log.read_text().splitlines()) for log in project.glob(RUNS_LOGS))
