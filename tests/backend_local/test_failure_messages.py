"""When trials fail, on real processes: the trial's message is its command's own last words
(the end of its ``stderr.log``; a Python function's exception), shown by the live view's
failure line, ``dse show`` and ``dse.Results``; trials failing the same way in a row before
any completed stop the campaign with one line and exit 4 (``max_consecutive_failures``) —
the guide's first campaign as written among them; a mix, ``0`` and interruptions never do."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import dse
from support.cli import last_run, run_dse, write_plugin

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"
TIMEOUT = 600
"""Seconds a run may take: generous, for a loaded 2-core machine."""


def guide_block(first_line: str, kind: str) -> str:
    """The fenced block of docs/guide.md whose first line starts with *first_line*."""
    blocks = GUIDE.read_text(encoding="utf-8").split(f"```{kind}\n")[1:]
    found = [b.split("\n```", 1)[0] for b in blocks if b.startswith(first_line)]
    assert len(found) == 1, f"one ```{kind} block starting {first_line!r} in {GUIDE}"
    return found[0] + "\n"


def the_guide_campaign(project: Path, *, fixed: bool) -> Path:
    """The guide's first campaign in *project*: its campaign file and its ``train.py`` as
    written, or *fixed* with the guide's toy ``train`` above the line that calls it."""
    write_plugin(project)  # what run_dse loads; the guide's campaign names none of it
    (project / "campaign.toml").write_text(guide_block("# campaign.toml", "toml"))
    train = guide_block("# train.py, beside the campaign file", "python")
    if fixed:
        call = "val_loss = train("
        assert call in train
        train = train.replace(call, guide_block("# train.py: a toy train()", "python") + call)
    (project / "train.py").write_text(train)
    return project


def stop_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "max_consecutive_failures" in line]


def show(project: Path, trial: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "dse", "show", trial, "--json"], cwd=project,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


# -- the guide's first campaign ---------------------------------------------------------------


def test_the_guide_first_campaign_as_written_stops_after_ten_failures_naming_the_error(
        tmp_path):
    project = the_guide_campaign(tmp_path, fixed=False)

    done = run_dse(project, "run", "campaign.toml", timeout=TIMEOUT)

    assert done.returncode == dse.ExitCode.NO_RESULT == 4, done.stderr
    # The line the guide shows, as it is printed: class, first trial, its error, its log.
    assert stop_lines(done.stderr) == [guide_block("dse: warning: stopping:", "text").strip()]
    assert "NameError: name 'train' is not defined" in stop_lines(done.stderr)[0]
    assert (project / ".dse/lr-sweep/run-1/000001/attempt-1/stderr.log").is_file()
    assert last_run(project) == {"failed": 10}  # of max_trials = 20
    assert "stopped (max_consecutive_failures)" in done.stdout
    # Each failure's line in the plain output names the error too, and `dse show` does.
    failed = [line for line in done.stderr.splitlines() if re.match(r"trial \d+ failed", line)]
    assert len(failed) == 10
    assert all("(nonzero_exit: NameError: name 'train' is not defined)" in f for f in failed)
    text = subprocess.run([sys.executable, "-m", "dse", "show", "lr-sweep-1-1"], cwd=project,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False).stdout
    assert re.search(r"outcome\s+failed \(nonzero_exit: NameError: name 'train' is not"
                     r" defined\)", text), text
    report = subprocess.run([sys.executable, "-m", "dse", "report"], cwd=project,
                            capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert re.search(r"^\s+first nonzero_exit: trial 1: NameError: name 'train' is not"
                     r" defined$", report.stdout, re.MULTILINE), report.stdout
    ended = show(project, "lr-sweep-1-1")["ended"]
    assert (ended["outcome"], ended["failure"], ended["message"]) == (
        "failed", "nonzero_exit", "NameError: name 'train' is not defined")


def test_the_guide_first_campaign_with_a_train_function_runs_to_its_end(tmp_path):
    project = the_guide_campaign(tmp_path, fixed=True)

    done = run_dse(project, "run", "campaign.toml", timeout=TIMEOUT)

    assert done.returncode == 0, done.stderr
    assert last_run(project) == {"completed": 20}
    assert stop_lines(done.stderr) == []


# -- a command's message ----------------------------------------------------------------------

CAMPAIGN = """\
[campaign]
name = "msgs"
agent = "list"
max_parallelism = {parallel}

[agent.list]
points = [{points}]

[environment]
command = ["python", "trial.py", "{{x}}"]
time_limit = "2m"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "int", low = 1, high = 100 }}
"""

TRIAL = """\
import os, signal, sys
from dse import trial
x = int(sys.argv[1])
kind = os.environ.get("KIND", "")
if kind == "interrupted" and trial.attempt() == 1:
    os.kill(os.getpid(), signal.SIGKILL)  # from outside dse, for the retry policy
if kind == "interrupted":
    print(f"ValueError: attempt {trial.attempt()} of {x} failed for good", file=sys.stderr)
    sys.exit(1)
if x % 3 == 0 or kind == "fail":
    print("loading data/", x, file=sys.stderr)
    sys.stderr.buffer.write(b"caf\\xe9: not UTF-8\\n\\n")
    print(f"no shard {x} in data/", file=sys.stderr)
    sys.exit(2)
if x % 3 == 1 and kind == "":
    print("about to abort", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGABRT)
trial.report({"loss": float(x)})
"""


def project_with(tmp_path: Path, points: range, parallel: int = 2) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    write_plugin(project)
    (project / "campaign.toml").write_text(CAMPAIGN.format(
        parallel=parallel, points=", ".join(f"{{x = {x}}}" for x in points)))
    (project / "trial.py").write_text(TRIAL)
    return project


def test_a_failed_command_is_recorded_with_the_end_of_its_stderr(tmp_path):
    # x % 3 == 0 exits 2 after three lines (one not UTF-8); x % 3 == 1 aborts; else completes.
    project = project_with(tmp_path, range(1, 7))

    done = run_dse(project, "run", "campaign.toml", timeout=TIMEOUT)

    assert done.returncode == 0, done.stderr  # results: no streak, a normal end
    said = "loading data/ 3 | caf\ufffd: not UTF-8 | no shard 3 in data/"
    assert re.search(r"^trial 3 failed \(nonzero_exit: " + re.escape(said) + r"\) after 1"
                     r" attempt on localhost; log \S+/000003/attempt-1/",
                     done.stderr, re.MULTILINE), done.stderr
    three = show(project, "msgs-1-3")
    assert three["ended"]["message"] == said
    assert three["ended"]["attempts"][0]["reason"] == said
    assert three["ended"]["attempts"][0]["exit_code"] == 2
    one = show(project, "msgs-1-1")["ended"]
    assert (one["failure"], one["message"]) == ("nonzero_exit",
                                                "killed by signal 6: about to abort")
    results = dse.load(project / ".dse")
    messages = {t.number: t.message for t in results.trials}
    assert messages == {1: "killed by signal 6: about to abort", 2: None, 3: said,
                        4: "killed by signal 6: about to abort", 5: None,
                        6: said.replace("3", "6")}


def test_a_mix_of_failures_and_results_never_stops_early(tmp_path):
    # Two failures out of every three (an abort, an exit 2), 30 trials: a result about the
    # design, never a reason to stop.
    project = project_with(tmp_path, range(1, 31))

    done = run_dse(project, "run", "campaign.toml", timeout=TIMEOUT)

    assert done.returncode == 0, done.stderr
    assert last_run(project) == {"failed": 20, "completed": 10}
    assert stop_lines(done.stderr) == []
    messages = {t.message for t in dse.load(project / ".dse").trials}
    assert messages == {None, "killed by signal 6: about to abort"} | {
        f"loading data/ {x} | caf\ufffd: not UTF-8 | no shard {x} in data/"
        for x in range(3, 31, 3)}


def test_zero_never_stops_and_a_run_with_no_result_exits_4(tmp_path):
    project = project_with(tmp_path, range(1, 16))

    done = run_dse(project, "run", "campaign.toml", "--set", "max_consecutive_failures=0",
                   "--set", "environment.env={KIND = \"fail\"}", timeout=TIMEOUT)

    assert last_run(project) == {"failed": 15}
    assert stop_lines(done.stderr) == []
    assert "completed (agent_exhausted)" in done.stdout
    assert done.returncode == dse.ExitCode.NO_RESULT, done.stderr  # nothing completed


def test_an_interruption_never_counts(tmp_path):
    # Every trial's first attempt is killed by SIGKILL from outside dse: an interruption the
    # retry policy retries; the second fails. Three failures stop it — three trials, six
    # attempts: the interruptions were not counted.
    project = project_with(tmp_path, range(1, 11), parallel=1)

    done = run_dse(project, "run", "campaign.toml", "--set", "max_consecutive_failures=3",
                   "--set", "environment.env={KIND = \"interrupted\"}", timeout=TIMEOUT)

    assert done.returncode == dse.ExitCode.NO_RESULT, done.stderr
    assert last_run(project) == {"failed": 3}
    retries = [line for line in done.stderr.splitlines() if "attempt 2 queued" in line]
    assert len(retries) == 3, done.stderr
    (line,) = stop_lines(done.stderr)
    assert ("3 trials in a row failed (nonzero_exit) and none completed"
            " (max_consecutive_failures = 3); the first, msgs-1-1: ValueError: attempt 2 of 1"
            " failed for good; log ") in line
    assert line.endswith("/000001/attempt-2/")
    first = show(project, "msgs-1-1")
    assert [a["state"] for a in first["ended"]["attempts"]] == ["killed", "failed"]


# -- a Python function ------------------------------------------------------------------------


def test_dse_run_of_a_function_that_raises_stops_after_ten_with_its_exception(tmp_path):
    script = textwrap.dedent("""\
        import json
        import dse

        def objective(params):
            raise ValueError(f"lr {params['lr']} is not a learning rate")

        if __name__ == "__main__":
            try:
                results = dse.run(
                    {"campaign": {"name": "nb", "max_trials": 40, "max_parallelism": 2},
                     "space": {"lr": [0.1, 0.01, 0.001, 0.3, 0.03, 0.003, 0.5, 0.05, 0.005,
                                      0.7, 0.07, 0.007, 0.9, 0.09]},
                     "objectives": [{"metric": "loss"}]},
                    objective)
            except dse.DseError as exc:  # a run without a result may raise, with its results
                results = exc.results
            print(json.dumps({
                "status": results.status.value, "end_reason": results.end_reason,
                "trials": [[t.trial_id, t.status.value, t.message] for t in results.trials],
            }))
    """)
    project = tmp_path / "notebook"
    project.mkdir()
    (project / "nb.py").write_text(script)

    proc = subprocess.run([sys.executable, "nb.py"], cwd=project, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)

    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert (out["status"], out["end_reason"]) == ("stopped", "max_consecutive_failures")
    trials = out["trials"]
    failed = [t for t in trials if t[1] == "failed"]
    assert len(failed) == 10
    assert {t[1] for t in trials} <= {"failed", "cancelled"}
    for _, _, message in failed:
        assert re.fullmatch(r"ValueError: lr \S+ is not a learning rate", message), message
    assert "nb-1-1" in {t[0] for t in failed}
