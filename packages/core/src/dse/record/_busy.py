"""A busy record: who holds SQLite's lock on it, and the wait for it, said once.

SQLite locks with ``fcntl`` (POSIX advisory locks on byte ranges). In WAL mode a writer holds
byte 120 of the ``-shm`` file (the write lock; 121 is the checkpointer's, 122 recovery's,
123-127 the readers' marks); with a rollback journal a writer holds bytes from ``0x40000000``
of the database file (PENDING, RESERVED, then the shared range as EXCLUSIVE), and a reader a
byte of the shared range. The kernel lists each lock and its process in ``/proc/locks``,
which names who holds the record, on this host. A campaign's controller is named by its lock
file (:mod:`dse.record._lock`); a process stopped (Ctrl+Z, SIGSTOP: state ``T`` in
``/proc/<pid>/stat``) holds the record until it is continued, and is said to be stopped.

A writer waits for the record as long as another process holds it: a peer stopped in the
middle of a transaction is continued some day, and failing would lose what this process has
to record. Only a lock this very process holds through another connection is waited on for
:data:`SELF_WAIT_S` and no longer: one thread waiting on itself would wait for ever.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

SAY_AFTER_S = 5.0
"""How long a wait on a running holder lasts before it is said (a stopped one: at once)."""
LOOK_EVERY_S = 1.0
"""How often a wait looks again at who holds the record."""
SELF_WAIT_S = 30.0
"""How long a lock held by another connection of this process is waited on."""

_LOCKS = "/proc/locks"
_PENDING = 0x40000000
"""SQLite's PENDING byte: the database file's locks start there."""
_WAL_LOCKS = range(120, 128)
"""The bytes of a ``-shm`` file a WAL writer, checkpointer or recoverer holds exclusively."""


@dataclass(frozen=True, slots=True)
class Holder:
    """A process holding a lock on the record."""

    pid: int
    """Its process id (on this host)."""
    command: str
    """Its command name (``/proc/<pid>/comm``), or ``""``."""
    campaign: str | None
    """The campaign it controls, when its lock file names it."""
    stopped: bool
    """Whether it is stopped (state ``T``: Ctrl+Z, SIGSTOP): it holds on until continued."""

    def describe(self) -> str:
        """``campaign b (pid 1234, stopped)``."""
        who = f"campaign {self.campaign}" if self.campaign else (self.command or "a process")
        return f"{who} (pid {self.pid}, {'stopped' if self.stopped else 'running'})"


def _state(pid: int) -> tuple[str, bool] | None:
    """(command, stopped) of process *pid*, or ``None`` when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    head, _, tail = stat.rpartition(b")")
    command = head.partition(b"(")[2].decode("utf-8", errors="replace")
    state = tail.split()[:1]
    return command, state in ([b"T"], [b"t"])


def _campaigns(workspace: Path) -> dict[int, str]:
    """Pid → campaign, for the controllers on this host the workspace's lock files name."""
    import socket

    from dse.record._lock import LockHolder  # only when the record is busy

    host = socket.gethostname()
    out: dict[int, str] = {}
    try:
        locks = sorted(workspace.glob("*.lock"))
    except OSError:
        return out
    for path in locks:
        try:
            holder = LockHolder.from_json(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if holder is not None and holder.host == host:
            out[holder.pid] = path.stem
    return out


def _ids(path: Path) -> tuple[tuple[int, int, int], int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino), st.st_ino


def lock_pids(record: Path, *, text: str | None = None) -> tuple[list[int], bool]:
    """The pids holding what a writer of *record* waits for, as ``/proc/locks`` (or *text*)
    lists them, this process left out: the writers, else (with a rollback journal: no
    ``-shm`` file) the readers; and whether this process holds a writer's lock itself
    (through another connection). Empty where the kernel does not say (not Linux, a lock
    held on another host of a network file system)."""
    if text is None:
        try:
            text = Path(_LOCKS).read_text(encoding="ascii", errors="replace")
        except OSError:
            return [], False
    files = {"db": _ids(record), "shm": _ids(Path(f"{record}-shm"))}
    wal = files["shm"] is not None
    me = os.getpid()
    writers: list[int] = []
    readers: list[int] = []
    mine = False
    for line in text.splitlines():
        f = line.split()
        if len(f) < 8 or f[1] != "POSIX" or f[3] not in ("READ", "WRITE"):
            continue  # a waiter ("->"), a flock, an OFD lock (pid -1)
        try:
            pid, start = int(f[4]), int(f[6])
            end = _PENDING * 4 if f[7] == "EOF" else int(f[7])
            major, minor, inode = f[5].split(":")
            where = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        kind = next((k for k, ids in files.items() if ids is not None
                     and (ids[0] == where or ids[1] == where[2])), None)
        if kind == "shm":
            held = f[3] == "WRITE" and start <= _WAL_LOCKS[-1] and end >= _WAL_LOCKS[0]
            reader = False
        elif kind == "db":
            # (In WAL mode every connection holds a shared lock on the file: no reader.)
            held = f[3] == "WRITE" and end >= _PENDING
            reader = not wal and f[3] == "READ" and end >= _PENDING
        else:
            continue
        if pid == me:
            mine = mine or held
        elif held and pid not in writers:
            writers.append(pid)
        elif reader and pid not in readers:
            readers.append(pid)
    return writers or readers, mine


def holders(record: Path) -> tuple[list[Holder], bool]:
    """The processes holding *record* (see :func:`lock_pids`), named, and whether this
    process holds it through another connection."""
    pids, mine = lock_pids(record)
    names = _campaigns(record.parent) if pids else {}
    found = []
    for pid in pids:
        state = _state(pid)
        if state is not None:
            found.append(Holder(pid, state[0], names.get(pid), state[1]))
    return found, mine


class BusyWait:
    """The waits of one connection for a record another process holds: when the current one
    began, whether it was said. :meth:`busy` on each try that found the record held says
    once who holds it (at once for a stopped holder, after :data:`SAY_AFTER_S` for a running
    one); :meth:`over` after the next statement that ran says the wait is over, when it was
    said. *say* prints a line (``None``: wait without a word)."""

    def __init__(self, record: Path, say: Callable[[str], None] | None = None) -> None:
        self.record = record
        self.say = say
        self._since: float | None = None
        self._looked = 0.0
        self._said = False
        self._mine = False

    def busy(self) -> bool:
        """Note one more try that found the record held; whether to try again (``False``
        only for a lock this process holds itself, past :data:`SELF_WAIT_S`)."""
        now = time.monotonic()
        if self._since is None:
            self._since, self._looked = now, now - LOOK_EVERY_S
        waited = now - self._since
        if now - self._looked >= LOOK_EVERY_S:
            self._looked = now
            found, mine = holders(self.record)
            self._mine = mine and not found
            if self.say is not None and not self._said and not self._mine and (
                    waited >= SAY_AFTER_S or any(h.stopped for h in found)):
                self._said = True
                self.say(self._line(found, waited))
        return not (self._mine and waited >= SELF_WAIT_S)

    def _line(self, found: list[Holder], waited: float) -> str:
        who = ", ".join(h.describe() for h in found) or "another process (not one of this host's)"
        line = f"record busy: {self.record} is held by {who}"
        stopped = [str(h.pid) for h in found if h.stopped]
        if stopped:
            return (f"{line}; waiting until it is continued (fg in its shell, or kill -CONT"
                    f" {' '.join(stopped)})")
        return f"{line} for {waited:.0f} s; waiting for it"

    def over(self) -> None:
        """The statement ran: a wait said is said to be over."""
        if self._since is None:
            return
        if self._said and self.say is not None:
            self.say(f"record free again after {time.monotonic() - self._since:.0f} s:"
                     " going on")
        self._since, self._said, self._mine = None, False, False
