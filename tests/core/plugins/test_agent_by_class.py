"""``agent = "module:Class"``: a class of the user's own (or another library's) drives a campaign
without a plugin — imported beside the campaign file, checked against the Agent protocol in
one line, stamped in the record by its code's digest, rebuilt the same way when a run resumes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = """\
import random

class Sweep:
    # No name, no version: the record names it by the campaign's text and its source digest.
    def __init__(self, space, seed=0, step=1):
        self.space, self.step, self.next = space, step, 0
        self.told = []

    @property
    def exhausted(self):
        return self.next > 9

    def propose(self, n, in_flight):
        out = []
        while len(out) < n and not self.exhausted:
            out.append({"x": self.next})
            self.next += self.step
        return out

    def observe(self, observations):
        self.told += [o.proposal for o in observations]
"""

CAMPAIGN = """\
[campaign]
name = "own"
agent = "{agent}"
backend = "probe"
max_parallelism = 2
poll_interval = "1ms"

[agent."{agent}"]
step = 2

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 9 }}
"""


def _run(tmp_path: Path, agent: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(agent=agent))
    return subprocess.run([sys.executable, "-m", "dse", "run", "c.toml", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=""))


def test_a_class_beside_the_campaign_file_is_its_agent(tmp_path: Path) -> None:
    (tmp_path / "my_agents.py").write_text(AGENT)
    done = _run(tmp_path, "my_agents:Sweep")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["trials"] == 5  # x = 0, 2, 4, 6, 8: its option, used
    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    (agent,) = db.execute("SELECT agent FROM campaigns").fetchone()
    name, _, version = agent.partition("==")
    assert name == "my_agents:Sweep"
    assert version.startswith("sha256:")
    params = [json.loads(p)["x"] for (p,) in db.execute(
        "SELECT params FROM trials ORDER BY number")]
    assert params == [0, 2, 4, 6, 8]
    # Its code edited, it is another agent: the record says so.
    (tmp_path / "my_agents.py").write_text(AGENT.replace("self.told = []", "self.told = [] "))
    again = _run(tmp_path, "my_agents:Sweep")
    assert again.returncode == 0, again.stderr
    stamps = [a for (a,) in db.execute("SELECT agent FROM campaigns ORDER BY id")]
    assert len(stamps) == 2
    assert stamps[0] != stamps[1]


@pytest.mark.parametrize(("agent", "source", "says"), [
    ("my_agents:Nope", AGENT, "module 'my_agents' has no attribute 'Nope'"),
    ("missing_mod:Sweep", AGENT, "cannot import 'missing_mod'"),
    ("my_agents:make", "def make(space, seed=0):\n    return None\n",
     "my_agents:make is not a class"),
    ("my_agents:Half", "class Half:\n    def propose(self, n, in_flight):\n        return []\n",
     "my_agents:Half is not a dse.Agent: it has no observe, exhausted"),
    ("my agents:Sweep", AGENT, "expected a registered agent name or 'module:Class'"),
])
def test_a_class_that_is_no_agent_is_one_line_and_nothing_is_written(
    tmp_path: Path, agent: str, source: str, says: str,
) -> None:
    (tmp_path / "my_agents.py").write_text(source)
    refused = _run(tmp_path, agent)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("dse: error: c.toml: campaign.agent: ")
    assert says in lines[0]
    assert not (tmp_path / ".dse").exists()
