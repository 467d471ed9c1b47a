"""Trial files without a shared filesystem, without a cluster: what a node stages, sends while
the trial runs and brings back at its end (``dse_ray._files``), and what the controller's copy
becomes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse.trial import CHECKPOINT_MARK
from dse_ray._files import MARK, Mirror, NodeFiles, node_root, outgoing


def controller_dir(tmp_path: Path) -> Path:
    """A controller's trial directory as an earlier attempt left it."""
    trial = tmp_path / "ctl" / "trial-3"
    (trial / "checkpoint").mkdir(parents=True)
    (trial / "params.json").write_text('{"lr": 0.1}')
    (trial / "progress.jsonl").write_text('{"step": 1, "value": 1.0}\n')
    (trial / "checkpoint" / "state").write_text("step 1")
    (trial / "attempt-1").mkdir()
    (trial / "attempt-1" / "stdout.log").write_text("not sent")
    return trial


def test_the_mark_is_dses_checkpoint_mark() -> None:
    assert MARK == CHECKPOINT_MARK


def test_a_node_root_keeps_nodes_and_campaigns_apart(tmp_path: Path) -> None:
    a = node_root("/scratch", "w1", tmp_path / "one" / "trial-1")
    assert node_root("/scratch", "w2", tmp_path / "one" / "trial-1") != a
    assert node_root("/scratch", "w1", tmp_path / "two" / "trial-1") != a
    assert a.startswith("/scratch/w1/")
    assert a.endswith("-trial-1")
    assert "/../" not in node_root("/scratch", "../x", tmp_path / "t")


def test_staging_gives_the_node_the_params_the_curve_and_the_checkpoint(tmp_path: Path) -> None:
    trial = controller_dir(tmp_path)
    sent = outgoing(trial)
    assert set(sent) == {"params.json", "progress.jsonl", "checkpoint/state"}
    node = NodeFiles(str(tmp_path / "node" / "t"), attempt=2, node_rank=0, limit=1 << 20)
    # What an earlier attempt left on this node is not the trial's any more.
    (node.root / "checkpoint").mkdir(parents=True)
    (node.root / "checkpoint" / "stale").write_text("old")
    (node.root / "result.json").write_text("{}")
    node.stage(sent)
    assert (node.root / "params.json").read_text() == '{"lr": 0.1}'
    assert (node.root / "checkpoint" / "state").read_text() == "step 1"
    assert not (node.root / "checkpoint" / "stale").exists()
    assert not (node.root / "result.json").exists()
    assert (node.root / "attempt-2").is_dir()
    # Nothing was written on the node yet: nothing comes back.
    assert node.since(len(sent["progress.jsonl"]))["files"] == {}
    back = node.collect()
    assert (back["files"], back["left"], back["progress"]) == ({}, {}, b"")


def test_what_the_attempt_writes_comes_back_and_what_is_too_large_stays(tmp_path: Path) -> None:
    trial = controller_dir(tmp_path)
    node = NodeFiles(str(tmp_path / "node" / "t"), attempt=2, node_rank=0, limit=100)
    node.stage(outgoing(trial))
    mirror = Mirror(trial)
    root = node.root
    with open(root / "progress.jsonl", "a") as out:
        out.write('{"step": 2, "value": 0.5}\n')
    (root / "checkpoint" / "state").write_text("step 2")
    (root / "checkpoint" / MARK).write_text("2")
    mirror.take(node.since(mirror.progress_length()), "w1")
    assert (trial / "progress.jsonl").read_text().splitlines()[-1] == '{"step": 2, "value": 0.5}'
    assert (trial / "checkpoint" / "state").read_text() == "step 2"
    assert (trial / "checkpoint" / MARK).exists()
    # Asked again with nothing new: nothing new (and an answer taken twice adds nothing).
    again = node.since(mirror.progress_length())
    assert again["files"] == {}
    assert again["progress"] == b""
    # The result is over the limit too, but comes back whatever the limit: dse reads it.
    result = {"metrics": {"value": 0.5}, "environment": {"notes": "x" * 200}}
    (root / "result.json").write_text(json.dumps(result))
    (root / "model.bin").write_bytes(b"x" * 500)
    (root / "attempt-2" / "stdout.log").write_text("trained\n")
    back = node.collect()
    # Whole, what was sent while it ran too: an answer may have been lost with a controller.
    assert set(back["files"]) == {"result.json", "attempt-2/stdout.log", "checkpoint/state",
                                  f"checkpoint/{MARK}"}
    assert back["left"] == {"model.bin": 500}
    mirror.take(back, "w1")
    mirror.take(back, "w1")
    assert json.loads((trial / "result.json").read_text()) == result
    assert (trial / "attempt-2" / "stdout.log").read_text() == "trained\n"
    assert not (trial / "model.bin").exists()
    assert len((trial / "progress.jsonl").read_text().splitlines()) == 2
    assert mirror.left_files() == {"node": "w1", "dir": str(root), "files": {"model.bin": 500}}


def test_what_an_earlier_attempt_left_on_the_node_is_not_this_ones(tmp_path: Path) -> None:
    trial = controller_dir(tmp_path)
    node = NodeFiles(str(tmp_path / "node" / "t"), attempt=2, node_rank=0, limit=100)
    node.root.mkdir(parents=True)
    (node.root / "model.bin").write_bytes(b"x" * 500)  # attempt 1's, on this node
    (node.root / "notes.txt").write_text("attempt 1")
    node.stage(outgoing(trial))
    back = node.collect()
    assert (back["files"], back["left"]) == ({}, {})
    (node.root / "notes.txt").write_text("attempt 2")  # written again: this attempt's
    assert node.collect()["files"] == {"notes.txt": b"attempt 2"}


def test_a_path_out_of_the_trial_directory_is_refused(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "trial")
    with pytest.raises(ValueError, match="outside the trial directory"):
        mirror.take({"files": {"../escaped": b"x"}})
    assert not (tmp_path / "escaped").exists()


def test_another_nodes_rank_sends_only_its_attempts_files(tmp_path: Path) -> None:
    node = NodeFiles(str(tmp_path / "node1" / "t"), attempt=1, node_rank=1, limit=1 << 20)
    node.stage({"params.json": b"{}"})
    (node.root / "attempt-1" / "stdout.1.log").write_text("rank 1\n")
    (node.root / "result.json").write_text("{}")  # rank 0's to write: not this node's
    (node.root / "progress.jsonl").write_text("{}\n")
    back = node.collect()
    assert set(back["files"]) == {"attempt-1/stdout.1.log"}
    assert back["progress"] == b""
    assert node.since(0) == {"progress": b"", "from": 0, "files": {}, "appends": {}}


def test_a_log_comes_back_as_it_grows(tmp_path: Path) -> None:
    trial = controller_dir(tmp_path)
    node = NodeFiles(str(tmp_path / "node" / "t"), attempt=2, node_rank=0, limit=1 << 20)
    node.stage(outgoing(trial))
    mirror = Mirror(trial)
    log = node.root / "attempt-2" / "stdout.log"
    log.write_text("one\n")
    first = node.since(mirror.progress_length())
    assert first["files"] == {"attempt-2/stdout.log": b"one\n"}
    mirror.take(first)
    with open(log, "a") as out:
        out.write("two\n")
    second = node.since(mirror.progress_length())
    assert second["appends"] == {"attempt-2/stdout.log": [4, b"two\n"]}
    assert second["files"] == {}
    mirror.take(second)
    mirror.take(second)  # an answer written twice writes the same bytes at the same place
    assert (trial / "attempt-2" / "stdout.log").read_text() == "one\ntwo\n"
    # A heartbeat the trial rewrites comes back whole each time it changed.
    (node.root / "heartbeat").write_text("1")
    mirror.take(node.since(mirror.progress_length()))
    assert (trial / "heartbeat").read_text() == "1"


def test_a_controllers_first_ask_gets_what_was_sent_to_the_one_before(tmp_path: Path) -> None:
    trial = controller_dir(tmp_path)
    node = NodeFiles(str(tmp_path / "node" / "t"), attempt=2, node_rank=0, limit=1 << 20)
    node.stage(outgoing(trial))
    (node.root / "checkpoint" / "state").write_text("step 2")
    lost = node.since(0)  # answered to a controller killed before it wrote it
    assert lost["files"] == {"checkpoint/state": b"step 2"}
    assert node.since(0)["files"] == {}
    assert node.since(0, fresh=True)["files"] == {"checkpoint/state": b"step 2"}
