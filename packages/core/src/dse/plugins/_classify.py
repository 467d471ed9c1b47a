"""From a backend's raw end state to a trial outcome (DESIGN.md, "Outcome"), and the words a
failed command left at the end of its stderr (:func:`stderr_tail`, for backends)."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from dse.model._types import FailureClass, JobState, JobStatus, TrialStatus

if TYPE_CHECKING:
    from pathlib import Path

_RAW: dict[JobState, tuple[TrialStatus, FailureClass | None]] = {
    JobState.FAILED: (TrialStatus.FAILED, FailureClass.NONZERO_EXIT),
    JobState.OUT_OF_MEMORY: (TrialStatus.FAILED, FailureClass.OUT_OF_MEMORY),
    JobState.TIMEOUT: (TrialStatus.BUDGET_EXHAUSTED, FailureClass.TIME_LIMIT),
    JobState.KILLED: (TrialStatus.INTERRUPTED, FailureClass.KILLED),
    JobState.CANCELLED: (TrialStatus.CANCELLED, None),
    JobState.PREEMPTED: (TrialStatus.INTERRUPTED, FailureClass.PREEMPTED),
    JobState.NODE_FAIL: (TrialStatus.INTERRUPTED, FailureClass.NODE_FAILURE),
    JobState.BOOT_FAIL: (TrialStatus.INTERRUPTED, FailureClass.BOOT_FAILURE),
    JobState.LOST: (TrialStatus.INTERRUPTED, FailureClass.JOB_VANISHED),
    JobState.LAUNCH_ERROR: (TrialStatus.INTERRUPTED, FailureClass.LAUNCH_ERROR),
    JobState.INVALID: (TrialStatus.FAILED, FailureClass.INVALID_JOB),
}


def classify_end(status: JobStatus) -> tuple[TrialStatus, FailureClass | None, str | None]:
    """Outcome of an attempt that did **not** succeed, with its class and a message.

    A successful exit is not classified here: the environment evaluates its result.
    """
    outcome, failure = _RAW[status.state]
    message = status.reason
    if status.state is JobState.FAILED and message is None:
        message = f"exit code {status.exit_code}"
    elif status.state is JobState.KILLED and message is None and status.signal is not None:
        message = f"killed by signal {status.signal}"
    return outcome, failure, message


STDERR_TAIL_BYTES = 16 * 1024
"""How much of the end of a stderr file :func:`stderr_tail` reads (16 KiB): a failed
command's last words are at the end, and a log of gigabytes must not cost more."""

STDERR_TAIL_LINES = 5
"""The most lines :func:`stderr_tail` keeps."""

STDERR_TAIL_CHARS = 500
"""The longest message :func:`stderr_tail` returns (the end of it is kept)."""

_TRACEBACK = "Traceback (most recent call last):"


def stderr_tail(path: Path, *, lines: int = STDERR_TAIL_LINES,
                chars: int = STDERR_TAIL_CHARS) -> str | None:
    """The last words of a failed command's stderr file *path*, for its trial's message: the
    last *lines* non-blank lines (stripped, joined by `` | ``), at most *chars* characters
    (longer, its end is kept after ``...``); of a Python traceback, the exception it ends
    with (``NameError: name 'train' is not defined``), not the frames above it.

    The file is the trial's, so it is not trusted: only a regular file is read (a symlink, a
    FIFO or a device is not, and the read never blocks), only its last
    :data:`STDERR_TAIL_BYTES`, and bytes that are not UTF-8 are replaced. ``None`` when it is
    missing, empty (blank lines only), or not a regular file: the caller keeps its own
    message (``exit code 1``).
    """
    data = _read_end(path, STDERR_TAIL_BYTES)
    if not data:
        return None
    text = data.decode("utf-8", errors="replace").replace("\0", "\N{REPLACEMENT CHARACTER}")
    rows = text.splitlines()
    if len(data) == STDERR_TAIL_BYTES and rows:
        rows = rows[1:]  # read from inside a line: its start is not there
    rows = [r.rstrip() for r in rows]
    start = _exception_start(rows)
    kept = [r.strip() for r in rows[start:] if r.strip()][-max(lines, 1):]
    if not kept:
        return None
    message = " | ".join(kept)
    if len(message) > chars:
        message = "..." + message[-(chars - 3):]
    return message


def _exception_start(rows: list[str]) -> int:
    """Where the exception of the last Python traceback in *rows* starts (its first line that
    is not a frame: frames are indented), or 0 when *rows* hold no traceback."""
    header = max((i for i, r in enumerate(rows) if r.strip() == _TRACEBACK), default=None)
    if header is None:
        return 0
    for i in range(header + 1, len(rows)):
        if rows[i] and not rows[i][0].isspace():
            return i
    return header


def _read_end(path: Path, limit: int) -> bytes | None:
    """The last *limit* bytes of the regular file *path* (not following a symlink, never
    blocking on a FIFO), or ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > limit:
            os.lseek(fd, info.st_size - limit, os.SEEK_SET)
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
