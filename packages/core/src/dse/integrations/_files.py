"""Files an integration puts in place whole: written under a name the reader ignores, made
durable, then renamed to the name the reader looks for in one step (:func:`publish`). A writer
killed at any point leaves the whole thing or a leftover under the ignored name, which the
next ``open`` removes (:func:`remove`): nothing half written is ever read as written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from dse.model._durable import sync_directory


def sync_tree(path: Path) -> None:
    """Make *path* durable: a file's bytes, or a directory's files and entries, all the way
    down (symbolic links are left alone: they point elsewhere)."""
    if path.is_symlink():
        return
    if not path.is_dir():
        with path.open("rb") as handle:
            os.fsync(handle.fileno())
        return
    for child in path.iterdir():
        sync_tree(child)
    sync_directory(path)


def publish(source: Path, target: Path) -> None:
    """Put *source* (a file or a directory, written in full) in place as *target* in one step:
    synced first, so no crash leaves *target* named but empty, then renamed; the rename is
    synced too. *target* must not exist (a directory cannot replace a full one)."""
    sync_tree(source)
    os.replace(source, target)
    sync_directory(target.parent)
    if source.parent != target.parent:
        sync_directory(source.parent)


def remove(path: Path) -> None:
    """Remove *path*, a file or a whole directory, if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def place(option: str | None, workspace: Path, default: str) -> Path:
    """The directory an integration writes to: *option* as the campaign gives it (``~``
    expanded; a relative path is taken from the workspace's parent, the directory the
    campaign's paths start from when the workspace is the default ``.dse``), or
    ``<workspace>/<default>``."""
    if option is None:
        return workspace / default
    path = Path(option).expanduser()
    return path if path.is_absolute() else workspace.parent / path


def text_option(name: str, value: object) -> str | None:
    """*value* as the string option *name* (``None`` left alone); anything else is a
    :class:`TypeError`, which :meth:`dse.Integration.from_options` reports as a
    bad option."""
    if value is None or isinstance(value, str):
        return value
    msg = f"{name} must be a string, not {type(value).__name__}"
    raise TypeError(msg)
