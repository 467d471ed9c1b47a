"""``dse.stderr_tail``: a failed command's last words for its trial's message, read from a file
the trial wrote (so not trusted: real files, symlinks and FIFOs here)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

import dse

if TYPE_CHECKING:
    from pathlib import Path


def stderr_of(tmp_path: Path, code: str) -> Path:
    """The stderr of a real Python process running *code*, as a file."""
    path = tmp_path / "stderr.log"
    with path.open("wb") as err:
        subprocess.run([sys.executable, "-c", code], stderr=err, check=False, timeout=120)
    return path


def test_a_python_traceback_gives_its_exception(tmp_path):
    path = stderr_of(tmp_path, "def f():\n    return train()\nf()\n")
    assert "Traceback" in path.read_text()
    assert dse.stderr_tail(path) == "NameError: name 'train' is not defined"


def test_a_chained_traceback_gives_the_last_exception_with_its_notes(tmp_path):
    path = stderr_of(tmp_path, (
        "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
        "    err = ValueError('bad lr\\nmust be > 0')\n    err.add_note('lr = -1')\n"
        "    raise err from e\n"))
    assert dse.stderr_tail(path) == "ValueError: bad lr | must be > 0 | lr = -1"


def test_other_output_gives_its_last_non_blank_lines(tmp_path):
    path = tmp_path / "stderr.log"
    path.write_text("".join(f"line {i}\n\n   \n" for i in range(1, 21)))
    assert dse.stderr_tail(path) == "line 16 | line 17 | line 18 | line 19 | line 20"
    assert dse.stderr_tail(path, lines=1) == "line 20"


def test_a_long_message_keeps_its_end(tmp_path):
    path = tmp_path / "stderr.log"
    path.write_text("x" * 2000 + " the end\n")
    said = dse.stderr_tail(path)
    assert said is not None
    assert len(said) == 500
    assert said.startswith("...")
    assert said.endswith("x the end")


def test_bytes_that_are_not_text_are_replaced(tmp_path):
    path = tmp_path / "stderr.log"
    path.write_bytes(b"caf\xe9 \xff\x00 failed\n")
    assert dse.stderr_tail(path) == "caf\ufffd \ufffd\ufffd failed"


def test_a_huge_log_is_read_only_at_its_end(tmp_path):
    # 8 MiB of noise, then the error: found, and the first line read (cut by the cap) dropped.
    path = tmp_path / "stderr.log"
    with path.open("wb") as handle:
        block = b"noise " * 1000 + b"\n"
        for _ in range(8 * 1024 * 1024 // len(block)):
            handle.write(block)
        handle.write(b"x" * 20000 + b"\nRuntimeError: CUDA out of memory\n")
    assert dse.stderr_tail(path) == "RuntimeError: CUDA out of memory"


def test_nothing_said_is_none(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    blank = tmp_path / "blank.log"
    blank.write_text("\n  \n\t\n")
    assert dse.stderr_tail(empty) is None
    assert dse.stderr_tail(blank) is None
    assert dse.stderr_tail(tmp_path / "missing.log") is None
    assert dse.stderr_tail(tmp_path) is None  # a directory


def test_a_symlink_is_not_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("the controller's secret\n")
    link = tmp_path / "stderr.log"
    link.symlink_to(secret)
    assert dse.stderr_tail(link) is None


def test_a_fifo_is_not_read_and_never_blocks(tmp_path):
    fifo = tmp_path / "stderr.log"
    os.mkfifo(fifo)
    said: list[str | None] = []
    reader = threading.Thread(target=lambda: said.append(dse.stderr_tail(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert not reader.is_alive(), "stderr_tail blocked on a FIFO"
    assert said == [None]
