"""Trial directories on nodes that share no filesystem with the controller.

With ``[backend.ray] shared_filesystem = false`` each node of an attempt runs the trial in a
directory of its own (:func:`node_root`: under ``node_dir``, named by the controller's trial
directory), and the files travel through Ray:

* **out** (:func:`outgoing`, the controller, at submit): what the attempt reads of its trial
  directory — the params file, the progress file of earlier attempts, the checkpoint
  directory — handed to the actor with the request, written by :func:`stage` on the node
  before the command starts (the node's checkpoint directory becomes exactly the
  controller's: the controller's trial directory is the trial's);
* **while it runs** (:meth:`NodeFiles.since`, answered by the actor's ``sync()``): the lines
  appended to ``progress.jsonl`` and the checkpoint files written since the last answer, so
  the controller's early stopping and live view see the curve, and a retry on another node
  resumes from the checkpoint even when this node dies;
* **back** (:meth:`NodeFiles.collect`, with the actor's ``result()``): every file the attempt
  wrote or changed — ``result.json``, its logs and exit files, the checkpoint, artifacts —
  up to ``return_limit`` bytes each (the result up to the 16 MiB dse reads of it, whatever
  the limit); a larger one stays on the node, and the attempt's record
  says where (:attr:`dse.JobStatus.left_files`).

The controller's side (:class:`Mirror`) writes what comes back into its trial directory, each
file atomically. This module imports only the standard library: the actor imports it on the
node.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

PARAMS = "params.json"
PROGRESS = "progress.jsonl"
RESULT = "result.json"
CHECKPOINT = "checkpoint"
MARK = ".dse-checkpointed"
"""The checkpoint mark (:data:`dse.trial.CHECKPOINT_MARK`): sent after the files it vouches
for."""
STREAM_LIMIT = 16 << 20
"""The most of ``progress.jsonl`` one answer carries (dse reads no more of it in all)."""


def node_root(node_dir: str, node: str, trial_dir: Path) -> str:
    """Where a trial's directory is on node *node*: under ``node_dir/<node>`` (nodes that
    share a disk keep apart), named by the controller's trial directory (its name, and a
    digest of its path: two campaigns may name trials alike)."""
    digest = hashlib.sha256(str(trial_dir).encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node) or "node"
    return os.path.join(node_dir, safe, f"{digest}-{trial_dir.name}")


def _files_under(root: Path, top: str) -> list[str]:
    """The regular files under ``root/top`` (a file or a directory), relative to *root*;
    symlinks are not followed."""
    start = root / top
    if start.is_symlink():
        return []
    if start.is_file():
        return [top]
    found = []
    for base, dirs, files in os.walk(start):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(base, d))]
        for name in files:
            path = os.path.join(base, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(os.path.relpath(path, root))
    return sorted(found)


def outgoing(trial_dir: Path) -> dict[str, bytes]:
    """What a node needs of the controller's trial directory to run an attempt: the params
    file, the progress file and the checkpoint directory's files."""
    out: dict[str, bytes] = {}
    for top in (PARAMS, PROGRESS, CHECKPOINT):
        for rel in _files_under(trial_dir, top):
            with contextlib.suppress(OSError):
                out[rel] = (trial_dir / rel).read_bytes()
    return out


def write_atomic(path: Path, data: bytes) -> None:
    """Write *data* to *path* through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _inside(root: Path, rel: str) -> Path:
    """``root/rel``, refused when *rel* leads out of *root*."""
    path = (root / rel).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ValueError(f"{rel!r} is outside the trial directory")
    return path


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class NodeFiles:
    """The trial directory of one node of an attempt, on that node (used by its actor)."""

    def __init__(self, root: str, attempt: int, node_rank: int, limit: int) -> None:
        self.root = Path(root)
        self.attempt = attempt
        self.node_rank = node_rank
        self.limit = limit
        self._staged: dict[str, tuple[int, int] | None] = {}
        self._sent: dict[str, tuple[int, int] | None] = {}
        self._lengths: dict[str, int] = {}
        self.progress_start = 0

    def stage(self, files: dict[str, bytes]) -> None:
        """Make the node's trial directory hold *files* (the controller's): an earlier
        attempt's ``result.json`` and checkpoint files the controller has not are moved or
        removed, and ``attempt-<n>`` is made anew."""
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        adir = root / f"attempt-{self.attempt}"
        if adir.exists():
            adir.rename(root / f"attempt-{self.attempt}.before-{time.time_ns()}")
        adir.mkdir()
        with contextlib.suppress(FileNotFoundError):
            (root / RESULT).rename(root / f"{RESULT}.before-{time.time_ns()}")
        for rel in (PROGRESS, PARAMS):
            with contextlib.suppress(FileNotFoundError):
                (root / rel).unlink()
        shutil.rmtree(root / CHECKPOINT, ignore_errors=True)
        (root / CHECKPOINT).mkdir()
        for rel, data in files.items():
            write_atomic(_inside(root, rel), data)
        self.progress_start = len(files.get(PROGRESS, b""))
        # What an earlier attempt on this node left (an artifact) is not this one's, unless
        # this one writes it again.
        self._staged = {rel: _signature(root / rel) for top in self._tops()
                        for rel in _files_under(root, top)}
        self._staged.update((rel, _signature(root / rel)) for rel in files)
        self._sent = dict(self._staged)

    def _tops(self) -> list[str]:
        """What of the node's trial directory is the attempt's to send: its attempt
        directory and, on node 0, what the trial writes at the top of its directory (the
        result, the checkpoint, artifacts; not the params and progress files)."""
        tops = [f"attempt-{self.attempt}"]
        if self.node_rank == 0:
            tops += [name for name in sorted(os.listdir(self.root))
                     if name not in (PROGRESS, PARAMS) and not name.startswith("attempt-")
                     and ".before-" not in name]
        return tops

    def _changes(self, left: dict[str, int]) -> dict[str, Any]:
        """The files written or changed since they were staged or last sent: ``files``
        (path → content), ``appends`` (a log: path → [offset, what follows it]); a file
        over the limit goes in *left* (path → size) instead. The checkpoint mark last, so a
        mark never stands for files not yet sent."""
        files: dict[str, bytes] = {}
        appends: dict[str, list[Any]] = {}
        changed = [rel for top in self._tops() for rel in _files_under(self.root, top)
                   if _signature(self.root / rel) != self._sent.get(rel)]
        for rel in sorted(changed, key=lambda r: r.endswith(MARK)):
            sig = _signature(self.root / rel)
            if sig is None:
                continue
            if sig[0] > (STREAM_LIMIT if rel == RESULT else self.limit):
                left[rel] = sig[0]  # the result comes back whatever the limit: dse reads it
                continue
            try:
                with open(self.root / rel, "rb") as handle:
                    had = self._lengths.get(rel, 0)
                    if rel.endswith(".log") and 0 < had <= sig[0]:
                        handle.seek(had)
                        appends[rel] = [had, handle.read(sig[0] - had)]
                    else:
                        files[rel] = handle.read(sig[0])
            except OSError:
                continue
            self._sent[rel] = sig
            self._lengths[rel] = sig[0]
        return {"files": files, "appends": appends}

    def since(self, offset: int, *, fresh: bool = False) -> dict[str, Any]:
        """What changed while the attempt runs: ``progress.jsonl`` from *offset* (the
        controller's length of it), and the files written since the last answer (the logs'
        new lines, the checkpoint) — since the start when *fresh* (a controller's first ask:
        one that restarted has not what was sent to the one before)."""
        if fresh:
            self._forget()
        return {**self._changes({}), "progress": self._progress(offset), "from": offset}

    def _forget(self) -> None:
        """Send everything again (nothing sent is known to have arrived)."""
        self._sent = dict(self._staged)
        self._lengths = {}

    def _progress(self, offset: int) -> bytes:
        if self.node_rank != 0:
            return b""
        try:
            with open(self.root / PROGRESS, "rb") as handle:
                handle.seek(max(offset, 0))
                return handle.read(STREAM_LIMIT)
        except OSError:
            return b""

    def collect(self) -> dict[str, Any]:
        """Everything the attempt wrote on this node, once it ended (again, whole, what an
        answer to :meth:`since` had sent): ``files``, ``left`` (path → size) for files over
        the limit, ``progress`` from where it was staged, and the node's ``dir``."""
        left: dict[str, int] = {}
        self._forget()  # whole: an answer to sync() may have been lost with its controller
        return {**self._changes(left), "left": left, "dir": str(self.root),
                "progress": self._progress(self.progress_start), "from": self.progress_start}


class Mirror:
    """The controller's side: what came back of an attempt's files, written into its trial
    directory; what is known of its progress file's length."""

    def __init__(self, trial_dir: Path) -> None:
        self.trial_dir = trial_dir
        self.left: dict[str, Any] = {}
        """Node name → (dir, {path: size}) of the files left there."""

    def progress_length(self) -> int:
        try:
            return (self.trial_dir / PROGRESS).stat().st_size
        except OSError:
            return 0

    def take(self, answer: dict[str, Any], node: str | None = None) -> None:
        """Write what a ``sync()`` or a ``result()`` of the node *node* answered: its files,
        the progress file's bytes from ``from``; note the files it left there."""
        for rel, (offset, data) in (answer.get("appends") or {}).items():
            path = _inside(self.trial_dir, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "r+b" if path.exists() else "wb") as handle:
                handle.seek(int(offset))
                handle.write(data)
                handle.truncate()
        self._files(answer.get("files") or {})
        self._append(answer.get("progress") or b"", int(answer.get("from") or 0))
        if answer.get("left"):
            self.left[str(node)] = (answer.get("dir"), dict(answer["left"]))
        if answer.get("left"):
            self.left[str(node)] = (answer.get("dir"), dict(answer["left"]))

    def left_files(self) -> dict[str, Any] | None:
        """:attr:`dse.JobStatus.left_files` of the attempt (every node of it)."""
        if not self.left:
            return None
        files: dict[str, int] = {}
        dirs = []
        for directory, left in self.left.values():
            files.update(left)
            dirs.append(str(directory))
        return {"node": ",".join(sorted(self.left)), "dir": dirs[0], "files": files}

    def _files(self, files: dict[str, bytes]) -> None:
        # The checkpoint mark last: it says the files before it are whole.
        for rel in sorted(files, key=lambda r: r.endswith(MARK)):
            write_atomic(_inside(self.trial_dir, rel), files[rel])

    def _append(self, data: bytes, offset: int) -> None:
        """Append what of *data* (the node's progress file from *offset*) this copy has not."""
        have = self.progress_length()
        skip = have - offset
        if skip < 0 or skip >= len(data):
            return
        with open(self.trial_dir / PROGRESS, "ab") as handle:
            handle.write(data[skip:])
