"""Noticing what pilots and steps write, without a Slurm command: file ends, file liveness.

A pilot (:mod:`dse_slurm._pilot`) and its steps write one file per event into the pilot's
directory on the shared filesystem: a step's start (``<key>.run``), its end
(``<key>.exit.json``). Each such file changes the directory's modification time, so
:class:`DirectoryWatch` notices an end with one ``stat`` per directory, and the controller
reads the ends from the files in the pass that follows (no ``squeue``, no ``sacct``).

Slurm is still asked, only not every pass: :class:`Liveness` says when a pass must ask
``squeue`` whether the pilots live — every :data:`LIVENESS_S` seconds in any case (a pilot
cancelled while it waited in the queue, an end the files cannot tell), and as soon as a started
pilot's own heartbeat file (:data:`~dse_slurm._pilot.ALIVE`, touched every second) has not
changed for :data:`STALE_S` seconds (a pilot killed by Slurm writes nothing more: its
preemption, node failure or cancellation is learnt within seconds).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from dse_slurm._pilot import ALIVE

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from dse import Clock

__all__ = ["LIVENESS_S", "RECENT_S", "STALE_S", "WATCH_S", "DirectoryWatch", "Liveness"]

WATCH_S = 0.02
"""How often a wait looks at the directories' modification times."""
RECENT_S = 0.5
"""How close to a change a mark counts a directory's entries as well (see DirectoryWatch)."""
LIVENESS_S = 30.0
"""Longest time between two ``squeue`` calls about live pilots."""
STALE_S = 5.0
"""A started pilot whose heartbeat file did not change for this long is asked about at once."""


def _count(path: Path) -> int | None:
    try:
        return len(os.listdir(path))
    except OSError:
        return None


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class DirectoryWatch:
    """The modification times of directories as last seen by the controller.

    A directory's time stamp is coarse (a clock tick): a file written in the tick the
    controller marked it leaves it unchanged, so for :data:`RECENT_S` after a mark that
    close to a change, its entries are counted as well."""

    def __init__(self) -> None:
        self._seen: dict[Path, tuple[int | None, int | None]] = {}
        self._marked_at = 0.0

    @property
    def watching(self) -> bool:
        """Whether a directory is marked (else :meth:`wait` cannot wait on anything)."""
        return bool(self._seen)

    def mark(self, directories: Iterable[Path]) -> None:
        """Note the directories' times now (after the controller's own writes)."""
        now = time.time()
        self._marked_at = now
        self._seen = {}
        for directory in directories:
            mark = _mtime(directory)
            recent = mark is not None and now - mark / 1e9 < RECENT_S
            self._seen[directory] = (mark, _count(directory) if recent else None)

    def changed(self) -> bool:
        """Whether a file came or went in a marked directory since :meth:`mark`."""
        counting = time.time() - self._marked_at < RECENT_S
        for directory, (mark, count) in self._seen.items():
            if _mtime(directory) != mark:
                return True
            if counting and count is not None and _count(directory) != count:
                return True
        return False

    def wait(self, clock: Clock, timeout: float) -> bool:
        """Wait until :meth:`changed` or *timeout* seconds passed; whether it changed."""
        deadline = clock.time() + timeout
        while not self.changed():
            left = deadline - clock.time()
            if left <= 0:
                return False
            clock.sleep(min(WATCH_S, left))
        return True


class Liveness:
    """When to ask Slurm whether the pilots live (see the module doc)."""

    def __init__(self) -> None:
        self.asked_at = -float("inf")
        self._beats: dict[Path, tuple[int | None, float]] = {}

    def asked(self, now: float) -> None:
        """A pass asked Slurm at *now*."""
        self.asked_at = now

    def due(self, started: Iterable[Path], now: float) -> bool:
        """Whether this pass asks: *started* are the directories of pilots that started (they
        touch their heartbeat file)."""
        if now - self.asked_at >= LIVENESS_S:
            return True
        stale = False
        for directory in started:
            mark = _mtime(directory / ALIVE)
            last = self._beats.get(directory)
            if last is None or last[0] != mark:
                self._beats[directory] = (mark, now)
            elif now - last[1] >= STALE_S:
                stale = True
        return stale and now - self.asked_at >= STALE_S
