"""Reading a file a trial hands the controller (``result.json``) without trusting the trial.

A trial writes its directory as it likes, so the name the controller reads may be a symlink
to another trial's result, a FIFO that never delivers a byte, a device that never ends, or a
file of gigabytes. :func:`read_trial_file` reads it only when it is a regular file inside the
trial directory, at most :data:`MAX_TRIAL_FILE_BYTES` long, and never blocks on it: anything
else is refused with the :class:`~dse.FailureClass` that says what was wrong. Nor is a file
older than the attempt that hands it in read as that attempt's (:data:`CLOCK_SLACK_S`).

What a run must not use but may not delete (a directory an earlier record made, the result an
earlier attempt left) is renamed beside itself by :func:`move_aside`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from typing import TYPE_CHECKING

from dse.model._errors import DseError
from dse.model._types import FailureClass

if TYPE_CHECKING:
    from pathlib import Path

MAX_TRIAL_FILE_BYTES = 16 * 1024 * 1024
"""The largest result file dse reads (16 MiB): a result is metrics and a few keys, so a larger
one is a workload writing the wrong thing, which must not fill the controller's memory."""

CLOCK_SLACK_S = 5.0
"""How much older than its attempt's start a result file may look and still be that attempt's:
the clocks that stamp the two differ (a Slurm node's against its file server's; Slurm's start
times are whole seconds; a file's time is the kernel's coarse clock). Older than that, an
earlier attempt or run left it."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafeTrialFile(DseError, ValueError):
    """A trial file dse refuses to read; :attr:`failure` says why (a result about the trial)."""

    def __init__(self, failure: FailureClass, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        """``result_symlink``, ``result_not_regular``, ``result_too_large`` or
        ``stale_result``."""


def read_trial_file(
    directory: Path, name: str, *, limit: int = MAX_TRIAL_FILE_BYTES,
    started_at: float | None = None,
) -> bytes:
    """The bytes of the file *name* in the trial directory *directory*.

    The directory itself (its last component: the part a trial could replace) and the file
    are opened without following symlinks; the file is opened non-blocking and checked to be
    a regular file before a byte is read, and at most *limit* + 1 bytes are read. With
    *started_at* (when the attempt handing it in started, wall clock), a file last written
    more than :data:`CLOCK_SLACK_S` before it is refused unread: not this attempt's.

    :raises FileNotFoundError: the file (or the directory) does not exist.
    :raises UnsafeTrialFile: the file or the directory is a symlink, the file is not a regular
        file (a FIFO, a device, a socket, a directory), it is longer than *limit* bytes, or
        older than *started_at* (``stale_result``).
    :raises OSError: it cannot be read for another reason (permissions, I/O).
    """
    fd, info = _open_regular(directory, name)
    try:
        if info.st_size > limit:
            raise _too_large(name, limit)
        if started_at is not None and info.st_mtime < started_at - CLOCK_SLACK_S:
            raise _stale(name, info.st_mtime, started_at)
        data = _read_at_most(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew after the fstat
        raise _too_large(name, limit)
    return data


def read_trial_file_from(directory: Path, name: str, offset: int, size: int) -> bytes:
    """At most *size* bytes of the file *name* in *directory* from byte *offset* on (a file
    a trial appends to), under the rules of :func:`read_trial_file`: a regular file inside the
    trial directory, never followed through a symlink, never waited on.

    :raises FileNotFoundError: the file (or the directory) does not exist.
    :raises UnsafeTrialFile: the file or the directory is a symlink, or the file is not a
        regular file.
    """
    fd, _ = _open_regular(directory, name)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def write_trial_file(directory: Path, name: str, data: bytes) -> None:
    """Replace the file *name* in the trial directory *directory* with *data*, atomically.

    The temporary file gets a fresh name created exclusively (``O_EXCL | O_NOFOLLOW``), so
    nothing an earlier attempt left in the directory (a symlink, a FIFO) is written through,
    and the rename replaces whatever *name* was without following it.
    """
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the file from a trial run as another user
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, directory / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _open_regular(directory: Path, name: str) -> tuple[int, os.stat_result]:
    """The file *name* in the trial directory *directory*, open for reading once it is known
    to be a regular file there (never through a symlink, never a FIFO or device), and its
    status then."""
    dir_fd = _open_directory(directory, name)
    try:
        fd = _open_file(dir_fd, name)
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        _check_mode(info.st_mode, name)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def move_aside(path: Path) -> Path:
    """Rename *path* (a file or a directory; a symlink is renamed, never followed) to
    ``<name>.moved-<UTC time>`` beside it (``-2``, ``-3``… after it when that name is taken)
    and return the new path: nothing is deleted, nothing overwritten.

    :raises FileNotFoundError: *path* does not exist.
    """
    parent = os.open(path.parent, _DIR_FLAGS)
    try:
        return path.with_name(move_aside_at(parent, path.name))
    finally:
        os.close(parent)


def move_aside_at(dir_fd: int, name: str) -> str:
    """:func:`move_aside` of the entry *name* of the open directory *dir_fd*; its new name.

    :raises FileNotFoundError: there is no entry *name*.
    """
    os.lstat(name, dir_fd=dir_fd)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target, n = f"{name}.moved-{stamp}", 1
    while _exists_at(dir_fd, target):
        n += 1
        target = f"{name}.moved-{stamp}-{n}"
    os.rename(name, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return target


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _open_directory(directory: Path, name: str) -> int:
    base = directory.name
    if not base or base in (".", ".."):
        return os.open(directory, _DIR_FLAGS)
    parent_fd = os.open(directory.parent, _DIR_FLAGS)
    try:
        return os.open(base, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(base, parent_fd):
            msg = f"{name}: the trial directory {directory} is a symlink, never followed"
            raise UnsafeTrialFile(FailureClass.RESULT_SYMLINK, msg) from None
        raise
    finally:
        os.close(parent_fd)


def _open_file(dir_fd: int, name: str) -> int:
    # Looked at before it is opened: opening a device can have effects of its own.
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        raise _symlink(name, dir_fd)
    _check_mode(info.st_mode, name)
    try:
        return os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # replaced by a symlink since the look
            raise _symlink(name, dir_fd) from None
        raise


def _check_mode(mode: int, name: str) -> None:
    if stat.S_ISREG(mode):
        return
    msg = f"{name} is {_kind(mode)}, not a regular file"
    raise UnsafeTrialFile(FailureClass.RESULT_NOT_REGULAR, msg)


def _read_at_most(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _symlink(name: str, dir_fd: int) -> UnsafeTrialFile:
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        target = "?"
    if len(target) > 200:
        target = target[:199] + "…"
    msg = f"{name} is a symlink (to {target!r}), not a regular file in the trial directory"
    return UnsafeTrialFile(FailureClass.RESULT_SYMLINK, msg)


def _stale(name: str, written: float, started: float) -> UnsafeTrialFile:
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(written))
    msg = (f"{name} was last written at {when}, {started - written:.0f} s before its attempt"
           " started: an earlier attempt or run left it, and it is never scored")
    return UnsafeTrialFile(FailureClass.STALE_RESULT, msg)


def _too_large(name: str, limit: int) -> UnsafeTrialFile:
    msg = f"{name} is larger than {limit} bytes; dse reads at most that much"
    return UnsafeTrialFile(FailureClass.RESULT_TOO_LARGE, msg)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"
