"""A param value reaches the trial verbatim and is never executed, with or without a shell."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from support.cli import run_dse

HOSTILE = "$(touch pwned); rm -rf x"


@pytest.fixture
def workdir(tmp_path):
    """The campaign's working directory, holding a sentinel file ``x``."""
    path = tmp_path / "wd"
    path.mkdir()
    (path / "x").write_text("still here\n")
    return path


def test_a_hostile_value_reaches_the_command_verbatim_and_runs_nothing(
    run_local, workload, workdir, tmp_path
):
    run = run_local(
        [{"value": HOSTILE}],
        space={"value": [HOSTILE]},
        environment={"command": [sys.executable, "-S", str(workload), "{value}"],
                     "workdir": str(workdir)},
    )
    assert run.trials[1]["status"] == "completed"
    trace = run.traces()[1]
    assert trace["argv"] == [HOSTILE]
    assert trace["params"] == {"value": HOSTILE}
    assert trace["cwd"] == str(workdir)
    assert list(tmp_path.rglob("pwned")) == []
    assert (workdir / "x").read_text() == "still here\n"


def test_a_hostile_value_through_a_shell_is_quoted_not_executed(run_local, workdir, tmp_path):
    run = run_local(
        [{"value": HOSTILE}],
        space={"value": [HOSTILE]},
        environment={
            "command": "echo {value} > out.txt"
                       ' && echo \'{"complete": true, "metrics": {"value": 1}}\''
                       ' > "$DSE_TRIAL_DIR/result.json"',
            "shell": True,
            "workdir": str(workdir),
        },
    )
    assert run.trials[1]["status"] == "completed"
    assert (workdir / "out.txt").read_text() == HOSTILE + "\n"
    assert list(tmp_path.rglob("pwned")) == []
    assert (workdir / "x").read_text() == "still here\n"


def test_dse_show_prints_the_argv_that_ran_with_and_without_a_shell(run_local, workdir):
    direct = run_local(
        [{"value": HOSTILE}],
        space={"value": [HOSTILE]},
        environment={"command": ["echo", "{value}", "-{value}-"], "workdir": str(workdir)},
    )
    shell = run_local(
        [{"value": HOSTILE}],
        space={"value": [HOSTILE]},
        environment={"command": "echo {value} > out.txt", "shell": True,
                     "workdir": str(workdir)},
    )
    shown = []
    for run in (direct, shell):
        proc = run_dse(workdir, "show", f"{run.engine.campaign.name}:1", "--json",
                       "--workspace", str(run.store.path.parent))
        assert proc.returncode == 0, proc.stderr
        shown.append(json.loads(proc.stdout)["run"]["argv"])
    assert shown[0] == ["echo", HOSTILE, f"-{HOSTILE}-"]
    # Through a shell the one item is the script `sh -c` ran, the value quoted inside it.
    assert shown[1] == [f"echo {shlex.quote(HOSTILE)} > out.txt"]
    assert (workdir / "out.txt").read_text() == HOSTILE + "\n"
