"""`dse record copy SRC DST`: a workspace's SQLite record into PostgreSQL and back (a real
server), checked table by table; the round trip exports what the original did; a copy
stopped part way goes on; a copy into a record that holds other runs, or of a record a live
controller writes, is refused in one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from dse.record._open import reader, writer
from dse.record.sql._copy import ROWS, SUMMARIES
from support.cli import run_dse, write_plugin
from support.stopping import PLAN, build

if TYPE_CHECKING:
    from pathlib import Path

CAMPAIGN = """
[campaign]
name = "demo"
agent = "list"
backend = "probe"
max_parallelism = 4
max_trials = {trials}
poll_interval = "1ms"

[agent.list]
points = [{points}]

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 1000000 }}
y = {{ type = "float", low = 0.0, high = 1.0 }}
"""


def recorded(project: Path, trials: int) -> None:
    write_plugin(project)
    points = ", ".join(f"{{x = {i * 7919 % 1000003}, y = {i / (trials + 50):.6f}}}"
                       for i in range(trials + 20))  # more than the trials: a rerun has some
    (project / "campaign.toml").write_text(CAMPAIGN.format(trials=trials, points=points))
    done = run_dse(project, "run", "campaign.toml", timeout=300)
    assert done.returncode == 0, done.stderr
    flagged = run_dse(project, "invalidate", "--trial", "demo:2", "--reason", "a bad node")
    assert flagged.returncode == 0, flagged.stderr
    build(project / ".dse")  # a run with learning curves and a stopping rule's decisions


def export(project: Path, *record: str) -> str:
    out = project / "out.jsonl"
    done = run_dse(project, "export", "demo", "--format", "jsonl", "-o", str(out), *record)
    assert done.returncode == 0, done.stderr
    return out.read_text()


def checked(out: str) -> dict[str, int]:
    """The tables `dse record copy` checked (table -> rows), every one found identical."""
    found = re.findall(r"^(\w+): ([0-9,]+) rows, (.*)$", out, re.MULTILINE)
    assert found, out
    assert {said for *_, said in found} == {"identical"}, out
    return {table: int(rows.replace(",", "")) for table, rows, _ in found}


def test_a_record_goes_to_postgres_and_back_and_exports_the_same(
    tmp_path: Path, postgres_url: str
) -> None:
    recorded(tmp_path, 300)
    before = export(tmp_path)
    there = run_dse(tmp_path, "record", "copy", ".dse", postgres_url, timeout=300)
    assert there.returncode == 0, there.stderr
    tables = checked(there.stdout)
    assert set(tables) == {t for t, _ in ROWS} | set(SUMMARIES)
    assert tables["trials"] == 300 + len(PLAN)  # the campaign's, and the stopping run's
    assert tables["invalidations"] == 1
    assert min(tables["progress"], tables["decisions"], tables["stop_totals"]) > 0
    assert "every table identical" in there.stderr
    assert export(tmp_path, "--record", postgres_url) == before
    # Back, where the record was (its trial directories where they are).
    (tmp_path / ".dse" / "dse.sqlite").rename(tmp_path / "original.sqlite")
    for left in (tmp_path / ".dse").glob("dse.sqlite-*"):
        left.unlink()
    back = run_dse(tmp_path, "record", "copy", postgres_url, ".dse", timeout=300)
    assert back.returncode == 0, back.stderr
    assert checked(back.stdout) == tables
    assert export(tmp_path) == before
    # The copy is a record like any other: a run goes on in it, past the copied ids.
    again = run_dse(tmp_path, "run", "campaign.toml", "--set", "max_trials=310", "--record",
                    postgres_url, timeout=300)
    assert again.returncode == 0, again.stderr
    store = reader(tmp_path / ".dse", postgres_url)
    try:
        ((copied,),) = store.reads.rows("SELECT MAX(id) FROM trials WHERE campaign_id <"
                                        " (SELECT MAX(id) FROM campaigns)")
        ((trials, reused, ran, first),) = store.reads.rows(
            "SELECT COUNT(*), COUNT(cache_of), COUNT(*) - COUNT(cache_of), MIN(id) FROM trials"
            " WHERE campaign_id = (SELECT MAX(id) FROM campaigns)")
    finally:
        store.close()
    # The new run reuses the copied results (but the invalidated one, run again) and runs ten
    # more, on ids past the copy's.
    assert (trials, reused, ran) == (310, 299, 11)
    assert first > copied


def test_a_copy_stopped_part_way_goes_on(tmp_path: Path, postgres_url: str) -> None:
    recorded(tmp_path, 200)
    # Pages of 7 rows: the copy is killed in the middle of a table.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    slow = (f"import dse.record.sql._copy as c; c.PAGE = 7; import dse.cli._cli as m;"
            f" import sys; sys.exit(m.main(['record', 'copy', '.dse', {postgres_url!r}]))")
    proc = subprocess.Popen([sys.executable, "-c", slow], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = writer(tmp_path / "elsewhere", postgres_url)
    try:
        deadline = time.monotonic() + 120
        while not store.reads.rows("SELECT COUNT(*) FROM trials")[0][0]:
            assert time.monotonic() < deadline, "the copy never reached the trials"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.01)
    finally:
        store.close()
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    resumed = run_dse(tmp_path, "record", "copy", ".dse", postgres_url, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert checked(resumed.stdout)["trials"] == 200 + len(PLAN)
    assert export(tmp_path, "--record", postgres_url) == export(tmp_path)


def test_a_copy_into_a_record_of_other_runs_is_refused(tmp_path: Path, postgres_url: str) -> None:
    recorded(tmp_path, 20)
    other = tmp_path / "other"
    other.mkdir()
    recorded(other, 10)
    first = run_dse(other, "record", "copy", ".dse", postgres_url)
    assert first.returncode == 0, first.stderr
    refused = run_dse(tmp_path, "record", "copy", ".dse", postgres_url)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"dse: error: {postgres_url}: the target is a copy of another record")
    same = run_dse(tmp_path, "record", "copy", ".dse", ".dse")
    assert same.returncode == 2
    assert "the source and the target are one record" in same.stderr
