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

import os
import stat
from typing import TYPE_CHECKING, Any

from dse._environment import PARAMS_FILE, RESULT_FILE
from dse._trialfile import move_aside

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from dse._live import LiveTrial

MOVED = "moved_aside"
"""The event recorded for each file or directory moved aside."""


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
        holding anything is moved aside first: where it went is returned."""
        self.run_dir, self.wanted = run_dir, wanted
        if not new:  # the run's own, made when it was recorded (or gone since)
            run_dir.mkdir(parents=True, exist_ok=True)
            return None
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            run_dir.mkdir()
        except FileExistsError:
            if run_dir.is_dir() and not run_dir.is_symlink() and not any(run_dir.iterdir()):
                return None
            moved = move_aside(run_dir)
            run_dir.mkdir()
            self._note(None, MOVED, {"path": str(run_dir), "to": str(moved),
                                     "why": "a new run's directory, made by an earlier record"})
            self._say(f"{run_dir} was there before this run: the workspace's record was"
                      " deleted, emptied or replaced by an older copy since it was made; moved"
                      f" aside to {moved.name} (nothing in it is read or handed out, nothing"
                      " deleted)")
            return moved
        return None

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
            self._fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)
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
        found = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        if stat.S_ISDIR(found.st_mode) and set(os.listdir(path)) <= {PARAMS_FILE}:
            return None
        moved = move_aside(path)
        os.mkdir(name, dir_fd=self._fd)
        self._note(row, MOVED, {"path": str(path), "to": str(moved), "trial": number,
                                "why": "written by an attempt the record does not know"})
        if not self._said:
            self._said = True
            self._say(f"trial {number}'s directory {path} held files of an attempt this record"
                      " does not know (was the record replaced by an older copy?); moved aside"
                      f" to {moved.name}, nothing in it used (said once; every one is a"
                      f" {MOVED} event)")
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
