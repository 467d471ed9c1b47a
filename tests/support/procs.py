"""Looking at processes through /proc, as the tests that hunt for leftovers do."""

from __future__ import annotations

import os


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(b")") + 2 :].split()


def alive(pid: int, ticks: int | None = None) -> bool:
    """Whether *pid* is a live process (a zombie has ended), started at *ticks* if given."""
    fields = stat_fields(pid)
    if fields is None or fields[0] == b"Z":
        return False
    return ticks is None or int(fields[19]) == ticks


def live_pids_mentioning(marker: bytes) -> list[int]:
    """Pids of live (not zombie) processes whose environment holds *marker*."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue  # ended meanwhile
        if marker in environ and alive(int(name)):
            found.append(int(name))
    return found
