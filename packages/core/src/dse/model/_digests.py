"""Content digests of files, cached by their stat: an unchanged file is never read twice.

The data version (``[data] paths``) and the code version of a workload outside git (its
script, the modules it imports, ``[environment] code``) are digests of files that may be
large or many. :class:`FileDigests` keeps, in one JSON file of the workspace, each file's
digest under its stamp — size, modification time and inode — so a check of an unchanged tree
costs one ``stat`` per file. A file modified within two seconds of its last digest is read
again (a rewrite in the same clock tick keeps its stamp), as git does for "racily clean"
files.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["FileDigests", "JsonCache", "file_digest"]

_RACY_S = 2.0


def file_digest(path: Path | str) -> str:
    """The sha256 hex digest of a file's content, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class JsonCache:
    """A JSON object kept in one file, read once and written back whole, atomically; a
    cache that cannot be read is empty and one that cannot be written only costs work."""

    def __init__(self, path: Path, *, make_dir: bool = True, limit: int | None = None) -> None:
        self.path = path
        self.make_dir = make_dir
        """Make the file's directory when it is missing (else the cache is not written: a
        workspace is never made just to hold one)."""
        self.limit = limit
        """Keep at most this many entries, the latest added (None: all): a cache whose keys
        change with every test's temporary directory would otherwise grow without end, and
        every reader pays for reading it whole."""
        self._data: dict[str, Any] | None = None

    @property
    def data(self) -> dict[str, Any]:
        """The object (read from the file the first time)."""
        if self._data is None:
            try:
                loaded = json.loads(self.path.read_text())
            except (OSError, ValueError):
                loaded = {}
            self._data = loaded if isinstance(loaded, dict) else {}
        return self._data

    def save(self) -> None:
        """Write the object back (another process may have written since: the last writer
        wins, and every entry is exact)."""
        try:
            if self.make_dir:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            data = self.data
            if self.limit is not None and len(data) > self.limit:
                for key in list(data)[: len(data) - self.limit]:  # the oldest first
                    del data[key]
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)
        except OSError:
            pass  # the cache only saves work


class FileDigests:
    """The digests of files, kept in *cache_file* under each file's stamp.

    :meth:`digest` answers from the cache while a file's stamp is unchanged; :meth:`save`
    writes the cache back (atomically; a cache that cannot be written only costs work).
    """

    def __init__(self, cache_file: Path, *, make_dir: bool = True) -> None:
        self._cache = JsonCache(cache_file, make_dir=make_dir)
        self._changed = False

    def digest(self, path: Path | str, st: os.stat_result | None = None) -> str:
        """The content digest of the file *path* (whose ``stat`` the caller may pass).

        :raises OSError: the file cannot be stat'ed or read.
        """
        cache = self._cache.data
        st = os.stat(path) if st is None else st
        key = str(path)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        entry = cache.get(key)
        # A stamp taken within _RACY_S of the file's modification may not see a rewrite in
        # the same clock tick (same size, same mtime): such a file is read again.
        if (not isinstance(entry, list) or len(entry) < 3 or entry[0] != stamp
                or entry[2] < _RACY_S):
            checked = time.time_ns()
            entry = [stamp, file_digest(path), (checked - st.st_mtime_ns) / 1e9]
            cache[key] = entry
            self._changed = True
        return str(entry[1])

    def save(self) -> None:
        """Write the cache back if a digest was computed since it was read."""
        if self._changed:
            self._changed = False
            self._cache.save()
