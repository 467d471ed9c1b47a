"""`dse dashboard`'s JSON API over HTTP, on both records (the workspace's SQLite file and a
PostgreSQL database): the runs, a page of trials, a trial's record, a run's figures; the token
asked beyond loopback; one line and a non-zero exit for a record that is not there."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from support.cli import run_dse, write_plugin
from support.dashboard import dashboard
from support.probe import probe_campaign

if TYPE_CHECKING:
    from pathlib import Path


def get(url: str, path: str, cookie: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url.split("?")[0].rstrip("/") + path)
    if cookie:
        request.add_header("Cookie", cookie)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_api_reads_either_record(tmp_path: Path, record: str | None) -> None:
    write_plugin(tmp_path)
    (tmp_path / "campaign.toml").write_text(probe_campaign("{x = 4}, {x = 1}, {x = 7}"))
    extra = ["--record", record] if record else []
    done = run_dse(tmp_path, "run", "campaign.toml", *extra)
    assert done.returncode == 0, done.stderr
    board, url = dashboard(tmp_path, *([record] if record else []))
    status, body = get(url, "/api/runs")
    assert status == 200
    (run,) = body["runs"]
    assert (run["name"], run["status"], run["trials"], run["completed"]) == (
        "demo", "completed", 3, 3)
    status, page = get(url, "/api/runs/1/trials?sort=param:x&desc=1")
    assert status == 200
    assert [t["params"]["x"] for t in page["trials"]] == [7, 4, 1]
    status, trial = get(url, "/api/runs/1/trials/2")
    assert status == 200
    assert trial["record"]["trial"]["id"] == "demo-1-2"
    status, figures = get(url, "/api/runs/1/figures")
    assert status == 200
    assert len(figures["points"]) == 3
    status, error = get(url, "/api/runs/1/trials?sort=nope")
    assert status == 400
    assert "cannot sort trials by 'nope'" in error
    status, _ = get(url, "/api/runs/1/trials/99")
    assert status == 404
    board.terminate()
    board.wait(timeout=30)


def test_beyond_loopback_the_page_asks_its_token(tmp_path: Path) -> None:
    write_plugin(tmp_path)
    (tmp_path / "campaign.toml").write_text(probe_campaign())
    assert run_dse(tmp_path, "run", "campaign.toml").returncode == 0
    board, url = dashboard(tmp_path, "--host", "0.0.0.0")
    token = url.split("token=")[1]
    local = url.replace("0.0.0.0", "127.0.0.1")
    assert get(local, "/api/runs")[0] == 403
    assert get(local, "/api/runs", cookie="dse_dashboard_token=wrong")[0] == 403
    assert get(local, "/api/runs", cookie=f"dse_dashboard_token={token}")[0] == 200
    with urllib.request.urlopen(local, timeout=30) as resp:
        assert resp.status == 200
        assert f"dse_dashboard_token={token}" in resp.headers["Set-Cookie"]
    board.terminate()
    board.wait(timeout=30)


def test_no_record_is_one_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    done = run_dse(tmp_path, "dashboard", str(tmp_path / "nowhere"))
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1, done.stderr
    assert "no dse record here" in done.stderr


def test_the_vendored_charting_library_is_the_one_its_note_names() -> None:
    import hashlib
    import re
    from importlib import resources

    static = resources.files("dse.dashboard") / "static"
    note = (static / "VENDORED.md").read_text(encoding="utf-8")
    digest = re.search(r"sha256 `([0-9a-f]{64})`", note)
    assert digest is not None, note
    assert hashlib.sha256((static / "echarts.min.js").read_bytes()).hexdigest() == digest[1]
    assert "Apache License" in (static / "echarts-LICENSE.txt").read_text(encoding="utf-8")
    # The page loads it from the package, never from the network.
    page = (static / "index.html").read_text(encoding="utf-8")
    assert re.findall(r'src="([^"]+)"', page) == ["echarts.min.js", "app.js"]


def test_the_figures_of_a_run_larger_than_they_read_are_drawn_from_a_sample(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from dse.dashboard import _data
    from dse.record._open import reader

    write_plugin(tmp_path)
    points = ", ".join(f"{{x = {x}}}" for x in range(30))
    (tmp_path / "campaign.toml").write_text(probe_campaign(points, high=40))
    assert run_dse(tmp_path, "run", "campaign.toml").returncode == 0
    store = reader(tmp_path / ".dse", None)
    try:
        whole = _data.figures(store, 1)
        assert (whole["trials"], whole["sampled"], len(whole["points"])) == (30, None, 30)
        monkeypatch.setattr(_data, "FIGURE_TRIALS", 10)
        part = _data.figures(store, 1)
    finally:
        store.close()
    assert part["trials"] == 30
    assert 5 <= part["sampled"] <= 12
    best = min(whole["points"], key=lambda p: p["score"])
    assert best["number"] in {p["number"] for p in part["points"]}  # the best is kept
    assert {p["number"] for p in part["points"]} < {p["number"] for p in whole["points"]}
    # A sample's attempts are not the run's: no spend so far, rather than a wrong one.
    assert all(p["spent"] is not None for p in whole["points"])
    assert all(p["spent"] is None for p in part["points"])


def test_each_connection_closes_the_reader_it_opened(tmp_path: Path) -> None:
    import os
    import time

    write_plugin(tmp_path)
    (tmp_path / "campaign.toml").write_text(probe_campaign())
    assert run_dse(tmp_path, "run", "campaign.toml").returncode == 0
    board, url = dashboard(tmp_path)
    record = str((tmp_path / ".dse" / "dse.sqlite").resolve())

    def open_record() -> int:
        fds = f"/proc/{board.pid}/fd"
        return sum(1 for fd in os.listdir(fds)
                   if os.path.realpath(os.path.join(fds, fd)) == record)

    # SQLite keeps the descriptor of a connection closed while another of the process holds
    # a lock on the file (the watcher's, in WAL mode), and reuses it for the next one opened:
    # the file stays open at most once per connection alive at once (the watcher, a request's,
    # the previous request's thread still ending, and on a loaded machine the one before
    # it), however many came before.
    counts = []
    for _ in range(3):
        for _ in range(30):  # each request a connection of its own (urllib closes it)
            assert get(url, "/api/runs/1/trials")[0] == 200
        deadline = time.monotonic() + 30
        while open_record() > 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        counts.append(open_record())
    assert max(counts) <= 4, counts  # not one per connection: 19 after 30 before the fix
    board.terminate()
    board.wait(timeout=30)
