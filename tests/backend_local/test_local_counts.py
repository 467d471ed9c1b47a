"""Counts that add up, on real processes: trials submitted but not started are ``queued``,
apart from those running, in ``dse status``, ``dse report`` and the live view; the line ``dse
run`` ends with names every end a trial had (a time-limited one too) and, after Ctrl+C, how
many cancelled trials never started; the live view's last frame after Ctrl+C says cancelled;
its three numbers are the closing line's when trials were stopped early; a run that is not
resumed because a ``--set`` changed names the key and both values."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support.cli import run_dse, start_dse, write_plugin
from support.tmux import dse_command, start, wait_screen
from support.waiting import wait_until

if TYPE_CHECKING:
    pass

HELD = """
[campaign]
name = "held"
agent = "random"
max_parallelism = 2
mode = "rolling"
max_trials = 12
poll_interval = ["20ms", "100ms"]

[environment]
command = ["{python}", "trial.py"]
time_limit = "{limit}"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "int", low = 1, high = 1000 }}
"""

HOLDING = """
import os, time
from dse import trial
x = trial.params()["x"]
while os.path.exists("hold"):  # every trial holds while the file is there
    time.sleep(0.05)
if os.path.exists("slow") and x % 2:
    time.sleep(30)  # past the time limit
trial.report({"loss": float(x)})
"""


def held_project(tmp_path: Path, *, limit: str = "2m", hold: bool = True) -> Path:
    root = write_plugin(tmp_path)
    (root / "c.toml").write_text(HELD.format(python=sys.executable, limit=limit))
    (root / "trial.py").write_text(HOLDING)
    if hold:
        (root / "hold").touch()
    return root


def status_json(root: Path) -> dict[str, object]:
    """The run's ``dse status --json`` entry (empty before the record exists)."""
    done = run_dse(root, "status", "c.toml", "--json")
    if done.returncode != 0:
        assert "no dse record here" in done.stderr or "no campaign run named" in done.stderr, (
            done.stderr)
        return {}
    (entry,) = json.loads(done.stdout)
    return entry


def test_queued_trials_are_counted_apart_from_running_ones_and_cancelled_unstarted(
    tmp_path: Path,
) -> None:
    root = held_project(tmp_path)
    proc = start_dse(root, "run", "c.toml")
    try:
        # Two run (max_parallelism); the random agent proposes ahead, so the local backend
        # holds more, submitted and not started.
        seen: list[dict[str, object]] = []

        def queued() -> bool:
            seen.append(status_json(root))
            return seen[-1].get("running") == 2 and int(str(seen[-1].get("queued", 0))) >= 1

        wait_until(queued, 120, "2 running and some queued in dse status --json",
                   seen=lambda: str(seen[-1:]))
        entry = seen[-1]
        assert entry["trials"] == int(str(entry["queued"])) + 2, entry  # nothing ended yet
        # The agent may propose more meanwhile: more queued, never more running.
        report = run_dse(root, "report", "c.toml")
        (line,) = [ln for ln in report.stdout.splitlines() if ln.startswith("  trials")]
        total = re.fullmatch(r"  trials\s+(\d+): (.*)", line)
        assert total is not None, line
        counts = {what: int(n) for n, what in re.findall(r"(\d+) (\w+)", total.group(2))}
        assert counts["running"] == 2, line
        assert set(counts) == {"running", "queued"}, line
        assert int(total.group(1)) == counts["queued"] + 2, line
        table = run_dse(root, "status", "c.toml").stdout
        assert re.search(r"│ 2, [1-9]\d* queued", table), table
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    closing = out.splitlines()[0]
    tally = re.search(r"(\d+) cancelled \((\d+) never started\)", closing)
    assert tally is not None, closing
    cancelled, unstarted = int(tally.group(1)), int(tally.group(2))
    assert cancelled == unstarted + 2, closing  # the two running, and those queued
    report = run_dse(root, "report", "c.toml").stdout
    assert f"{cancelled} cancelled ({unstarted} never started)" in report, report


def test_the_closing_tally_names_every_end_and_adds_up(tmp_path: Path) -> None:
    root = held_project(tmp_path, limit="3s", hold=False)
    (root / "slow").touch()  # odd x: past the 3 s limit, ended budget_exhausted (time_limit)
    (root / "c.toml").write_text((root / "c.toml").read_text().replace(
        "max_trials = 12", "max_trials = 6").replace('agent = "random"', 'agent = "grid"')
        .replace('x = { type = "int", low = 1, high = 1000 }', "x = [1, 2, 3, 4, 5, 6]"))
    done = run_dse(root, "run", "c.toml", timeout=240)
    assert done.returncode == 0, done.stderr
    closing = done.stdout.splitlines()[0]
    total = re.search(r"; (\d+) trials: (.*)$", closing)
    assert total is not None, closing
    assert "3 completed" in closing, closing
    assert "3 budget_exhausted" in closing, closing
    counted = sum(int(n) for n, what in re.findall(r"(\d+) ([a-z_]+)", total.group(2))
                  if what != "rejected")
    assert counted == int(total.group(1)) == 6, closing


def test_a_run_not_resumed_names_the_set_that_changed(tmp_path: Path) -> None:
    root = held_project(tmp_path)
    proc = start_dse(root, "run", "c.toml")
    wait_until(lambda: status_json(root).get("running") == 2, 120, "2 trials running")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    (root / "hold").unlink()
    again = run_dse(root, "run", "c.toml", "--set", "max_parallelism=1", "--set",
                    "max_trials=2", timeout=240)
    assert again.returncode == 0, again.stderr
    assert ("run 1 of held did not finish, but the campaign changed since: --set"
            " max_parallelism: 2 (the file) before, 1 now; --set max_trials: 12 (the file)"
            " before, 2 now; starting a new run") in again.stderr, again.stderr


# -- the live view, in a real terminal ----------------------------------------------------


def test_the_last_frame_after_ctrl_c_says_cancelled(tmp_path: Path, tmux: str) -> None:
    root = held_project(tmp_path)
    start(tmux, dse_command(root, "run", "c.toml"))
    live = wait_screen(tmux, r"^in flight\s+2 running, [1-9]\d* queued")
    assert re.search(r"^progress\s+0/12 ended", live, re.MULTILINE), live
    subprocess.run(["tmux", "send-keys", "-t", tmux, "C-c"], check=True, timeout=30)
    done = wait_screen(tmux, r"^EXIT=\d+")
    (root / "screen.txt").write_text(done)  # kept with the test's files, to look at
    assert "EXIT=130" in done, done
    assert re.search(r"^progress\s+0/12 ended; cancelled \(cancelled\)", done, re.MULTILINE), done
    assert re.search(r"^eta\s+- \(cancelled\)", done, re.MULTILINE), done
    assert "eta          ~" not in done, done


STOPPED = """
[campaign]
name = "stops"
agent = "grid"
max_parallelism = 1
mode = "rolling"
poll_interval = ["10ms", "40ms"]

[[objectives]]
metric = "loss"

[environment]
command = ["{python}", "w.py"]
time_limit = "60s"

[space]
x = {{ type = "categorical", choices = [1, 5, 6, 7, 8] }}

[stopping]
rule = "asha"
max_step = 9
promote = false
"""

CURVE = """
import time
from dse import trial
x = trial.params()["x"]
for step in range(1, 10):
    trial.report_progress(step, {"loss": x + 1 / step})
    time.sleep(0.1)
trial.report({"loss": x + 1 / 9})
"""


def test_the_live_numbers_are_the_closing_line_s_with_trials_stopped_early(
    tmp_path: Path, tmux: str,
) -> None:
    root = write_plugin(tmp_path)
    (root / "c.toml").write_text(STOPPED.format(python=sys.executable))
    (root / "w.py").write_text(CURVE)
    start(tmux, dse_command(root, "run", "c.toml"))
    done = wait_screen(tmux, r"^EXIT=\d+")
    (root / "screen.txt").write_text(done)
    assert "EXIT=0" in done, done
    live = re.search(r"^numbers\s+([\d,.]+) trials/h, ([\d,.]+) results/h", done, re.MULTILINE)
    closing = re.search(r"^throughput ([\d,.]+) trials/h, effective ([\d,.]+) results/h", done,
                        re.MULTILINE)
    assert live is not None, done
    assert closing is not None, done
    assert re.search(r"\d+ stopped early", done), done  # ASHA stopped the worse ones

    def rate(text: str) -> float:
        return float(text.replace(",", ""))

    # The same definitions (a trial stopped at a rung is a usable result), a moment apart.
    for shown, closed in zip(live.groups(), closing.groups(), strict=True):
        assert rate(shown) == pytest.approx(rate(closed), rel=0.05), (live[0], closing[0])
    assert rate(live.group(2)) == pytest.approx(rate(live.group(1)), rel=0.05), live[0]
