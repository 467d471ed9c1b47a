"""The live view of `dse run` in a real terminal (tmux) and its plain lines when output is not
a terminal: the ETA, the running trials with their elapsed time and node, a line per failed
trial with its failure class and log, a line per retry after an interruption."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support.cli import dse_env, run_dse, write_plugin

if TYPE_CHECKING:
    from collections.abc import Iterator

CAMPAIGN = """\
[campaign]
name = "live"
agent = "list"
max_parallelism = 2
mode = "rolling"
max_trials = 6
max_interruptions = 1

[agent.list]
points = [{x = 1}, {x = 2}, {x = 3}, {x = 4}, {x = 5}, {x = 6}]

[environment]
command = ["python", "trial.py", "{x}"]
time_limit = "2m"

[[objectives]]
metric = "loss"

[space]
x = { type = "int", low = 1, high = 6 }
"""

TRIAL = """\
import os, signal, sys, time
from dse import trial
x = int(sys.argv[1])
if x == 3:
    print("bad design", file=sys.stderr)
    sys.exit(3)
if x == 4 and trial.attempt() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
# Each trial holds while the file `hold` exists (the test reads the screen meanwhile).
while os.path.exists("hold") and x in (5, 6):
    time.sleep(0.1)
time.sleep(0.5)
trial.report({"loss": float(x)})
"""


def project(tmp_path: Path) -> Path:
    root = write_plugin(tmp_path)
    (root / "trial.py").write_text(TRIAL)
    (root / "campaign.toml").write_text(CAMPAIGN)
    return root


def test_plain_lines_name_the_failure_class_the_log_and_each_retry(tmp_path: Path) -> None:
    root = project(tmp_path)
    proc = run_dse(root, "run", "campaign.toml", timeout=180)  # piped: not a terminal
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    (failed,) = [line for line in lines if line.startswith("trial 3 ")]
    assert re.match(r"trial 3 failed \(nonzero_exit: bad design\) after 1 attempt on \S+;"
                    r" log \.dse/live/run-1/000003/attempt-1/", failed), failed
    log = root / ".dse" / "live" / "run-1" / "000003" / "attempt-1" / "stderr.log"
    assert "bad design" in log.read_text()
    (retry,) = [line for line in lines if line.startswith("trial 4:")]
    assert re.fullmatch(r"trial 4: attempt 1 ended killed on \S+ \(killed by SIGKILL[^)]*\);"
                        r" attempt 2 queued, starting over", retry), retry
    assert any(line.startswith("trial 4 completed") for line in lines), lines


def screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True, check=True, timeout=30).stdout


def wait_screen(session: str, pattern: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = screen(session)
        if re.search(pattern, text, re.MULTILINE):
            return text
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} never on the screen:\n{text}")


@pytest.fixture
def tmux(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tmux session name, on a tmux server of this test's own (its socket in tmp_path)."""
    assert shutil.which("tmux"), "tmux is needed (apt-get install tmux)"
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))
    session = f"dse-live-{os.getpid()}"
    yield session
    subprocess.run(["tmux", "kill-server"], capture_output=True, check=False, timeout=30)


def test_the_live_view_shows_eta_running_trials_and_failure_lines(
    tmp_path: Path, tmux: str,
) -> None:
    root = project(tmp_path)
    (root / "hold").touch()
    env = dse_env(root)
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in ("PYTHONPATH", "DSE_PLUGINS"))
    command = (f"cd {shlex.quote(str(root))} && env {exports} TERM=xterm-256color"
               f" {shlex.quote(sys.executable)} -m dse run campaign.toml; echo EXIT=$?;"
               " sleep 600")
    subprocess.run(["tmux", "new-session", "-d", "-s", tmux, "-x", "160", "-y", "50",
                    command], check=True, timeout=30)
    # Trials 5 and 6 hold: the view lists them running, with the failure and retry above.
    text = wait_screen(tmux, r"^running\s+trial [56]\s+\d+\.\ds\s+on \S+\n\s+trial [56]\s")
    (root / "screen.txt").write_text(text)  # kept with the test's files, to look at
    assert re.search(r"^trial 3 failed \(nonzero_exit: bad design\) after 1 attempt on \S+;"
                     r" log \.dse/live/run-1/000003/attempt-1/", text, re.MULTILINE), text
    assert re.search(r"^trial 4: attempt 1 ended killed", text, re.MULTILINE), text
    eta = re.search(r"^eta\s+~(\S+): 0 to start, 2 running, ~(\S+) a trial", text,
                    re.MULTILINE)
    assert eta is not None, text
    (root / "hold").unlink()
    done = wait_screen(tmux, r"^EXIT=\d+")
    assert "EXIT=0" in done, done
    assert re.search(r"^progress\s+6/6", done, re.MULTILINE), done


