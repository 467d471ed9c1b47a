"""A plugin's mistakes, end to end through `dse run`: an agent that raises or answers with the
wrong type ends the campaign with one line naming it (exit 2) and a consistent record; a
backend whose poll answers nonsense is survived; an agent answering more than asked is
warned of by name.

The agent comes from a throwaway *distribution* (a ``.dist-info`` directory with an entry
point of group ``dse``, on ``PYTHONPATH``), so the error can name the distribution and its
version as an installed plugin's would.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from support.cli import run_dse, write_plugin

FAULTY = '''
from __future__ import annotations
import dse
from dse.testing import ProbeBackend


class FaultyAgent:
    """Proposes ``points`` in order; fails as ``fail`` says at call number ``at``."""

    name = "faulty"
    version = "7"

    def __init__(self, space, *, seed=0, points=(), fail="", at=1, extra=0):
        if fail == "__init__":
            raise RuntimeError("cannot load the model")
        self.points = [dict(p) for p in points]
        self.fail, self.at, self.extra = fail, at, extra
        self.calls = {"propose": 0, "observe": 0}

    @property
    def exhausted(self):
        return not self.points

    def _now(self, call):
        self.calls[call] += 1
        return self.fail.startswith(call) and self.calls[call] == self.at

    def propose(self, n, in_flight):
        if self._now("propose"):
            if self.fail == "propose":
                raise ValueError("no proposals today")
            if self.fail == "propose-none":
                return None
            if self.fail == "propose-ints":
                return [1, 2]
        take = n + self.extra
        out, self.points = self.points[:take], self.points[take:]
        return out

    def observe(self, observations):
        if self._now("observe"):
            raise KeyError("score")


class FlakyProbe(ProbeBackend):
    """The probe, whose first polls answer nonsense."""

    name = "flaky"
    nonsense = ["not a mapping", "a state", "a string state"]

    def _poll(self, job_ids):
        if self.nonsense:
            kind = self.nonsense.pop(0)
            if kind == "not a mapping":
                return "running"
            if kind == "a state":
                return {job_id: dse.JobState.RUNNING for job_id in job_ids}
            return {job_id: dse.JobStatus(job_id, "running") for job_id in job_ids}
        return super()._poll(job_ids)


@dse.hookimpl
def dse_register_agents():
    return [FaultyAgent]


@dse.hookimpl
def dse_register_backends():
    return [FlakyProbe]
'''

CAMPAIGN = """
[campaign]
name = "faulty"
agent = "faulty"
backend = "{backend}"
mode = "{mode}"
max_parallelism = 2
poll_interval = "1ms"

[agent.faulty]
{agent}

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 10 }}
passes = {{ type = "int", low = 0, high = 100000 }}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose `dse` finds the distribution ``faulty-agents`` 1.2.3."""
    write_plugin(tmp_path)
    (tmp_path / "faulty_plugin.py").write_text(FAULTY)
    info = tmp_path / "faulty_agents-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: faulty-agents\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text("[dse]\nfaulty = faulty_plugin\n")
    return tmp_path


QUICK = "points = [" + ", ".join(f"{{x = {x}, passes = 0}}" for x in range(1, 6)) + "]"
"""Five trials that end at their first poll."""
SLOW_SECOND = QUICK.replace("x = 2, passes = 0", "x = 2, passes = 100000")
"""The same, but trial 2 runs until it is cancelled."""


def run_campaign(project: Path, agent: str = "", *, points: str = QUICK, backend: str = "probe",
                 mode: str = "rolling") -> subprocess.CompletedProcess[str]:
    path = project / "campaign.toml"
    agent = f"{points}\n{agent}"
    path.write_text(CAMPAIGN.format(agent=agent, backend=backend, mode=mode))
    return run_dse(project, "run", str(path))


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a run that ended with exit 2."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "internal error" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dse: error: ")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.rstrip().endswith(errors[0])
    return errors[0]


def assert_names_the_agent(line: str, call: str) -> None:
    assert "agent 'faulty' (version 7; plugin 'faulty' from distribution faulty-agents 1.2.3)" \
        in line, line
    assert f"1.2.3): {call} " in line, line


def record(project: Path) -> tuple[list[tuple[str, str]], list[tuple[int, str]]]:
    """(status and end reason of each run, number and status of each trial)."""
    with sqlite3.connect(project / ".dse" / "dse.sqlite") as db:
        runs = db.execute("SELECT status, end_reason FROM campaigns").fetchall()
        trials = db.execute("SELECT number, status FROM trials ORDER BY number").fetchall()
    return runs, trials


def test_an_agent_raising_in_init_is_one_line_naming_it(project: Path) -> None:
    line = error_line(run_campaign(project, 'fail = "__init__"'))
    assert_names_the_agent(line, "__init__()")
    assert "RuntimeError: cannot load the model" in line


def test_bad_agent_options_are_still_a_config_error(project: Path) -> None:
    line = error_line(run_campaign(project, "colour = 3"))
    assert "agent.faulty: bad option(s)" in line, line
    assert "'colour'" in line, line


@pytest.mark.parametrize(("fail", "call", "says"), [
    ("propose", "propose()", "raised ValueError: no proposals today"),
    ("propose-none", "propose()", "returned NoneType None, not a sequence of proposals"),
    ("propose-ints", "propose()", "returned int 1 as proposal 0"),
    ("observe", "observe()", "raised KeyError: 'score'"),
])
def test_an_agent_that_fails_mid_run_ends_it_naming_the_agent_and_the_call(
    project: Path, fail: str, call: str, says: str
) -> None:
    # The second call fails: by then trials 1 and 2 run (2 for a long time).
    line = error_line(run_campaign(project, f'fail = "{fail}"\nat = 2', points=SLOW_SECOND))
    assert_names_the_agent(line, call)
    assert says in line, line
    runs, trials = record(project)
    ((status, reason),) = runs
    assert status == "failed"
    assert reason.startswith("error: AgentError: agent 'faulty'"), reason
    assert call in reason
    # Nothing recorded is lost, nothing is left running: trial 2 was still running when
    # the agent failed, and was cancelled as on any error.
    assert [n for n, _ in trials][:2] == [1, 2]
    assert dict(trials)[2] == "cancelled", trials
    assert all(s not in ("running", "pending") for _, s in trials), trials


def test_the_run_after_an_agent_failure_is_a_new_one(project: Path) -> None:
    """A run its agent ended is recorded failed, never resumed: the next `dse run` (the agent
    fixed) starts a new run, and the failed one stays as recorded."""
    assert run_campaign(project, 'fail = "observe"\nat = 2').returncode == 2
    proc = run_campaign(project)
    assert proc.returncode == 0, proc.stderr
    runs, _ = record(project)
    assert [s for s, _ in runs] == ["failed", "completed"]


def test_an_agent_answering_more_than_asked_is_warned_of_by_name(project: Path) -> None:
    eight = "points = [" + ", ".join(f"{{x = {x}, passes = 0}}" for x in range(1, 9)) + "]"
    proc = run_campaign(project, "extra = 1", points=eight, mode="waves")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "when asked for at most" in line]
    assert len(warnings) == 1, proc.stderr
    assert "agent 'faulty' (version 7; plugin 'faulty' from distribution faulty-agents" \
        " 1.2.3) answered propose() with 3 proposals when asked for at most 2" in warnings[0]
    assert "the extra 1 are dropped" in warnings[0]
    # Waves of 2, each answered with 3: the third proposal of each is dropped, never run.
    with sqlite3.connect(project / ".dse" / "dse.sqlite") as db:
        xs = [x for (x,) in db.execute(
            "SELECT json_extract(params, '$.x') FROM trials ORDER BY number")]
        (count,) = db.execute(
            "SELECT COUNT(*) FROM events WHERE kind = 'agent_overproposed'").fetchone()
    assert xs == [1, 2, 4, 5, 7, 8]
    assert count == 2


def test_a_backend_poll_answering_nonsense_is_survived_and_logged(project: Path) -> None:
    points = "points = [{x = 1, passes = 0}, {x = 2, passes = 0}, {x = 3, passes = 0}]"
    proc = run_campaign(project, points=points, backend="flaky")
    assert proc.returncode == 0, proc.stderr
    failed = [line for line in proc.stderr.splitlines() if "poll failed" in line]
    assert len(failed) == 3, proc.stderr
    assert "backend flaky (faulty_plugin.FlakyProbe): poll failed (1 in a row): _poll" \
        " returned str, not a mapping" in failed[0], failed[0]
    assert "(2 in a row)" in failed[1]
    assert "returned JobState" in failed[1], failed[1]
    assert "(3 in a row)" in failed[2]
    assert "whose state is 'running', not a JobState" in failed[2], failed[2]
    runs, trials = record(project)
    assert [s for s, _ in runs] == ["completed"]
    assert trials == [(1, "completed"), (2, "completed"), (3, "completed")]
