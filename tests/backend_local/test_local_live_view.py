"""The live view of `dse run` in a real terminal (tmux) and its plain lines when output is not
a terminal: the ETA, the running trials with their elapsed time and node, a line per failed
trial with its failure class and log, a line per retry after an interruption."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from support.cli import run_dse, write_plugin
from support.tmux import dse_command, start, wait_screen

if TYPE_CHECKING:
    pass

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


def test_the_live_view_shows_eta_running_trials_and_failure_lines(
    tmp_path: Path, tmux: str,
) -> None:
    root = project(tmp_path)
    (root / "hold").touch()
    start(tmux, dse_command(root, "run", "campaign.toml"))
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


