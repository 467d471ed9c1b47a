"""`dse.run` says what `dse run` says (docs/python-api.md, "What it prints"): progress on
stderr — one line rewritten in place in a terminal, the CLI's plain lines in a log, nothing
with ``quiet=True`` —, the CLI's warnings as :class:`dse.RunWarning` pointing at the caller's
line, the CLI's closing lines, and a run with no completed trial raises
:class:`dse.NoResultError` naming why. Each campaign runs in a real script started as a user
starts it, its trials real worker processes; the terminal is a real tmux pane."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from support.tmux import start, wait_screen

TIMEOUT = 600
"""Seconds a script may take: generous, for a loaded 2-core machine."""

SCRIPT = """\
import json, os, sys, time, warnings
import dse

def objective(params):
    x = params["x"]
    while os.path.exists("hold") and x == 1.0:  # the test reads the screen meanwhile
        time.sleep(0.1)
    if x == 0.5:
        raise ValueError("x = 0.5 is refused")
    return (x - 0.3) ** 2

CAMPAIGN = {
    "campaign": {"name": "quad", "agent": "grid", "max_trials": 5,
                 "max_parallelism": (os.cpu_count() or 1) + 2},
    "space": {"x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25}},
    "objectives": [{"metric": "loss"}],
    "environment": {"time_limit": "2m"},
}
"""


def run_script(directory: Path, text: str) -> subprocess.CompletedProcess[str]:
    """Run *text* as ``python script.py`` in *directory*, output piped (not a terminal)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "script.py").write_text(textwrap.dedent(text), encoding="utf-8")
    return subprocess.run([sys.executable, "script.py"], cwd=directory, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)


def call_line(directory: Path) -> int:
    """The line of ``script.py`` that calls ``dse.run``."""
    lines = (directory / "script.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if "dse.run(" in line)


RECORDING = SCRIPT + """\
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    results = dse.run(CAMPAIGN, objective{extra})
print(json.dumps({
    "warnings": [[w.category.__name__, str(w.message), w.filename, w.lineno] for w in seen],
    "ok": results.ok, "counts": results.counts, "status": results.status.value,
}))
"""


def test_in_a_log_it_prints_the_cli_lines_and_its_warnings_are_run_warnings(
    tmp_path: Path,
) -> None:
    proc = run_script(tmp_path, RECORDING.replace("{extra}", ""))
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out["ok"] is True
    assert out["status"] == "completed"
    assert out["counts"] == {"completed": 4, "failed": 1}
    # The CLI's warning, as a RunWarning from the caller's line.
    [(category, message, filename, lineno)] = out["warnings"]
    assert category == "RunWarning"
    assert re.match(r"max_parallelism = \d+ but the local backend runs at most \d+", message)
    assert (Path(filename).name, lineno) == ("script.py", call_line(tmp_path))
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("campaign quad (run 1): agent grid, backend local"), lines
    assert any(re.match(r"trial [1245] completed; best \S+ \(trial \d\)", line)
               for line in lines), lines
    [failed] = [line for line in lines if line.startswith("trial 3 ")]
    assert re.match(r"trial 3 failed \(nonzero_exit[:)].* after 1 attempt on \S+; log \S+",
                    failed), failed
    # dse run's closing lines.
    assert any(line.startswith("campaign quad run 1: completed (max_trials); 5 trials:"
                               " 4 completed, 1 failed") for line in lines), lines
    assert any(re.match(r"best: trial 2 loss=0\.0025 params \{\"x\": 0\.25\}", line)
               for line in lines), lines
    assert "dse: warning" not in proc.stderr  # a warning is Python's, not a printed line


def test_quiet_prints_nothing_and_its_warnings_are_still_warnings(tmp_path: Path) -> None:
    proc = run_script(tmp_path, RECORDING.replace("{extra}", ", quiet=True"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    out = json.loads(proc.stdout)
    assert [w[0] for w in out["warnings"]] == ["RunWarning"]
    assert out["counts"] == {"completed": 4, "failed": 1}


def test_a_run_with_no_completed_trial_raises_no_result_error_saying_why(
    tmp_path: Path,
) -> None:
    proc = run_script(tmp_path, """\
        import json
        import dse

        def objective(params):
            raise ValueError(f"no good: {params['x']}")

        try:
            dse.run({"campaign": {"name": "bad", "agent": "grid", "max_parallelism": 2},
                     "space": {"x": [1, 2, 3]}, "objectives": [{"metric": "loss"}]},
                    objective, quiet=True)
        except dse.NoResultError as error:
            r = error.results
            print(json.dumps({"message": str(error), "ok": r.ok, "counts": r.counts,
                              "dirs": [t.trial_dir for t in r.trials]}))
        """)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is False
    assert out["counts"] == {"failed": 3}
    message = out["message"]
    assert message.startswith("campaign bad run 1 ended completed (agent_exhausted) with no"
                              " completed trial: 3 failed (nonzero_exit); bad:1"), message
    assert message.endswith(f"; log {out['dirs'][0]}"), message
    assert (tmp_path / out["dirs"][0]).is_dir() or Path(out["dirs"][0]).is_dir()

    # Uncaught, it ends the script: a non-zero exit and the one line as its last.
    again = run_script(tmp_path / "uncaught", """\
        import dse

        def objective(params):
            raise ValueError("never")

        dse.run({"campaign": {"name": "bad", "agent": "grid"}, "space": {"x": [1, 2]},
                 "objectives": [{"metric": "loss"}]}, objective, quiet=True)
        """)
    assert again.returncode == 1
    assert re.search(r"NoResultError: campaign bad run 1 ended .* with no completed trial:"
                     r" 2 failed", again.stderr.strip().splitlines()[-1]), again.stderr


def test_in_a_terminal_its_progress_is_one_line_rewritten_in_place(
    tmp_path: Path, tmux: str,
) -> None:
    tmp_path.joinpath("script.py").write_text(
        SCRIPT + "results = dse.run(CAMPAIGN, objective)\nprint('RESULT', results)\n")
    (tmp_path / "hold").touch()
    start(tmux, f"cd {shlex.quote(str(tmp_path))} && {shlex.quote(sys.executable)} script.py")
    # Trial 5 (x = 1.0) holds: the line shows the trials done and the one running, the failed
    # trial's line stands above it.
    text = wait_screen(tmux, r"^quad: 4/5 trials \(3 completed, 1 failed, 1 running\); best"
                             r" loss=0\.0025 \(trial 2\)")
    (tmp_path / "screen-running.txt").write_text(text)
    assert re.search(r"^trial 3 failed \(nonzero_exit", text, re.MULTILINE), text
    assert re.search(r"RunWarning: max_parallelism = \d+ but", text), text
    os.unlink(tmp_path / "hold")
    done = wait_screen(tmux, r"^EXIT=\d+")
    (tmp_path / "screen-done.txt").write_text(done)
    assert "EXIT=0" in done, done
    progress = re.findall(r"^quad: .*$", done, re.MULTILINE)
    assert progress == ["quad: 5/5 trials (4 completed, 1 failed); best loss=0.0025 (trial 2);"
                        " completed"], done  # one line, drawn over and over in place
    assert not re.search(r"^trial \d completed", done, re.MULTILINE), done  # no line a trial
    assert re.search(r"^campaign quad run 1: completed \(max_trials\)", done,
                     re.MULTILINE), done
    assert re.search(r"^RESULT <Results quad run 1: completed, 5 trials", done,
                     re.MULTILINE), done
