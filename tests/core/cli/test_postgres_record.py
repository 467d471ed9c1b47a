"""`dse` on a PostgreSQL record (a real server, ``support.postgres``): a run killed and resumed
takes the same path as on the SQLite workspace, every reading command reads it; and on both
records a controller stopped past its lease is fenced while another takes the campaign over."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from typing import TYPE_CHECKING

import pytest

from dse.record._busy import lock_pids
from dse.record._open import reader
from support.cli import run_dse, start_dse, trajectory, write_plugin

if TYPE_CHECKING:
    from pathlib import Path

CAMPAIGN = """
[campaign]
name = "demo"
agent = "list"
backend = "probe"
max_parallelism = 2
poll_interval = "1ms"

[agent.list]
points = [{points}]

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 10 }}
passes = {{ type = "int", low = 0, high = 999 }}
"""


def campaign(project: Path, passes: int) -> Path:
    write_plugin(project)
    points = ", ".join(f"{{x = {i % 7}, passes = {passes + i % 3 * 20}}}" for i in range(12))
    path = project / "campaign.toml"
    path.write_text(CAMPAIGN.format(points=points))
    return path


RUNNING = "SELECT COUNT(*) FROM trials WHERE status = 'running'"


def recorded(url: str | None, workspace: Path) -> list[tuple[object, ...]]:
    store = reader(workspace, url)
    try:
        return store.reads.rows("SELECT number, params, status, score FROM trials"
                                " ORDER BY number")
    finally:
        store.close()


def wait_for(url: str | None, workspace: Path, sql: str, count: int, timeout: float = 60) -> None:
    """Wait (bounded) until *sql* counts at least *count* in the record."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            store = reader(workspace, url)
        except Exception:  # noqa: BLE001 - not made yet
            time.sleep(0.05)
            continue
        try:
            if int(store.reads.rows(sql)[0][0]) >= count:
                return
        finally:
            store.close()
        time.sleep(0.05)
    raise AssertionError(f"{sql} never counted {count} within {timeout} s")


def test_a_killed_controller_resumes_on_postgres_as_on_sqlite(
    tmp_path: Path, postgres_url: str
) -> None:
    reference = tmp_path / "reference"
    reference.mkdir()
    ref = run_dse(reference, "run", str(campaign(reference, 0)), "--json")
    assert ref.returncode == 0, ref.stderr
    project = tmp_path / "project"
    project.mkdir()
    path = campaign(project, 0)
    proc = start_dse(project, "run", str(path), "--record", postgres_url)
    wait_for(postgres_url, project / ".dse", RUNNING, 1)
    proc.kill()
    proc.communicate(timeout=30)
    resumed = run_dse(project, "run", str(path), "--json", "--record", postgres_url)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming it" in resumed.stderr
    assert recorded(postgres_url, project / ".dse") == trajectory(reference)
    assert json.loads(resumed.stdout)["best"] == json.loads(ref.stdout)["best"]
    assert not (project / ".dse" / "dse.sqlite").exists()  # the record is the database
    for args in (["status"], ["report"], ["show", "demo:1"],
                 ["export", "demo", "--output", str(tmp_path / "out.csv")]):
        done = run_dse(project, *args, "--record", postgres_url)
        assert done.returncode == 0, (args, done.stderr)
    assert (tmp_path / "out.csv").read_text().count("\n") == 13  # header + 12 trials
    # DSE_RECORD names it too.
    status = start_dse(project, "status", "--json", env={"DSE_RECORD": postgres_url})
    out, err = status.communicate(timeout=60)
    assert status.returncode == 0, err
    assert json.loads(out)[0]["trials"] == 12


def stop_outside_a_write(proc: subprocess.Popen[str], record: Path | None) -> None:
    """SIGSTOP *proc* between two of its transactions (stopped inside one, it would hold a
    SQLite record's write lock until continued: what ``record/_busy`` says, not a lease's
    matter)."""
    deadline = time.monotonic() + 30
    while True:
        proc.send_signal(signal.SIGSTOP)
        if record is None or proc.pid not in lock_pids(record)[0]:
            return
        proc.send_signal(signal.SIGCONT)
        assert time.monotonic() < deadline, "the controller never left its transaction"
        time.sleep(0.02)


def stop_inside_a_transaction(proc: subprocess.Popen[str], url: str) -> None:
    """SIGSTOP *proc* while its PostgreSQL session is inside a transaction (``idle in
    transaction``: what it took, row locks included, stays taken while it is stopped)."""
    import psycopg

    deadline = time.monotonic() + 60
    with psycopg.connect(url, autocommit=True) as db:
        while True:
            proc.send_signal(signal.SIGSTOP)
            for _ in range(20):  # the server may still be running its last statement
                states = {row[0] for row in db.execute(
                    "SELECT state FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = 'dse' AND pid <> pg_backend_pid()")}
                if "idle in transaction" in states:
                    return
                if "active" not in states:
                    break
                time.sleep(0.005)
            proc.send_signal(signal.SIGCONT)
            assert time.monotonic() < deadline, "the controller was never stopped in a transaction"
            time.sleep(0.003)


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "postgres-in-a-transaction"])
def test_a_controller_stopped_past_its_lease_is_fenced_and_another_finishes(
    tmp_path: Path, postgres_url: str, kind: str
) -> None:
    """Controller A (SIGSTOP past its lease) never writes again and exits with one line once
    continued; controller B takes the campaign over and finishes it — on PostgreSQL from
    another workspace, as on another host, A stopped between two transactions or inside one
    (the server ends it once idle past the lease, freeing its row locks); on SQLite in the
    same workspace (its record), where A still holds the lock file's flock: the expired lease
    makes it stale."""
    postgres = kind.startswith("postgres")
    first = tmp_path / "a"
    second = tmp_path / "b" if postgres else first
    record = ["--record", postgres_url] if postgres else []
    for project in {first, second}:
        project.mkdir(exist_ok=True)
    env = {"DSE_LEASE_S": "2"}
    a = start_dse(first, "run", str(campaign(first, 300)), *record, env=env)
    where = postgres_url if postgres else None
    wait_for(where, first / ".dse", RUNNING, 1)
    if kind == "postgres-in-a-transaction":
        stop_inside_a_transaction(a, postgres_url)
    else:
        stop_outside_a_write(a, None if where else first / ".dse" / "dse.sqlite")
    try:
        time.sleep(3.0)  # past A's lease (2 s)
        b = run_dse(second, "run", str(campaign(second, 300)), *record, timeout=120)
        assert b.returncode == 0, b.stderr
        assert "resuming it" in b.stderr
    finally:
        a.send_signal(signal.SIGCONT)
    _, err = a.communicate(timeout=60)
    assert a.returncode != 0
    errors = [line for line in err.splitlines() if line.startswith("dse: error: ")]
    assert len(errors) == 1, err
    assert "taken over by another controller" in errors[0]
    assert "Traceback" not in err
    rows = recorded(where, second / ".dse")
    assert [r[0] for r in rows] == list(range(1, 13))
    assert {r[2] for r in rows} == {"completed"}
