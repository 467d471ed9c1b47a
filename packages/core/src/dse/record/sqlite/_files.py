"""Where the record lives: its file in a workspace, the file system under it, and the journal
mode that file system allows."""

from __future__ import annotations

import os
import re
from pathlib import Path

from dse.model._errors import ConfigError

DB_NAME = "dse.sqlite"


JOURNAL_ENV = "DSE_SQLITE_JOURNAL"


NETWORK_FILESYSTEMS = frozenset({
    "9p", "afs", "beegfs", "ceph", "cifs", "fuse.ceph", "fuse.cephfs", "fuse.glusterfs",
    "fuse.sshfs", "gfs2", "glusterfs", "gpfs", "lustre", "ncpfs", "nfs", "nfs4", "ocfs2",
    "orangefs", "panfs", "pvfs2", "smb3", "smbfs", "wekafs",
})


"""File system types (as ``/proc/self/mountinfo`` names them) that get a rollback journal."""


_MOUNTINFO = "/proc/self/mountinfo"


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: str | Path, mountinfo: str) -> tuple[str, str]:
    """The mount point and file system type holding *path* (absolute and resolved), read
    from the text of a ``/proc/<pid>/mountinfo`` file; ``("", "unknown")`` when none does."""
    target = str(path)
    best, fstype = "", "unknown"
    for line in mountinfo.splitlines():
        # Optional fields come before the " - " separator; the type is the first one after.
        head, sep, tail = line.partition(" - ")
        fields, tail_fields = head.split(), tail.split()
        if not sep or len(fields) < 5 or not tail_fields:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        # A later mount on the same point hides the earlier one: ">=" keeps the last.
        if inside and len(point) >= len(best):
            best, fstype = point, tail_fields[0]
    return best, fstype


def filesystem_type(path: str | Path) -> str:
    """The type of the file system holding *path* (``ext4``, ``nfs4``, ``lustre``…).

    *path* is resolved (symbolic links followed, it need not exist) and matched against the
    mount table of this process; ``"unknown"`` where there is none (not Linux).
    """
    target = Path(path).resolve()
    try:
        text = Path(_MOUNTINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    return mount_of(target, text)[1]


def journal_mode_for(path: Path) -> str:
    """``wal`` or ``delete`` for the database at *path*."""
    wanted = os.environ.get(JOURNAL_ENV, "").strip().lower()
    if wanted:
        if wanted not in ("wal", "delete"):
            raise ConfigError(
                f"{JOURNAL_ENV}={os.environ[JOURNAL_ENV]!r}: expected 'wal' or 'delete'"
            )
        return wanted
    return "delete" if filesystem_type(path.parent) in NETWORK_FILESYSTEMS else "wal"


def workspace_db(workspace: str | Path) -> Path:
    return Path(workspace) / DB_NAME
