"""The `dse` command end to end, in real subprocesses on real SQLite files."""

from __future__ import annotations

import csv
import io
import json
import signal
import sqlite3
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.cli import run_dse, start_dse, trajectory, wait_for_running, write_plugin

CAMPAIGN = """
[campaign]
name = "demo"
agent = "list"
backend = "probe"
max_parallelism = 2
poll_interval = "1ms"
{extra}

[agent.list]
points = [{{x = 1}}, {{x = 2}}, {{x = 3}}, {{x = 2}}, {{x = 4}}]
{agent_extra}

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 10 }}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding the throwaway plugin module next to where campaigns go."""
    return write_plugin(tmp_path)


def write_campaign(project: Path, extra: str = "", agent_extra: str = "", text: str = "") -> Path:
    path = project / "campaign.toml"
    path.write_text(text or CAMPAIGN.format(extra=extra, agent_extra=agent_extra))
    return path


def assert_one_line_error(
    proc: subprocess.CompletedProcess[str], *needles: str, code: int = 2
) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dse: error: ")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.rstrip().endswith(errors[0])
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_run_records_every_trial_and_prints_the_best(project: Path) -> None:
    campaign = write_campaign(project)
    proc = run_dse(project, "run", str(campaign))
    assert proc.returncode == 0, proc.stderr
    assert "completed (agent_exhausted)" in proc.stdout
    assert "best: trial" in proc.stdout
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    rows = db.execute("SELECT number, status FROM trials ORDER BY number").fetchall()
    assert rows == [(1, "completed"), (2, "completed"), (3, "completed"), (4, "cached"),
                    (5, "completed")]


def test_run_json_output_is_machine_readable(project: Path) -> None:
    campaign = write_campaign(project)
    proc = run_dse(project, "run", str(campaign), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "completed"
    assert doc["completed"] == 4
    assert doc["cached"] == 1
    assert doc["best"]["metric"] == "value"


def test_status_and_export_read_the_record(project: Path) -> None:
    campaign = write_campaign(project)
    assert run_dse(project, "run", str(campaign)).returncode == 0
    status = run_dse(project, "status", "--json")
    assert status.returncode == 0, status.stderr
    (run,) = json.loads(status.stdout)
    assert run["name"] == "demo"
    assert run["completed"] == 4
    exported = run_dse(project, "export", "demo", "--format", "trajectory")
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert [r["step"] for r in rows] == ["1", "2", "3", "4", "5"]
    assert list(rows[0])[:4] == ["step", "action", "reward", "observation"]
    assert json.loads(rows[1]["action"]) == {"x": 2}
    assert rows[3]["status"] == "cached"
    assert rows[3]["reward"] == rows[1]["reward"]
    as_json = run_dse(project, "export", str(campaign), "--format", "json")
    doc = json.loads(as_json.stdout)
    assert [step["action"]["x"] for step in doc["trajectory"]] == [1, 2, 3, 2, 4]


def test_plugins_lists_name_kind_version_and_distribution(project: Path) -> None:
    proc = run_dse(project, "plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {(r["name"], r["kind"]): r for r in json.loads(proc.stdout)}
    assert rows[("probe", "backend")]["distribution"] == "dse-core"
    assert rows[("list", "agent")]["distribution"] == "DSE_PLUGINS"
    assert rows[("list", "agent")]["version"] == "1"
    # The scorers and stopping rules too, each with the version the record stamps (a
    # built-in scorer's is dse-core's).
    core = rows[("probe", "backend")]["distribution_version"]
    assert rows[("ratio", "scorer")]["version"] == core
    assert rows[("median", "stopping rule")]["distribution"] == "dse-core"
    assert {name for name, kind in rows if kind == "scorer"} >= {"default", "ratio"}
    assert {name for name, kind in rows if kind == "stopping rule"} >= {
        "median", "asha", "hyperband"}
    table = run_dse(project, "plugins")
    assert table.returncode == 0, table.stderr
    assert "ratio" in table.stdout
    assert "stopping rule" in table.stdout


def test_malformed_toml_is_one_line_naming_the_file(project: Path) -> None:
    campaign = write_campaign(project, text="[campaign\nname = 'x'\n")
    assert_one_line_error(run_dse(project, "run", str(campaign)), "campaign.toml", "malformed TOML")


def test_unknown_agent_lists_the_installed_ones(project: Path) -> None:
    text = CAMPAIGN.format(extra="", agent_extra="").replace('agent = "list"', 'agent = "nope"')
    campaign = write_campaign(project, text=text)
    assert_one_line_error(
        run_dse(project, "run", str(campaign)), "unknown agent 'nope'", "installed agents:", "list"
    )


def test_unknown_backend_lists_the_installed_ones(project: Path) -> None:
    text = CAMPAIGN.format(extra="", agent_extra="").replace('"probe"', '"nope"')
    campaign = write_campaign(project, text=text)
    assert_one_line_error(
        run_dse(project, "run", str(campaign)), "unknown backend 'nope'", "probe"
    )


def test_empty_range_names_the_parameter(project: Path) -> None:
    text = CAMPAIGN.format(extra="", agent_extra="")
    text = text.replace("low = 0, high = 10", "low = 5, high = 1")
    campaign = write_campaign(project, text=text)
    assert_one_line_error(run_dse(project, "run", str(campaign)), "space.x", "empty range")


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "/abs"])
def test_a_name_that_would_escape_its_directory_is_refused(project: Path, name: str) -> None:
    text = CAMPAIGN.format(extra="", agent_extra="").replace('name = "demo"', f'name = "{name}"')
    campaign = write_campaign(project, text=text)
    assert_one_line_error(run_dse(project, "run", str(campaign)), "campaign.name", repr(name))
    assert not (project.parent / "x").exists()


def test_a_raising_constraint_stops_with_one_line_and_keeps_the_record(project: Path) -> None:
    campaign = write_campaign(project, extra='constraints = ["10 / (x - 3) != 0"]')
    proc = run_dse(project, "run", str(campaign))
    assert_one_line_error(
        proc, "campaign.toml: campaign.constraints[0]", "ZeroDivisionError", "'x': 3"
    )
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    assert db.execute("SELECT status FROM campaigns").fetchall() == [("failed",)]
    # Trials 1 and 2 were accepted before the bad proposal and are still recorded.
    statuses = db.execute("SELECT number, status FROM trials ORDER BY number").fetchall()
    assert [n for n, _ in statuses] == [1, 2]


def test_a_constraint_too_costly_to_evaluate_is_refused_before_anything_runs(
    project: Path,
) -> None:
    # 9**9**9**9 would compute for hours at 100% of a core: it is weighed, not computed.
    campaign = write_campaign(project, extra='constraints = ["9**9**9**9 > 0"]')
    proc = run_dse(project, "run", str(campaign), timeout=30)
    assert_one_line_error(proc, "campaign.toml: campaign.constraints[0]", "'9**9**9**9 > 0'",
                          "exceeds the cost limit")
    assert not (project / ".dse").exists()


def test_a_constraint_too_costly_for_a_proposal_stops_with_one_line_and_keeps_the_record(
    project: Path,
) -> None:
    campaign = write_campaign(
        project, extra='constraints = ["x < 3 or 2 ** (x * 10 ** 9) > 0", "x * x <= 100"]')
    proc = run_dse(project, "run", str(campaign), timeout=30)
    assert_one_line_error(proc, "campaign.toml: campaign.constraints[0]",
                          "exceeds the cost limit", "'x': 3")
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    assert db.execute("SELECT status FROM campaigns").fetchall() == [("failed",)]
    statuses = db.execute("SELECT number, status FROM trials ORDER BY number").fetchall()
    assert statuses == [(1, "completed"), (2, "completed")]


def test_a_campaign_file_that_is_not_utf8_is_one_line(project: Path) -> None:
    campaign = project / "campaign.toml"
    campaign.write_bytes(CAMPAIGN.format(extra="", agent_extra="").replace(
        'name = "demo"', 'name = "demo" # caf\u00e9').encode("latin-1"))
    proc = run_dse(project, "run", str(campaign))
    assert_one_line_error(proc, "campaign.toml: line 3: byte 0xe9 is not UTF-8")
    assert not (project / ".dse").exists()


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [('agent = "list"', 'agent = "nosuch"', "unknown agent 'nosuch'"),
     ('max_parallelism = 2', 'max_paralelism = 2', "campaign.max_paralelism"),
     ('backend = "probe"', 'backend = "nosuch"', "unknown backend 'nosuch'"),
     ("[agent.list]", "[agent.list]\nspeed = 3", "agent.list: bad option(s)")],
    ids=["unknown-agent", "bad-key", "unknown-backend", "bad-agent-option"],
)
def test_a_campaign_refused_at_configuration_writes_nothing(
    project: Path, old: str, new: str, needle: str
) -> None:
    text = CAMPAIGN.format(extra="", agent_extra="")
    assert old in text
    campaign = write_campaign(project, text=text.replace(old, new))
    assert_one_line_error(run_dse(project, "run", str(campaign)), needle)
    assert not (project / ".dse").exists()


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """Make a file read-only even for root (``chattr +i``), until the test ends."""
    made: list[Path] = []

    def freeze(path: Path) -> None:
        proc = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:  # no chattr, or a file system without the flag
            pytest.skip(f"cannot make {path} immutable: {proc.stderr.strip()}")
        made.append(path)

    yield freeze
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_record_is_one_line_and_stays_intact(
    project: Path, immutable: Callable[[Path], None]
) -> None:
    campaign = write_campaign(project)
    assert run_dse(project, "run", str(campaign)).returncode == 0
    db_path = project / ".dse" / "dse.sqlite"
    before = sqlite3.connect(db_path).execute(
        "SELECT number, status, score FROM trials ORDER BY id").fetchall()
    immutable(db_path)  # chmod does not stop root; the immutable flag does

    proc = run_dse(project, "run", str(campaign), "--fresh")
    assert_one_line_error(proc, str(db_path), "the record is read-only", code=3)
    proc = run_dse(project, "invalidate", "--trial", "demo:1", "--reason", "bad input")
    assert_one_line_error(proc, "dse.sqlite: the record is read-only", code=3)
    assert run_dse(project, "status").returncode == 0  # reading is still fine

    db = sqlite3.connect(db_path)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert db.execute("SELECT id, status FROM campaigns").fetchall() == [(1, "completed")]
    assert db.execute("SELECT number, status, score FROM trials ORDER BY id").fetchall() \
        == before
    assert db.execute("SELECT COUNT(*) FROM invalidations").fetchone() == (0,)


def test_unknown_key_is_named(project: Path) -> None:
    campaign = write_campaign(project, extra="max_paralelism = 3")
    assert_one_line_error(run_dse(project, "run", str(campaign)), "campaign.max_paralelism")


def test_missing_campaign_file_is_one_line(project: Path) -> None:
    assert_one_line_error(run_dse(project, "run", "nope.toml"), "nope.toml", "cannot read")


def test_export_of_a_missing_workspace_is_one_line(project: Path) -> None:
    assert_one_line_error(run_dse(project, "export", "demo"), "no dse record")


def test_ctrl_c_cancels_running_trials_and_exits_130(project: Path) -> None:
    campaign = write_campaign(
        project,
        agent_extra="repeat = false",
        text=textwrap.dedent(CAMPAIGN.format(extra="", agent_extra="")).replace(
            "points = [{x = 1}, {x = 2}, {x = 3}, {x = 2}, {x = 4}]",
            'points = [{x = 1}, {x = 2}, {x = 3}]',
        ).replace('x = { type = "int", low = 0, high = 10 }',
                  'x = { type = "int", low = 0, high = 10 }\noutcome = ["hang"]').replace(
            "points = [{x = 1}, {x = 2}, {x = 3}]",
            'points = [{x = 1, outcome = "hang"}, {x = 2, outcome = "hang"},'
            ' {x = 3, outcome = "hang"}]',
        ),
    )
    proc = start_dse(project, "run", str(campaign))
    db_path = project / ".dse" / "dse.sqlite"
    deadline = time.monotonic() + 30
    running = 0
    while time.monotonic() < deadline and running < 2:
        time.sleep(0.05)
        if db_path.exists():
            try:
                db = sqlite3.connect(db_path)
                running = db.execute(
                    "SELECT COUNT(*) FROM trials WHERE status = 'running'"
                ).fetchone()[0]
                db.close()
            except sqlite3.OperationalError:
                running = 0
    assert running == 2
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    db = sqlite3.connect(db_path)
    assert db.execute("SELECT status FROM campaigns").fetchall() == [("cancelled",)]
    trials = db.execute("SELECT number, status FROM trials ORDER BY number").fetchall()
    assert trials == [(1, "cancelled"), (2, "cancelled")]
    attempts = db.execute("SELECT state, ended_at IS NOT NULL FROM attempts").fetchall()
    assert attempts == [("cancelled", 1), ("cancelled", 1)]


HANGING = CAMPAIGN.format(extra="", agent_extra="").replace(
    'x = { type = "int", low = 0, high = 10 }',
    'x = { type = "int", low = 0, high = 10 }\noutcome = ["hang", "succeed"]',
).replace(
    "points = [{x = 1}, {x = 2}, {x = 3}, {x = 2}, {x = 4}]",
    'points = [{x = 1, outcome = "hang"}, {x = 2, outcome = "hang"},'
    ' {x = 3, outcome = "hang"}]',
)


def test_a_second_ctrl_c_exits_at_once_and_a_rerun_continues_the_campaign(
    project: Path,
) -> None:
    campaign = write_campaign(project, text=HANGING)
    db_path = project / ".dse" / "dse.sqlite"
    proc = start_dse(project, "run", str(campaign))
    wait_for_running(db_path, 2)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 5
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    db = sqlite3.connect(db_path)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT status FROM campaigns").fetchall() == [("cancelled",)]
    db.close()
    # Running it again continues the same run: the two trials run again as new attempts.
    again = start_dse(project, "run", str(campaign))
    # The abandoned trials still read 'running': wait for their new attempts instead.
    wait_for_running(db_path, 4, sql="SELECT COUNT(*) FROM attempts")
    again.send_signal(signal.SIGINT)
    _, err = again.communicate(timeout=30)
    assert again.returncode == 130, err
    assert "resuming it" in err
    db = sqlite3.connect(db_path)
    assert db.execute("SELECT COUNT(*) FROM campaigns").fetchone() == (1,)
    numbers = db.execute("SELECT number FROM trials ORDER BY number").fetchall()
    assert numbers == [(1,), (2,)]
    attempts = db.execute(
        "SELECT t.number, a.attempt FROM attempts a JOIN trials t ON a.trial_id = t.id"
        " ORDER BY t.number, a.attempt"
    ).fetchall()
    assert attempts == [(1, 1), (1, 2), (2, 1), (2, 2)]


def test_a_killed_controller_is_resumed_with_the_same_trajectory(project: Path) -> None:
    text = CAMPAIGN.format(extra="", agent_extra="").replace(
        "points = [{x = 1}, {x = 2}, {x = 3}, {x = 2}, {x = 4}]",
        "points = [" + ", ".join(f"{{x = {i % 7}, passes = {i % 3 * 20}}}" for i in range(12))
        + "]",
    ).replace(
        'x = { type = "int", low = 0, high = 10 }',
        'x = { type = "int", low = 0, high = 10 }\npasses = { type = "int", low = 0, high = 99 }',
    )
    reference = project / "reference"
    reference.mkdir()
    write_plugin(reference)
    ref = run_dse(reference, "run", str(write_campaign(reference, text=text)), "--json")
    assert ref.returncode == 0, ref.stderr
    campaign = write_campaign(project, text=text)
    db_path = project / ".dse" / "dse.sqlite"
    proc = start_dse(project, "run", str(campaign))
    wait_for_running(db_path, 1)
    proc.kill()
    proc.communicate(timeout=30)
    resumed = run_dse(project, "run", str(campaign), "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming it" in resumed.stderr
    assert "did not replay" not in resumed.stderr

    assert trajectory(project) == trajectory(reference)
    assert json.loads(resumed.stdout)["best"] == json.loads(ref.stdout)["best"]
