"""The directories of a run: ``<workspace>/<campaign>/run-<id>`` and, in it, one per trial
(``<number:06d>``), each belonging to the record that made it.

Run ids and trial numbers are the record's: a record deleted, left as an empty file or
replaced by an older copy gives out again the names of directories an earlier record's
trials wrote in. Nothing in one of those is read as a result or handed out as a checkpoint:
it is moved aside whole (never deleted, said once) and a fresh one made. A record gives a run
id once, so a new run's directory found holding anything was made by another record; a trial
directory found holding more than its params file (all that is written before the trial is
recorded) was written by an attempt the record does not know (it was restored from a copy
older than the directory). And before a later attempt of a trial starts, the result file an
earlier attempt left is moved aside: it is not the new attempt's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import TYPE_CHECKING, Any

from dse.model._trialfile import move_aside, move_aside_at
from dse.plugins._environment import PARAMS_FILE, RESULT_FILE, params_document

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from dse.engine._live import LiveTrial
    from dse.model._types import JobSpec

MOVED = "moved_aside"
"""The event recorded for each file or directory moved aside."""

CHECKPOINT_DIR = "checkpoint"
"""The trial's checkpoint directory, in its trial directory (:attr:`dse.JobSpec.checkpoint_dir`)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class TrialDirs:
    """The directory of a run and of its trials (made before each trial is prepared).

    :param note: records an event (``note(trial_row, kind, data)``: the run's journal).
    :param say: tells the console something systematic happened.
    """

    def __init__(self, note: Callable[[int | None, str, Mapping[str, Any]], None],
                 say: Callable[[str], None]) -> None:
        self.run_dir: Path | None = None
        """Where they go (set when the run is recorded)."""
        self.wanted = True
        """Whether the backend wants them (:attr:`dse.Backend.trial_dirs`): a ``mkdir``
        costs as much as the rest of a trial's bookkeeping, and the record's fsync flushes
        every one made since the last."""
        self._fd: int | None = None
        """The run directory, open: a trial's directory is made relative to it (``mkdir`` of
        a relative name costs half of one given the whole path, which the kernel walks)."""
        self._note, self._say = note, say
        self._said = False
        """A trial directory was moved aside (said once a run)."""

    def open(self, run_dir: Path, wanted: bool, *, new: bool) -> Path | None:
        """Make *run_dir*, and the directories of the run's trials in it from now on if
        *wanted* (:attr:`dse.Backend.trial_dirs`). For a *new* run, an existing *run_dir*
        holding anything is moved aside first: where it went is returned.

        The campaign's directory and *run_dir* are walked from the workspace without
        following a symlink: a symlink (or a file) found where one of them goes is moved
        aside, recorded and said, and a directory made in its place; so is a resumed run's
        directory found a symlink (what it points at is not the run's)."""
        self.run_dir, self.wanted = run_dir, wanted
        run_dir.parent.parent.mkdir(parents=True, exist_ok=True)  # the workspace: the user's
        top = os.open(run_dir.parent.parent, _DIR_FLAGS)
        try:
            campaign = self._enter(top, run_dir.parent)[0]
        finally:
            os.close(top)
        try:
            fd, made = self._enter(campaign, run_dir)
            moved = None
            if new and not made and os.listdir(fd):  # made, or empty: nothing to keep
                os.close(fd)
                moved = run_dir.with_name(move_aside_at(campaign, run_dir.name))
                os.mkdir(run_dir.name, dir_fd=campaign)
                fd = os.open(run_dir.name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=campaign)
        finally:
            os.close(campaign)
        self.close()
        # Kept open: the trials' directories are made in this one, whatever is put in its
        # place later.
        self._fd = fd
        if moved is None:
            return None
        self._note(None, MOVED, {"path": str(run_dir), "to": str(moved),
                                 "why": "a new run's directory, made by an earlier record"})
        self._say(f"{run_dir} was there before this run: the workspace's record was"
                  " deleted, emptied or replaced by an older copy since it was made; moved"
                  f" aside to {moved.name} (nothing in it is read or handed out, nothing"
                  " deleted)")
        return moved

    def _enter(self, parent: int, path: Path) -> tuple[int, bool]:
        """The directory *path* (the entry ``path.name`` of the open directory *parent*),
        open, made if missing, and whether it was made: never followed through a symlink.
        A symlink or a file in its place is moved aside (recorded, said) and a directory
        made instead."""
        name = path.name
        try:
            os.mkdir(name, dir_fd=parent)
            made = True
        except FileExistsError:
            made = False
        try:
            return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent), made
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        what = _what_is(parent, name)
        moved = path.with_name(move_aside_at(parent, name))
        os.mkdir(name, dir_fd=parent)
        self._note(None, MOVED, {"path": str(path), "to": str(moved),
                                 "why": f"{what} where dse's directory goes"})
        self._say(f"{path} was {what}, where dse makes a directory of its own: never"
                  f" followed, moved aside to {moved.name} and a directory made (nothing"
                  " deleted)")
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent), True

    def path(self, number: int) -> Path:
        assert self.run_dir is not None
        return self.run_dir / f"{number:06d}"

    def make(self, number: int, row: int | None = None) -> Path | None:
        """Make the directory of trial *number* (record row *row*); where one found there was
        moved aside to, if it was. One left by a controller that died before committing the
        trial holds at most its params file and is reused: nothing ran in it, since
        submission follows the commit."""
        if not self.wanted:
            return None
        if self._fd is None:
            assert self.run_dir is not None
            parent = os.open(self.run_dir.parent, _DIR_FLAGS)
            try:  # the directory open() walked to, never a symlink put there since
                self._fd = os.open(self.run_dir.name, _DIR_FLAGS | os.O_NOFOLLOW,
                                   dir_fd=parent)
            finally:
                os.close(parent)
        name = f"{number:06d}"
        try:
            os.mkdir(name, dir_fd=self._fd)
        except FileExistsError:
            return self._found(number, row)
        return None

    def _found(self, number: int, row: int | None) -> Path | None:
        """Trial *number*'s directory exists: reused when it holds nothing but a params file,
        else moved aside (returned) and made afresh."""
        name, path = f"{number:06d}", self.path(number)
        assert self._fd is not None
        if _only_params(self._fd, name):
            return None
        moved = path.with_name(move_aside_at(self._fd, name))
        os.mkdir(name, dir_fd=self._fd)
        self._note(row, MOVED, {"path": str(path), "to": str(moved), "trial": number,
                                "why": "written by an attempt the record does not know"})
        if not self._said:
            self._said = True
            self._say(f"trial {number}'s directory {path} held files of an attempt this record"
                      " does not know (another trial wrote them before this one started, or"
                      " the record was replaced by an older copy); moved aside to"
                      f" {moved.name}, nothing in it used (said once; every one is a {MOVED}"
                      " event)")
        return moved

    def submitting(self, trials: Sequence[LiveTrial]) -> Sequence[LiveTrial]:
        """*trials*, whose attempts are about to be submitted, each later attempt's directory
        rid of the result file an earlier attempt left (moved aside and recorded: it is not
        this attempt's). A first attempt's directory is new (:meth:`make`): never looked
        at."""
        if not self.wanted:
            return trials
        for trial in trials:
            if trial.attempt > 1 and trial.trial_dir is not None:
                path = trial.trial_dir / RESULT_FILE
                try:
                    moved = move_aside(path)
                except FileNotFoundError:
                    continue
                self._note(trial.row_id, MOVED, {
                    "path": str(path), "to": str(moved), "attempt": trial.attempt,
                    "why": "left by an earlier attempt of the trial"})
        return trials

    def close(self) -> None:
        """Let go of the run directory (the run ended)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def start_attempt_dir(spec: JobSpec, *, first: bool | None = None) -> list[str]:
    """Ready the trial directory of *spec*'s attempt as the attempt starts, and make its
    attempt directory (``attempt-<n>``); what was moved aside, each as ``<name> (<what it
    was>) -> <new name>`` (for the backend to say in one line: nothing is deleted).

    A backend calls it at the moment the attempt starts (the local backend: as it hands the
    attempt to its wrapper), not when it is handed the attempt: one it queues may wait while
    other trials run, and they can write in its directory (its path is easy to guess). What
    was there before the start is not the attempt's:

    * the trial directory is never followed through a symlink: one (or a file) in its place
      is moved aside and a directory made, which the attempt starts in as a first one;
    * a *first* attempt (by default attempt 1: no earlier attempt of the trial started)
      starts in a directory holding nothing but the params file the controller wrote: any
      other entry — a result, a checkpoint, a progress file, an attempt directory — is moved
      aside, and a params file that differs from *spec*'s params is moved aside and
      written again; then its empty checkpoint directory is made — unless *spec* is
      :attr:`~dse.JobSpec.seeded`: the checkpoint directory the controller filled with a
      copy of another trial's checkpoint is kept;
    * a later attempt keeps the checkpoint directory (its trial's own, written while
      an earlier attempt ran), and the result file an earlier attempt left is moved aside;
    * ``attempt-<n>`` is made now, never reused: one found there is moved aside.

    :raises OSError: a directory cannot be made (the attempt cannot start).
    """
    trial_dir = spec.trial_dir
    first = spec.attempt == 1 if first is None else first
    params = None
    if spec.env.get("DSE_PARAMS_FILE") == str(trial_dir / PARAMS_FILE):
        params = params_document(spec.params)
    moved: list[str] = []
    # The engine made both (TrialDirs); a backend driven alone (its tests) may not have.
    try:
        parent = os.open(trial_dir.parent, _DIR_FLAGS)
    except FileNotFoundError:
        trial_dir.parent.mkdir(parents=True, exist_ok=True)
        parent = os.open(trial_dir.parent, _DIR_FLAGS)
    try:
        try:
            fd = _open_made(parent, trial_dir.name)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            what = _what_is(parent, trial_dir.name)
            aside = move_aside_at(parent, trial_dir.name)
            moved.append(f"{trial_dir.name} ({what}, never followed) -> {aside}")
            os.mkdir(trial_dir.name, dir_fd=parent)
            fd = os.open(trial_dir.name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
            first = True
    finally:
        os.close(parent)
    try:
        if first:
            # A seeded checkpoint (a copy of another trial's, put there by the controller
            # before the trial was recorded: population-based training) is the attempt's own.
            _keep_only_params(fd, params, moved, keep=CHECKPOINT_DIR if spec.seeded else None)
            with contextlib.suppress(FileExistsError):
                os.mkdir(CHECKPOINT_DIR, dir_fd=fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                aside = move_aside_at(fd, RESULT_FILE)
                moved.append(f"{RESULT_FILE} (an earlier attempt's) -> {aside}")
            with contextlib.suppress(FileExistsError):
                os.mkdir(CHECKPOINT_DIR, dir_fd=fd)
        name = f"attempt-{spec.attempt}"
        try:
            os.mkdir(name, dir_fd=fd)
        except FileExistsError:
            aside = move_aside_at(fd, name)
            moved.append(f"{name} -> {aside}")
            os.mkdir(name, dir_fd=fd)
    finally:
        os.close(fd)
    return moved


def _open_made(parent: int, name: str) -> int:
    """The directory *name* of *parent*, open (never through a symlink), made if missing."""
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, dir_fd=parent)
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)


def _keep_only_params(fd: int, params: bytes | None, moved: list[str],
                      keep: str | None = None) -> None:
    """Move aside every entry of the trial directory *fd* but a params file holding
    *params* (and the directory *keep*, when it is one); write the params file if it is
    missing (and *params* given)."""
    found = os.listdir(fd)
    kept = params is not None and PARAMS_FILE in found and _holds(fd, PARAMS_FILE, params)
    for name in found:
        if name == PARAMS_FILE and kept:
            continue
        if name == keep and stat.S_ISDIR(os.stat(name, dir_fd=fd,
                                                 follow_symlinks=False).st_mode):
            continue
        what = "" if name != PARAMS_FILE else " (not the trial's params)"
        moved.append(f"{name}{what} -> {move_aside_at(fd, name)}")
    if params is not None and not kept:
        _write_at(fd, PARAMS_FILE, params)


def _holds(dir_fd: int, name: str, data: bytes) -> bool:
    """Whether the entry *name* of *dir_fd* is a regular file holding exactly *data*."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(data) + 1) == data
    except OSError:
        return False
    finally:
        os.close(fd)


def _write_at(dir_fd: int, name: str, data: bytes) -> None:
    """Replace the entry *name* of *dir_fd* with a file holding *data*, through a fresh
    temporary file (nothing there is written through)."""
    tmp = f".{name}.{os.getpid()}.{os.urandom(6).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644, dir_fd=dir_fd)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _only_params(dir_fd: int, name: str) -> bool:
    """Whether the entry *name* of *dir_fd* is a directory (not a symlink to one) holding
    nothing but a regular params file, if that."""
    try:
        fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return False
        raise
    try:
        found = os.listdir(fd)
        return not found or (found == [PARAMS_FILE] and stat.S_ISREG(
            os.stat(PARAMS_FILE, dir_fd=fd, follow_symlinks=False).st_mode))
    finally:
        os.close(fd)


def _what_is(dir_fd: int, name: str) -> str:
    """What the entry *name* of *dir_fd* is, in words (``a symlink (to '/x')``)."""
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return "a file"
    if len(target) > 200:
        target = target[:199] + "…"
    return f"a symlink (to {target!r})"
