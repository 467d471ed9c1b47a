"""What a trial leaves in its directory cannot forge the record or freeze `dse run`: a result
that is a symlink, a FIFO, a device or a socket, or too large, fails its trial in a class of its
own; a file an attempt plants where the next attempt's log goes is refused, never waited on;
and every value reaches the workload as exactly one argv item or variable (real processes)."""

from __future__ import annotations

import json
import sqlite3
import stat
import sys
from pathlib import Path

import dse
from dse.model._trialfile import MAX_TRIAL_FILE_BYTES
from dse_local import LocalBackend
from support.cli import run_dse, write_plugin

# Each trial makes result.json what its `mode` says; "good" reports value 1.
WORKLOAD = r"""
import json, os, socket, stat, sys
mode, outside, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
path = os.path.join(os.environ["DSE_TRIAL_DIR"], "result.json")


def bind(path):
    # A socket's path is at most 107 bytes: bound from its directory, however deep that is.
    os.chdir(os.path.dirname(path))
    socket.socket(socket.AF_UNIX).bind(os.path.basename(path))


if mode == "good":
    with open(path, "w") as handle:
        json.dump({"complete": True, "metrics": {"value": 1}}, handle)
elif mode == "symlink":
    os.symlink(outside, path)
elif mode == "fifo":
    os.mkfifo(path)
elif mode == "device":
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: never ends
    except PermissionError:
        bind(path)
elif mode == "socket":
    bind(path)
elif mode == "big":
    with open(path, "w") as handle:
        handle.write('{"complete": true, "metrics": {"value": 1e9}, "pad": "')
        handle.write("x" * cap)
        handle.write('"}')
"""

CAMPAIGN = """
[campaign]
name = "safe"
agent = "list"
backend = "local"
max_parallelism = 3
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [{{mode = "symlink"}}, {{mode = "fifo"}}, {{mode = "device"}}, {{mode = "socket"}},
          {{mode = "big"}}, {{mode = "good"}}, {{mode = "fifo"}}]

[environment]
command = [{python}, "-S", {workload}, "{{mode}}", {outside}, "{cap}"]
time_limit = "60s"

[backend.local]
cpus = 3

[[objectives]]
metric = "value"
direction = "maximize"

[space]
mode = ["symlink", "fifo", "device", "socket", "big", "good"]
"""


def _rows(project: Path, sql: str) -> list[sqlite3.Row]:
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    db.row_factory = sqlite3.Row
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def _trials(project: Path, param: str = "mode") -> dict[str, sqlite3.Row]:
    """The first trial of each value of *param*."""
    rows = _rows(project, "SELECT * FROM trials ORDER BY number DESC")
    return {json.loads(row["params"])[param]: row for row in rows}


def test_a_result_that_is_not_a_regular_file_in_the_trial_dir_fails_in_its_own_class(
    tmp_path: Path,
) -> None:
    project = write_plugin(tmp_path)
    workload = project / "workload.py"
    workload.write_text(WORKLOAD)
    outside = project / "outside.json"  # a great score no trial earned
    outside.write_text(json.dumps({"complete": True, "metrics": {"value": 1e9}}))
    (project / "campaign.toml").write_text(CAMPAIGN.format(
        python=json.dumps(sys.executable), workload=json.dumps(str(workload)),
        outside=json.dumps(str(outside)), cap=MAX_TRIAL_FILE_BYTES,
    ))

    # Before the fix the FIFO froze `dse run` for good; the timeout only bounds a regression.
    proc = run_dse(project, "run", "campaign.toml", "--json", timeout=180)

    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    trials = _trials(project)
    assert doc["best"]["trial"] == trials["good"]["number"]
    assert doc["best"]["score"] == 1
    expected = {
        "symlink": ("result_symlink", "result.json is a symlink (to "),
        "fifo": ("result_not_regular", "result.json is a FIFO, not a regular file"),
        "device": ("result_not_regular", "result.json is a "),
        "socket": ("result_not_regular", "result.json is a socket, not a regular file"),
        "big": ("result_too_large", f"result.json is larger than {MAX_TRIAL_FILE_BYTES} bytes"),
    }
    for mode, (failure, message) in expected.items():
        row = trials[mode]
        assert (row["status"], row["failure"]) == ("failed", failure), mode
        assert row["message"].startswith(message), row["message"]
        assert "\n" not in row["message"]
        assert row["score"] is None
    assert str(outside) in trials["symlink"]["message"]
    assert trials["good"]["status"] == "completed"
    # A result about the design: one attempt each (never retried), and proposed again, reused.
    attempts = _rows(project, "SELECT trial_id, COUNT(*) AS n FROM attempts GROUP BY trial_id")
    assert [row["n"] for row in attempts] == [1] * 6
    last = _rows(project, "SELECT status, cache_of FROM trials WHERE number = 7")[0]
    assert (last["status"], last["cache_of"]) == ("cached", trials["fifo"]["id"])


PLANTER = r"""
import os, signal, sys
trial_dir = os.environ["DSE_TRIAL_DIR"]
if os.environ["DSE_ATTEMPT"] == "1":
    # Leave a FIFO where the next attempt's log goes, then die as if the node killed us.
    os.makedirs(os.path.join(trial_dir, "attempt-2"))
    os.mkfifo(os.path.join(trial_dir, "attempt-2", sys.argv[1]))
    os.kill(os.getpid(), signal.SIGKILL)
"""


PLANTER_CAMPAIGN = """
[campaign]
name = "planted"
agent = "list"
backend = "local"
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [{{log = "stdout.log"}}]

[environment]
command = [{python}, "-S", {planter}, "{{log}}"]
time_limit = "60s"

[backend.local]
grace = "1s"

[[objectives]]
metric = "value"

[space]
log = ["stdout.log"]
"""


def test_a_fifo_an_attempt_plants_for_the_next_one_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    project = write_plugin(tmp_path)
    planter = project / "planter.py"
    planter.write_text(PLANTER)
    (project / "campaign.toml").write_text(PLANTER_CAMPAIGN.format(
        python=json.dumps(sys.executable), planter=json.dumps(str(planter))))

    proc = run_dse(project, "run", "campaign.toml", timeout=180)

    assert proc.returncode == dse.ExitCode.NO_RESULT, proc.stderr  # its one trial failed
    trial = _trials(project, "log")["stdout.log"]
    # Attempt 2's directory, made by attempt 1, is not attempt 2's: moved aside whole as
    # attempt 2 starts (the FIFO in it never opened), and attempt 2 ran in a fresh one (it
    # writes no result).
    assert (trial["status"], trial["failure"]) == ("failed", "no_result")
    (moved,) = Path(trial["trial_dir"]).glob("attempt-2.moved-*")
    assert stat.S_ISFIFO((moved / "stdout.log").lstat().st_mode)
    assert (Path(trial["trial_dir"]) / "attempt-2" / "stdout.log").is_file()


ECHO = r"""
import json, os, sys
with open(os.path.join(os.environ["DSE_TRIAL_DIR"], "seen.json"), "w") as handle:
    json.dump({"argv": sys.argv[1:], "env": os.environ.get("ODD")}, handle)
with open(os.path.join(os.environ["DSE_TRIAL_DIR"], "result.json"), "w") as handle:
    json.dump({"complete": True, "metrics": {"value": 1}}, handle)
"""

# Bytes the launch protocol must carry inside one item: its old field separator aside (a NUL
# is refused before launch), a newline, '=', ':' and digits like a length prefix.
ODD = "12:x\n=3:y\\ 0:"


def test_every_value_reaches_the_workload_as_one_argv_item_and_one_variable(
    run_local, tmp_path: Path
) -> None:
    echo = tmp_path / "echo.py"
    echo.write_text(ECHO)
    run = run_local(
        [{"value": ODD}],
        space={"value": [ODD]},
        environment={"command": [sys.executable, "-S", str(echo), "{value}", "-{value}-"],
                     "env": {"ODD": ODD}},
    )
    assert run.trials[1]["status"] == "completed"
    seen = json.loads((run.trial_dir(1) / "seen.json").read_text())
    assert seen == {"argv": [ODD, f"-{ODD}-"], "env": ODD}


def test_a_job_with_a_nul_in_an_argv_item_or_a_variable_is_refused_before_launch(
    tmp_path: Path,
) -> None:
    # The campaign file and the space refuse a NUL; a plugin environment could still make one.
    trial_dir = tmp_path / "t"
    trial_dir.mkdir()
    specs = [
        dse.JobSpec(trial_id="nul-1-1", attempt=1, params={}, trial_dir=trial_dir,
                    argv=("true", "x\0--evil")),
        dse.JobSpec(trial_id="nul-1-2", attempt=1, params={}, trial_dir=trial_dir,
                    argv=("true",), env={"FOO": "bar\0PWN=1"}),
    ]
    with LocalBackend(cpus=1, gpus=0, grace=1.0) as backend:
        ids = backend.submit(specs)
        statuses = {s.job_id: s for s in backend.poll()}

    assert [statuses[i].state for i in ids] == [dse.JobState.INVALID] * 2
    assert [statuses[i].reason for i in ids] == [
        "argv item 1 'x\\x00--evil' holds a NUL byte",
        "environment variable FOO='bar\\x00PWN=1' holds a NUL byte",
    ]
    assert not (trial_dir / "attempt-1").exists()
