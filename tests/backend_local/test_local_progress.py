"""A trial's learning curve: the points its workload reports while it runs
(`dse.trial.report_progress`, or lines appended to `progress.jsonl` by any program) are read
by the controller at each pass and kept in the record, on real processes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import dse
import dse.trial

CAMPAIGN = """
[campaign]
name = "curves"
agent = "grid"
backend = "local"
max_parallelism = 2
poll_interval = ["10ms", "50ms"]

[[objectives]]
metric = "loss"

[environment]
command = {command}
time_limit = "60s"

[space]
x = {{ type = "categorical", choices = [1, 2, 3] }}
"""

PYTHON_WORKLOAD = """\
import time, dse.trial
x = dse.trial.params()["x"]
for step in range(1, 6):
    time.sleep(0.05)
    dse.trial.report_progress(step, {"loss": x / step})
dse.trial.report({"loss": x / 5})
"""

SHELL_WORKLOAD = """\
f="$DSE_PROGRESS_FILE"
echo '{"step": 1, "metrics": {"loss": 9}}' >> "$f"
echo 'not json' >> "$f"
printf '{"step": 2, "metrics": ' >> "$f"; sleep 0.3; echo '{"loss": 8}}' >> "$f"
echo '{"step": 3, "metrics": {"loss": "high"}}' >> "$f"
echo "{\\"complete\\": true, \\"metrics\\": {\\"loss\\": 7}}" > "$DSE_TRIAL_DIR/result.json"
"""


def run(tmp_path: Path, command: list[str]) -> sqlite3.Connection:
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(command=json.dumps(command)))
    (tmp_path / "w.py").write_text(PYTHON_WORKLOAD)
    (tmp_path / "w.sh").write_text(SHELL_WORKLOAD)
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")


def test_every_reported_point_is_recorded_once_as_the_trials_learning_curve(
    tmp_path: Path,
) -> None:
    db = run(tmp_path, [sys.executable, "w.py"])

    curves: dict[int, list[tuple[int, int, float]]] = {}
    for x, attempt, step, metrics in db.execute(
        "SELECT json_extract(t.params, '$.x'), p.attempt, p.step, p.metrics FROM progress p"
        " JOIN trials t ON t.id = p.trial_id ORDER BY p.trial_id, p.attempt, p.step"
    ):
        curves.setdefault(x, []).append((attempt, step, json.loads(metrics)["loss"]))
    assert curves == {x: [(1, s, x / s) for s in range(1, 6)] for x in (1, 2, 3)}
    # The same through the record's API.
    store = dse.Store(tmp_path / ".dse" / "dse.sqlite")
    try:
        (row,) = [r for (r,) in db.execute("SELECT id FROM trials WHERE number = 1")]
        points = store.reads.progress(row)
    finally:
        store.close()
    assert [p.step for p in points] == [1, 2, 3, 4, 5]
    assert all(p.at > 0 for p in points)
    # dse show says how many points and the last one, in words and in JSON.
    shown = subprocess.run([sys.executable, "-m", "dse", "show", "curves:2", "--workspace",
                            ".dse"], cwd=tmp_path, capture_output=True, text=True, check=True)
    (line,) = [s for s in shown.stdout.splitlines() if s.strip().startswith("progress")]
    assert "5 points; last: step 5 of attempt 1 (loss=" in line
    as_json = subprocess.run([sys.executable, "-m", "dse", "show", "curves:2", "--json",
                              "--workspace", ".dse"], cwd=tmp_path, capture_output=True,
                             text=True, check=True)
    record = json.loads(as_json.stdout)
    progress = record["ended"]["progress"]
    assert progress["points"] == 5
    assert progress["last"]["step"] == 5
    x = record["run"]["params"]["x"]
    assert progress["last"]["metrics"] == {"loss": pytest.approx(x / 5)}


WAITING_WORKLOAD = """\
import sqlite3, time, dse.trial
dse.trial.report_progress(1, {"loss": 1.0})
directory = dse.trial.trial_dir()
record = directory.parent.parent.parent / "dse.sqlite"  # <workspace>/<campaign>/run-N/<n>
number = int(directory.name)
seen, deadline = 0, time.monotonic() + 30
while not seen and time.monotonic() < deadline:
    time.sleep(0.05)
    db = sqlite3.connect(f"file:{record}?mode=ro", uri=True)
    (seen,) = db.execute("SELECT COUNT(*) FROM progress p JOIN trials t ON t.id = p.trial_id"
                         " WHERE t.number = ?", (number,)).fetchone()
    db.close()
dse.trial.report({"loss": 1.0, "seen": float(seen)})
"""


def test_a_point_is_in_the_record_while_its_trial_still_runs(tmp_path: Path) -> None:
    (tmp_path / "wait.py").write_text(WAITING_WORKLOAD)
    db = run(tmp_path, [sys.executable, "wait.py"])

    # Each trial waited for its own first point to be recorded before it ended.
    seen = [json.loads(m)["seen"] for (m,) in db.execute("SELECT metrics FROM trials")]
    assert seen == [1.0, 1.0, 1.0]


def test_any_program_appends_lines_a_half_written_one_waits_and_bad_ones_are_noted(
    tmp_path: Path,
) -> None:
    db = run(tmp_path, ["sh", "w.sh"])

    rows = db.execute("SELECT trial_id, attempt, step, metrics FROM progress"
                      " ORDER BY trial_id, step").fetchall()
    assert [(a, s, json.loads(m)) for _, a, s, m in rows] == [
        (1, 1, {"loss": 9}), (1, 2, {"loss": 8})] * 3
    noted = [json.loads(d) for (d,) in db.execute(
        "SELECT data FROM events WHERE kind = 'progress_malformed'")]
    assert sum(n["lines"] for n in noted) == 2 * 3  # 'not json' and the string loss, each trial
    statuses = {s for (s,) in db.execute("SELECT status FROM trials")}
    assert statuses == {"completed"}  # a bad progress line is no failure of the trial


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_progress_file_that_is_not_a_regular_file_is_never_followed_nor_waited_on(
    tmp_path: Path, kind: str
) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"step": 1, "metrics": {"loss": 1}}\n')
    make = (f"ln -s {secret} \"$DSE_PROGRESS_FILE\"" if kind == "symlink"
            else "mkfifo \"$DSE_PROGRESS_FILE\"")
    (tmp_path / "bad.sh").write_text(
        f"{make}\nsleep 0.3\n"
        "echo '{\"complete\": true, \"metrics\": {\"loss\": 1}}'"
        " > \"$DSE_TRIAL_DIR/result.json\"\n")
    db = run(tmp_path, ["sh", "bad.sh"])

    assert db.execute("SELECT COUNT(*) FROM progress").fetchone() == (0,)
    refused = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'progress_refused'")
    assert refused.fetchone()[0] == 3
    assert {s for (s,) in db.execute("SELECT status FROM trials")} == {"completed"}


def test_report_progress_writes_one_line_per_call_and_nothing_on_other_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSE_TRIAL_DIR", str(tmp_path))
    monkeypatch.setenv("DSE_ATTEMPT", "2")
    path = dse.trial.report_progress(7, {"loss": 0.5})
    dse.trial.report_progress(8, {"loss": float("nan")})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(d["step"], d["attempt"]) for d in lines] == [(7, 2), (8, 2)]
    assert lines[1]["metrics"]["loss"] != lines[1]["metrics"]["loss"]  # NaN kept as NaN
    with pytest.raises(ValueError, match="step must be a whole number"):
        dse.trial.report_progress(-1, {"loss": 1.0})
    monkeypatch.setenv("DSE_RANK", "1")
    dse.trial.report_progress(9, {"loss": 0.1})
    assert len(path.read_text().splitlines()) == 2
