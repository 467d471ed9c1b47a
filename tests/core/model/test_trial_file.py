"""The reader of the files a trial hands the controller: a regular file inside the trial
directory, at most a cap long, read without following a symlink or waiting on a FIFO."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

import dse
from dse.model._trialfile import (
    MAX_TRIAL_FILE_BYTES,
    UnsafeTrialFile,
    read_trial_file,
    write_trial_file,
)
from dse.plugins._environment import read_result

GOOD = b'{"complete": true, "metrics": {"value": 1}}'


@pytest.fixture
def trial_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs" / "000001"
    path.mkdir(parents=True)
    return path


def refused(trial_dir: Path, name: str = "result.json", **kwargs: int) -> UnsafeTrialFile:
    with pytest.raises(UnsafeTrialFile) as info:
        read_trial_file(trial_dir, name, **kwargs)
    return info.value


def test_a_regular_file_is_read_whole(trial_dir: Path) -> None:
    (trial_dir / "result.json").write_bytes(GOOD)

    assert read_trial_file(trial_dir, "result.json") == GOOD


def test_a_missing_file_or_directory_is_file_not_found(trial_dir: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_trial_file(trial_dir, "result.json")
    with pytest.raises(FileNotFoundError):
        read_trial_file(trial_dir / "gone", "result.json")


def test_a_symlink_to_a_file_outside_is_never_followed(trial_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes(GOOD)
    (trial_dir / "result.json").symlink_to(outside)

    exc = refused(trial_dir)

    assert exc.failure is dse.FailureClass.RESULT_SYMLINK
    assert str(exc) == (
        f"result.json is a symlink (to {str(outside)!r}), not a regular file in the trial"
        " directory"
    )


def test_a_symlink_inside_the_trial_dir_and_a_dangling_one_are_refused_too(
    trial_dir: Path,
) -> None:
    (trial_dir / "real.json").write_bytes(GOOD)
    (trial_dir / "result.json").symlink_to("real.json")
    (trial_dir / "dangling.json").symlink_to("nowhere.json")

    assert refused(trial_dir).failure is dse.FailureClass.RESULT_SYMLINK
    assert refused(trial_dir, "dangling.json").failure is dse.FailureClass.RESULT_SYMLINK


def test_a_trial_dir_replaced_by_a_symlink_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "result.json").write_bytes(GOOD)
    (tmp_path / "000001").symlink_to(elsewhere)

    exc = refused(tmp_path / "000001")

    assert exc.failure is dse.FailureClass.RESULT_SYMLINK
    assert "the trial directory" in str(exc)


def test_a_fifo_is_refused_without_waiting_for_a_writer(trial_dir: Path) -> None:
    os.mkfifo(trial_dir / "result.json")

    exc = refused(trial_dir)  # no writer ever comes: opening it blocking would hang here

    assert exc.failure is dse.FailureClass.RESULT_NOT_REGULAR
    assert str(exc) == "result.json is a FIFO, not a regular file"


def test_a_device_is_refused_without_reading_it(trial_dir: Path) -> None:
    try:
        os.mknod(trial_dir / "result.json", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")

    exc = refused(trial_dir)  # /dev/zero: reading it would never end

    assert exc.failure is dse.FailureClass.RESULT_NOT_REGULAR
    assert str(exc) == "result.json is a character device, not a regular file"


def test_a_socket_and_a_directory_are_refused(trial_dir: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(trial_dir / "result.json"))
        (trial_dir / "dir.json").mkdir()

        assert str(refused(trial_dir)) == "result.json is a socket, not a regular file"
        assert refused(trial_dir, "dir.json").failure is dse.FailureClass.RESULT_NOT_REGULAR


def test_a_file_over_the_cap_is_refused_and_one_at_the_cap_is_read(trial_dir: Path) -> None:
    (trial_dir / "at.json").write_bytes(b"x" * 10)
    (trial_dir / "over.json").write_bytes(b"x" * 11)

    assert read_trial_file(trial_dir, "at.json", limit=10) == b"x" * 10
    exc = refused(trial_dir, "over.json", limit=10)
    assert exc.failure is dse.FailureClass.RESULT_TOO_LARGE
    assert str(exc) == "over.json is larger than 10 bytes; dse reads at most that much"


def test_the_default_cap_is_16_mib(trial_dir: Path) -> None:
    assert MAX_TRIAL_FILE_BYTES == 16 * 1024 * 1024
    with (trial_dir / "result.json").open("wb") as handle:
        handle.truncate(MAX_TRIAL_FILE_BYTES + 1)  # sparse: no 16 MiB written

    assert refused(trial_dir).failure is dse.FailureClass.RESULT_TOO_LARGE


def test_read_result_turns_each_refusal_into_its_failure_class(
    trial_dir: Path, tmp_path: Path
) -> None:
    path = trial_dir / "result.json"
    path.symlink_to(tmp_path)
    symlink = read_result(path)
    path.unlink()
    os.mkfifo(path)
    fifo = read_result(path)

    assert isinstance(symlink, dse.Evaluation)
    assert symlink.failure is dse.FailureClass.RESULT_SYMLINK
    assert isinstance(fifo, dse.Evaluation)
    assert (fifo.failure, fifo.message) == (
        dse.FailureClass.RESULT_NOT_REGULAR, "result.json is a FIFO, not a regular file")


def test_write_trial_file_replaces_a_planted_symlink_without_writing_through_it(
    trial_dir: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    (trial_dir / "params.json").symlink_to(victim)

    write_trial_file(trial_dir, "params.json", b'{"x": 1}')

    assert victim.read_text() == "untouched\n"
    assert not (trial_dir / "params.json").is_symlink()
    assert (trial_dir / "params.json").read_bytes() == b'{"x": 1}'
    assert sorted(p.name for p in trial_dir.iterdir()) == ["params.json"]

