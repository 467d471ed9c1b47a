"""Facts about the processes of this machine, read from ``/proc``, and signals sent to them.

Nothing here keeps state: a process is named by its pid and its start time in clock ticks
since boot (what tells a reused pid apart), and every answer is read afresh.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dse import JobSpec


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (``[0]`` the state, ``[1]``
    the parent, ``[3]`` the session, ``[19]`` the start time in clock ticks since boot), or
    ``None`` when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    fields = stat_fields(pid)
    if fields is None or fields[0] == b"Z":
        return None
    return int(fields[19])


def pid_hint(raw: bytes | None) -> tuple[int, int] | None:
    """The (pid, start ticks) a pid file *raw* says, if it says two numbers."""
    words = (raw or b"").split()
    if len(words) != 2 or not all(w.isdigit() and len(w) < 20 for w in words):
        return None
    return int(words[0]), int(words[1])


def find_wrapper(here: tuple[int, int], hint: tuple[int, int] | None
                 ) -> tuple[int, int] | None:
    """(pid, start ticks) of the live wrapper of the attempt whose directory is *here*
    (device, inode), or ``None`` when none lives.

    A wrapper leads a session of its own and works in its attempt directory
    (``_wrapper._enter``): what proves a process to be the attempt's wrapper, whatever its
    pid file says. The pid file's *hint* is looked at first; the other processes are looked
    at only when it is not the wrapper (rewritten by the trial, or the wrapper gone).
    """
    if hint is not None and is_wrapper(hint[0], here) == hint[1]:
        return hint
    for name in os.listdir("/proc"):
        if name.isdigit():
            ticks = is_wrapper(int(name), here)
            if ticks is not None:
                return int(name), ticks
    return None


def is_wrapper(pid: int, here: tuple[int, int]) -> int | None:
    """The start ticks of *pid* if it is a live session leader working in the directory
    *here* (device, inode), else ``None``."""
    fields = stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X") or int(fields[3]) != pid:
        return None
    try:
        cwd = os.stat(f"/proc/{pid}/cwd")
    except OSError:
        return None
    return int(fields[19]) if (cwd.st_dev, cwd.st_ino) == here else None


def kill_marked(spec: JobSpec) -> list[int]:
    """SIGKILL every live process carrying *spec*'s attempt in its environment (the
    ``DSE_TRIAL_DIR`` and ``DSE_ATTEMPT`` its workload was started with, which its
    descendants inherit); return the pids it found. What is left of an attempt whose wrapper
    died while no controller watched it: the wrapper's pid, which its session bears, is
    known only from its pid file, which the trial could rewrite to name anyone's."""
    trial_dir = spec.env.get("DSE_TRIAL_DIR")
    if not trial_dir:
        return []
    marks = {os.fsencode(f"DSE_TRIAL_DIR={trial_dir}"), f"DSE_ATTEMPT={spec.attempt}".encode()}
    me = os.getpid()
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue  # ended, or someone else's
        if marks <= set(environ.split(b"\0")) and start_ticks(int(name)) is not None:
            members.append(int(name))
    for pid in members:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return members


def kill_session(sid: int, leader_ticks: int | None, sig: int = signal.SIGKILL, *,
                 spare_leader: bool = False) -> list[int]:
    """Send *sig* (SIGKILL) to every live process of the session *sid* (a wrapper's session:
    its id is the wrapper's pid, started at *leader_ticks*) and to every descendant of the
    wrapper while it lives (it is a subreaper: what left the session, ``setsid`` and all, is
    still below it) — but the wrapper itself with *spare_leader*; return the pids it found.

    Linux gives out a pid again only once no process has it as its pid, process group or
    session: while any process of the session lives, the number is the session's. So a live
    process *sid* that is not the wrapper (another start time) means the session is empty
    and the number reused: nothing is killed.
    """
    members = []
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = stat_fields(name)
        if fields is None or fields[0] in (b"Z", b"X"):
            continue  # ended (a zombie cannot run or write)
        pid = int(name)
        if pid == sid and (leader_ticks is None or int(fields[19]) != leader_ticks):
            return []  # the pid was reused: a session of someone else's
        children.setdefault(int(fields[1]), []).append(pid)
        if int(fields[3]) == sid:
            members.append(pid)
    found = set(members)
    todo, walked = [sid], {sid}
    while todo:  # the wrapper's descendants (none once it is gone: its number is no parent)
        for child in children.get(todo.pop(), ()):
            if child not in walked:
                walked.add(child)
                todo.append(child)
                if child not in found:
                    found.add(child)
                    members.append(child)
    for pid in members:
        if spare_leader and pid == sid:
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
    return members


def stopped(pid: int, ticks: int | None) -> bool:
    """Whether the process *pid* (started at *ticks*) is stopped (SIGSTOP, a debugger)."""
    fields = stat_fields(pid)
    return (fields is not None and fields[0] in (b"T", b"t")
            and (ticks is None or int(fields[19]) == ticks))


def age(ticks: int) -> float:
    """Seconds since a process started at *ticks* (clock ticks since boot, as
    ``/proc/<pid>/stat`` has them), on the kernel's boot-time clock."""
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    return max(since_boot - ticks / os.sysconf("SC_CLK_TCK"), 0.0)
