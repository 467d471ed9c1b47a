"""Bounded numbers where a trial or a file hands one in (issue 38), on real `dse run`
processes and real trials on the local backend.

A trial appending ``"step": 2**63`` (or a 400-digit ``at``, ``attempt`` or metric) to its
``progress.jsonl`` ended the controller with "internal error: OverflowError", and every
resume died the same way; a NaN reaching the stopping rule crashed the record of the stop. A
campaign's ``max_parallelism = 10**26``, a ``[nan, 1.0]`` space and ``dse show c:10**23``
were internal errors. Each is now a refused line (the trial goes on), one config error line
naming the key, or "no such trial".
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from support.cli import run_dse, start_dse, write_plugin
from support.waiting import wait_until

BIG = "1" + "0" * 400

BAD_LINES = {
    "step": '{"step": 9223372036854775808, "metrics": {"loss": 1.0}}',
    "metric": f'{{"step": 1, "metrics": {{"loss": {BIG}}}}}',
    "at": f'{{"step": 1, "metrics": {{"loss": 1.0}}, "at": {BIG}}}',
    "attempt": f'{{"step": 1, "metrics": {{"loss": 1.0}}, "attempt": {BIG}}}',
}
"""The lines of the issue, by the field that is past what the record keeps."""

WORK = '''
import json, os, sqlite3, sys, time
import dse.trial
x = dse.trial.params()["x"]
with open(os.environ["DSE_PROGRESS_FILE"], "a") as f:
    f.write(os.environ["BAD_LINE"] + "\\n")
dse.trial.report_progress(2, {"loss": float(x)})
# Hold until the controller has read the lines (its point of step 2 is in the record) and,
# while the file "hold" exists, longer: a bounded minute either way.
record = dse.trial.trial_dir().parents[2] / "dse.sqlite"
number, deadline = int(dse.trial.trial_dir().name), time.monotonic() + 60
while time.monotonic() < deadline:
    db = sqlite3.connect(f"file:{record}?mode=ro", uri=True)
    try:
        (seen,) = db.execute("SELECT COUNT(*) FROM progress p JOIN trials t ON"
                             " t.id = p.trial_id WHERE t.number = ? AND p.step = 2",
                             (number,)).fetchone()
    except sqlite3.OperationalError:
        seen = 0
    finally:
        db.close()
    if seen and not os.path.exists("hold"):
        break
    time.sleep(0.05)
dse.trial.report({"loss": float(x)})
'''


def campaign(mode: str, *, xs: tuple[int, ...] = (1, 2, 3)) -> str:
    points = ", ".join(f"{{x = {x}}}" for x in xs)
    return f'''
[campaign]
name = "c"
agent = "list"
backend = "local"
max_parallelism = 2
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [{points}]

[environment]
command = ["{sys.executable}", "work.py"]
code_version = "v1"
time_limit = "5m"
env = {{ BAD_LINE = {json.dumps(BAD_LINES[mode])} }}

[backend.local]
cpus = 2

[[objectives]]
metric = "loss"

[stopping]
rule = "median"
max_step = 10

[space]
x = {{ type = "int", low = 0, high = 100 }}
'''


def project(tmp_path: Path, text: str, work: str = WORK) -> Path:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(work)
    (tmp_path / "c.toml").write_text(text)
    return tmp_path


def rows(root: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(root / ".dse" / "dse.sqlite")
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def assert_intact(root: Path) -> None:
    """``PRAGMA integrity_check`` ok, and every trial of the record ended once."""
    assert rows(root, "PRAGMA integrity_check") == [("ok",)]
    assert rows(root, "SELECT COUNT(*) FROM trials WHERE status IN ('running', 'pending')"
                ) == [(0,)]


def strict(text: str) -> Any:
    """*text* read as JSON as RFC 8259 has it: no NaN, no Infinity."""
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("mode", sorted(BAD_LINES))
def test_a_progress_line_past_what_the_record_keeps_is_refused_and_the_trials_go_on(
    tmp_path: Path, mode: str
) -> None:
    root = project(tmp_path, campaign(mode))
    proc = run_dse(root, "run", "c.toml", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
    assert rows(root, "SELECT number, status, metrics FROM trials ORDER BY number") == [
        (x, "completed", json.dumps({"loss": float(x)}, separators=(",", ":")))
        for x in (1, 2, 3)]
    assert rows(root, "SELECT status FROM campaigns") == [("completed",)]
    # The good point of each trial is kept; the bad line of each is refused, and said so.
    assert rows(root, "SELECT t.number, p.step FROM progress p JOIN trials t"
                " ON t.id = p.trial_id ORDER BY t.number") == [(1, 2), (2, 2), (3, 2)]
    noted = [json.loads(d) for (d,) in rows(
        root, "SELECT data FROM events WHERE kind = 'progress_malformed'")]
    assert {n["trial"] for n in noted} == {1, 2, 3}
    field = {"metric": "'metrics': 'loss'"}.get(mode, f"'{mode}'")
    assert all(n["first"].startswith(field) and len(n["first"]) < 200 for n in noted), noted
    assert_intact(root)


def test_a_run_killed_after_such_a_line_resumes_and_records_every_finished_result(
    tmp_path: Path,
) -> None:
    root = project(tmp_path, campaign("step"))
    (root / "hold").touch()
    first = start_dse(root, "run", "c.toml")

    def read_or_gone() -> bool:
        if first.poll() is not None:  # before the fix: the line's OverflowError ended it
            return True
        try:
            return rows(root, "SELECT COUNT(*) FROM progress")[0][0] >= 2
        except sqlite3.OperationalError:
            return False

    wait_until(read_or_gone, 120, "both running trials' points read")
    first.kill()  # kill -9 of the controller: its two trials live on
    first.communicate(timeout=60)
    (root / "hold").unlink()
    results = [root / ".dse" / "c" / "run-1" / f"{n:06d}" / "result.json" for n in (1, 2)]
    wait_until(lambda: all(p.exists() for p in results), 120, "the orphans' results")

    again = run_dse(root, "run", "c.toml", timeout=300)
    assert again.returncode == 0, again.stderr
    assert "resuming it" in again.stderr
    assert "internal error" not in again.stderr
    assert rows(root, "SELECT id, status FROM campaigns") == [(1, "completed")]
    # Each result recorded, once: the two that finished while no controller ran, and the third.
    assert rows(root, "SELECT number, status, metrics FROM trials ORDER BY number") == [
        (x, "completed", json.dumps({"loss": float(x)}, separators=(",", ":")))
        for x in (1, 2, 3)]
    assert rows(root, "SELECT COUNT(*), COUNT(DISTINCT trial_id) FROM attempts") == [(3, 3)]
    assert rows(root, "SELECT COUNT(*) FROM progress") == [(3,)]
    assert_intact(root)


NAN_WORK = '''
import math, os, time
import dse.trial
x = dse.trial.params()["x"]
value = {4: math.nan, 5: math.inf, 6: -math.inf}.get(x, 1.0)  # ties are never stopped
for step in range(1, 5):
    dse.trial.report_progress(step, {"loss": value, "other": math.nan})
    if step == 2 and x > 3:
        time.sleep(60)  # a hopeless trial waits here to be stopped at the rung
dse.trial.report({"loss": float(x)})
'''


def test_nan_and_infinities_reaching_the_stopping_rule_stop_trials_and_crash_nothing(
    tmp_path: Path,
) -> None:
    text = campaign("step", xs=(1, 2, 3, 4, 5, 6)).replace(
        "max_parallelism = 2", "max_parallelism = 3\nmode = \"waves\"").replace(
        "cpus = 2", "cpus = 3").replace(
        "max_step = 10", "max_step = 4\nmin_step = 2\n\n[stopping.median]\nmin_peers = 2")
    root = project(tmp_path, text, NAN_WORK)
    proc = run_dse(root, "run", "c.toml", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
    assert rows(root, "SELECT number, status FROM trials ORDER BY number") == [
        (1, "completed"), (2, "completed"), (3, "completed"),
        (4, "stopped"), (5, "stopped"), (6, "stopped")]
    # The record is JSON: a value that was not a finite number is null there.
    for (metrics,) in rows(root, "SELECT metrics FROM progress"):
        strict(metrics)
    for n in (4, 5, 6):
        shown = run_dse(root, "show", f"c:{n}", "--json")
        assert shown.returncode == 0, shown.stderr
        doc = strict(shown.stdout)
        assert doc["concluded"]["metrics"] == {}  # its partial result: no finite metric
        assert doc["ended"]["progress"]["last"]["metrics"] == {"loss": None, "other": None}
        stop = doc["ended"]["stopping"]["stopped"]
        assert (stop["verdict"], stop["value"], stop["rung"]) == ("stop", None, 2)
        text_form = run_dse(root, "show", f"c:{n}")
        assert text_form.returncode == 0, text_form.stderr
        assert "not a finite number (the worst)" in text_form.stdout
    for args in (("export", "c", "--format", "json"), ("report", "--json")):
        out = run_dse(root, *args)
        assert out.returncode == 0, out.stderr
        strict(out.stdout)
    assert_intact(root)


PLAIN = f'''
[campaign]
name = "c"
agent = "grid"
backend = "local"

[environment]
command = ["{sys.executable}", "work.py"]
code_version = "v1"
time_limit = "60s"

[[objectives]]
metric = "loss"

[space]
x = [1, 2]
'''


@pytest.mark.parametrize(("change", "args", "said"), [
    (None, ("--set", "max_parallelism=100000000000000000000000000"),
     "c.toml: campaign.max_parallelism: expected an integer within 64 bits"),
    (("x = [1, 2]", "x = [nan, 1.0]"), (), "c.toml: space.x[0]: expected a finite number,"
                                           " got nan"),
    (("x = [1, 2]", f"x = [1, {'3' * 5000}]"), (), "c.toml: malformed TOML"),
    (('time_limit = "60s"', "time_limit = 1e300"), (),
     "c.toml: environment.time_limit: expected a non-negative duration of at most 100 years"),
])
def test_a_campaign_number_the_record_cannot_keep_is_one_line_and_writes_nothing(
    tmp_path: Path, change: tuple[str, str] | None, args: tuple[str, ...], said: str
) -> None:
    text = PLAIN if change is None else PLAIN.replace(*change)
    root = project(tmp_path, text, "import dse.trial\ndse.trial.report({'loss': 1.0})\n")
    proc = run_dse(root, "run", "c.toml", *args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"dse: error: {said}"), line
    assert len(line) < 400
    assert not (root / ".dse" / "dse.sqlite").exists()


def test_a_reference_past_64_bits_is_no_such_trial_and_keeps_the_record(tmp_path: Path) -> None:
    root = project(tmp_path, PLAIN, "import dse.trial\ndse.trial.report({'loss': 1.0})\n")
    assert run_dse(root, "run", "c.toml", timeout=120).returncode == 0
    huge = "1" + "0" * 23
    for args, said in (
        (("show", f"c:{huge}"), f"run 1 of c has no trial {huge}"),
        (("show", f"c-1-{huge}", "--json"), f"run 1 of c has no trial {huge}"),
        (("show", f"c-{huge}-1"), f"no run {huge} of a campaign named 'c'"),
        (("show", f"{huge}:1"), f"no campaign run named '{huge}'"),
        (("export", huge), f"no campaign run named '{huge}'"),
        (("report", huge), f"no campaign run named '{huge}'"),
        (("invalidate", "--run", huge, "--failed", "--reason", "x"),
         f"no trial in the record matches failed=any run={huge}"),
        (("invalidate", "--trial", f"c:{huge}", "--reason", "x"), "has no trial"),
        (("report", "c", "--html", "r.html", "--watch", "inf"), "seconds between pages"),
    ):
        proc = run_dse(root, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        if args[-1] != "inf":  # (argparse's usage comes first)
            assert len(lines) == 1, proc.stderr
        assert said in lines[-1], (args, proc.stderr)
        assert "internal error" not in proc.stderr, (args, proc.stderr)
    assert rows(root, "PRAGMA integrity_check") == [("ok",)]
    assert rows(root, "SELECT COUNT(*) FROM invalidations") == [(0,)]
    assert rows(root, "SELECT status, COUNT(*) FROM trials GROUP BY status") == [("completed", 2)]
