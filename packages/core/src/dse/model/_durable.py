"""Making a rename durable: what writes a file whole (a trial's result, the record's file, an
integration's event file) calls after putting it in place. The standard library only, so that
``import dse.trial`` inside a trial stays fast."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def sync_directory(directory: Path) -> None:
    """Make the names *directory* holds durable (a file renamed or made in it) by syncing the
    directory itself, where the system allows it: some file systems (NFS, some FUSE mounts)
    refuse to sync a directory, and then the rename is as durable as they make it."""
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
