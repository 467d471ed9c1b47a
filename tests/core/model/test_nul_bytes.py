"""A NUL byte would end a string where the OS reads it, turning one value into two argv items
or one variable into two: it is refused in one line wherever a value enters."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

import dse
from support.cli import run_dse, write_plugin

CAMPAIGN = """
[campaign]
name = "nul"
agent = "list"
backend = "probe"
poll_interval = "1ms"
max_consecutive_rejections = 1

[agent.list]
points = [{points}]

[environment]
command = [{command}]
env = {{ {env} }}

[[objectives]]
metric = "value"

[space]
v = [{choices}]
"""

DEFAULTS = {"points": '{v = "a"}', "command": '"true", "{v}"', "env": 'FOO = "bar"',
            "choices": '"a", "b"'}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_plugin(tmp_path)


def run(project: Path, **parts: str) -> subprocess.CompletedProcess[str]:
    (project / "campaign.toml").write_text(CAMPAIGN.format(**{**DEFAULTS, **parts}))
    return run_dse(project, "run", "campaign.toml")


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dse: error: campaign.toml: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("parts", "needles"),
    [
        ({"env": r'FOO = "bar\u0000PWN=1"'},
         ("environment.env.FOO", r"'bar\x00PWN=1' holds a NUL byte")),
        ({"env": r'"FOO\u0000" = "bar"'}, ("environment.env", "is not a variable name")),
        ({"env": '"FOO=BAR" = "bar"'}, ("environment.env", "'FOO=BAR' is not a variable name")),
        ({"command": r'"true", "x\u0000--evil"'},
         ("environment.command[1]", r"'x\x00--evil' holds a NUL byte")),
        ({"choices": r'"a", "x\u0000--evil"'},
         ("space.v.choices", r"'x\x00--evil' holds a NUL byte")),
    ],
    ids=["env value", "env name", "env name with =", "command item", "categorical choice"],
)
def test_a_nul_in_the_campaign_file_is_one_line_and_exit_2(
    project: Path, parts: dict[str, str], needles: tuple[str, ...]
) -> None:
    proc = run(project, **parts)

    assert_one_line_error(proc, *needles)
    assert not (project / ".dse" / "dse.sqlite").exists()


def test_a_proposed_value_with_a_nul_is_rejected_and_never_runs(project: Path) -> None:
    # The probe runs no command: what matters is that no trial is made of the value.
    proc = run(project, points=r'{v = "a\u0000--evil"}', command="")

    assert proc.returncode == dse.ExitCode.NO_RESULT, proc.stderr  # no trial, no result
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        trials = db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        (reason,) = db.execute(
            "SELECT json_extract(data, '$.reason') FROM events WHERE kind = 'rejected'"
        ).fetchone()
        status = db.execute("SELECT status, end_reason FROM campaigns").fetchone()
    finally:
        db.close()
    assert trials == 0
    assert reason == r"outside the space: param 'v': 'a\x00--evil' holds a NUL byte"
    assert status == ("stopped", "max_consecutive_rejections")


def test_space_and_coerce_refuse_a_nul() -> None:
    with pytest.raises(dse.ConfigError, match=r"space.v.choices: 'x\\x00y' holds a NUL byte"):
        dse.Space((dse.Categorical("v", ("a", "x\0y")),))
    space = dse.Space((dse.Categorical("v", ("a", "b")),))
    with pytest.raises(dse.ParamError, match="holds a NUL byte"):
        space.coerce({"v": "a\0b"})
    assert space.coerce({"v": "a"}) == {"v": "a"}


def test_the_campaign_dict_refuses_a_nul_in_the_workdir(tmp_path: Path) -> None:
    data = {
        "campaign": {"name": "nul", "backend": "probe"},
        "space": {"v": ["a"]},
        "objectives": [{"metric": "value"}],
        "environment": {"command": ["true"], "workdir": "w\0x"},
    }
    with pytest.raises(dse.ConfigError, match=r"environment.workdir: 'w\\x00x' holds a NUL"):
        dse.campaign_from_dict(data, workspace=tmp_path / "ws")

