"""Names a campaign gives that the trials must match, checked on real processes: a
``[stopping] metric`` the trials never report ends the run at the first progress points with
one line naming it (early stopping that silently never happened, before); a maximised
metric's stop reasons print its values as the trials reported them (not negated)."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from typing import TYPE_CHECKING

from support.cli import run_dse, write_plugin

if TYPE_CHECKING:
    from pathlib import Path

CAMPAIGN = """
[campaign]
name = "names"
agent = "grid"
backend = "local"
max_parallelism = 1
mode = "rolling"
poll_interval = ["10ms", "40ms"]

[[objectives]]
metric = "{objective}"
direction = "{direction}"

[environment]
command = ["{python}", "w.py"]
time_limit = "60s"

[space]
x = {{ type = "categorical", choices = [6, 1, 2, 3] }}

[stopping]
rule = "asha"
max_step = 9
promote = false
{extra}
"""

WORKLOAD = """
import time
from dse import trial
x = trial.params()["x"]
for step in range(1, 10):
    trial.report_progress(step, {"val_error": 1 / (x * step), "acc": x / 10 + step / 100})
    time.sleep(0.05)
trial.report({"acc": x / 10 + 0.09, "val_error": 1 / (9 * x)})
"""


def project(tmp_path: Path, *, objective: str = "acc", direction: str = "maximize",
            extra: str = "") -> Path:
    write_plugin(tmp_path)
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(
        python=sys.executable, objective=objective, direction=direction, extra=extra))
    (tmp_path / "w.py").write_text(WORKLOAD)
    return tmp_path


def test_a_misspelt_stopping_metric_ends_the_run_with_one_line_naming_it(
    tmp_path: Path,
) -> None:
    root = project(tmp_path, extra='metric = "val_eror"')
    done = run_dse(root, "run", "c.toml", timeout=180)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("dse: error:")]
    assert re.fullmatch(
        r"dse: error: c\.toml: stopping\.metric: 'val_eror' is neither an objective's metric"
        r" nor in the progress the trials report \(trial 1 reported 'acc', 'val_error' at step"
        r" \d\); did you mean 'val_error'\?", line), line
    assert "Traceback" not in done.stderr
    db = sqlite3.connect(root / ".dse" / "dse.sqlite")
    (status, reason), = db.execute("SELECT status, end_reason FROM campaigns").fetchall()
    assert status == "failed"
    assert reason.startswith("error: ConfigError: c.toml: stopping.metric: 'val_eror'"), reason
    # Stopped at the first points read (trial 1's, one at a time): no other trial ran.
    ran = db.execute("SELECT number FROM trials WHERE status NOT IN ('cancelled')").fetchall()
    assert ran in ([], [(1,)]), ran


def test_a_stopping_metric_the_trials_report_is_taken(tmp_path: Path) -> None:
    # Not an objective's, but in every progress point: the rule compares on it.
    root = project(tmp_path, objective="acc", extra='metric = "val_error"')
    done = run_dse(root, "run", "c.toml", timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    db = sqlite3.connect(root / ".dse" / "dse.sqlite")
    stopped = db.execute("SELECT COUNT(*) FROM trials WHERE status = 'stopped'").fetchone()[0]
    assert stopped >= 1


def test_a_maximised_metric_s_stop_reasons_print_its_values_as_reported(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)  # stopping on acc, maximised: x=6 first, the others worse
    done = run_dse(root, "run", "c.toml", timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    db = sqlite3.connect(root / ".dse" / "dse.sqlite")
    stops = db.execute(
        "SELECT t.number, d.value, d.cutoff, d.reason, t.message FROM decisions d JOIN trials"
        " t ON t.id = d.trial_id WHERE d.verdict = 'stop' ORDER BY d.id").fetchall()
    assert stops, done.stderr
    for _, value, cutoff, reason, message in stops:
        assert value > 0, value  # acc is positive
        assert cutoff > value, (value, cutoff)  # and the trial stopped is worse
        shown = re.fullmatch(r"(\S+) is not among the best 1 of \d+ trials at step \d+"
                             r" \(1/3; the cut is (\S+)\)", reason)
        assert shown is not None, reason
        assert float(shown.group(1)) == float(f"{value:g}"), (reason, value)
        assert float(shown.group(2)) == float(f"{cutoff:g}"), (reason, cutoff)
        assert reason in message, message
    shown_reasons = json.dumps([s[3] for s in stops])
    assert "-0." not in shown_reasons, shown_reasons


EVERY_THIRD = """
import time
from dse import trial
x = trial.params()["x"]
for step in range(1, 10):
    # Validation every third step only: the other points carry acc alone.
    point = {"acc": x / 10 + step / 100}
    if step % 3 == 0:
        point["val_error"] = 1 / (x * step)
    trial.report_progress(step, point)
    time.sleep(0.05)
trial.report({"acc": x / 10 + 0.09, "val_error": 1 / (9 * x)})
"""


def test_a_metric_reported_every_few_steps_is_not_refused_and_one_never_reported_is(
    tmp_path: Path,
) -> None:
    (tmp_path / "every-third").mkdir()
    (tmp_path / "never").mkdir()
    root = project(tmp_path / "every-third", extra='metric = "val_error"')
    (root / "w.py").write_text(EVERY_THIRD)
    done = run_dse(root, "run", "c.toml", timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    db = sqlite3.connect(root / ".dse" / "dse.sqlite")
    assert db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0] >= 1  # it compared

    # A name like none of those reported: refused once a trial reported to its end without it.
    root = project(tmp_path / "never", extra='metric = "throughput"')
    done = run_dse(root, "run", "c.toml", timeout=180)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("dse: error:")]
    assert re.fullmatch(
        r"dse: error: c\.toml: stopping\.metric: 'throughput' is neither an objective's metric"
        r" nor in the progress the trials report \(trial 1 reported 'acc', 'val_error' from"
        r" step 1 to its end\)", line), line
