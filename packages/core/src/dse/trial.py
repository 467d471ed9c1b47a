"""The trial side of dse: read the params of this trial, report its result.

dse runs a workload with the trial contract in its environment (DESIGN.md, "The trial
contract"): ``DSE_TRIAL_ID``, ``DSE_TRIAL_DIR``, ``DSE_PARAMS_FILE``, ``DSE_CHECKPOINT_DIR``,
``DSE_ATTEMPT`` and ``DSE_DATA_VERSION``. This module reads those variables and writes the
trial's ``result.json``, with the standard library only::

    import dse.trial

    p = dse.trial.params()                      # {"tile_m": 64, "layout": "row", ...}
    state = dse.trial.checkpoint_dir() / "state.json"
    step = load(state) if state.exists() else 0  # a retried attempt resumes here
    ...
    dse.trial.report({"time_ms": 1.73, "gflops": 812.0})

Using it is optional: a workload in any language may read the same variables and write
``result.json`` itself. The file dse reads is one JSON object::

    {"complete": true, "metrics": {"time_ms": 1.73}, "data_version": "2024-06",
     "environment": {"python": "3.11.2", "distributions": {"numpy": "1.26.4", ...}}, ...}

``complete`` must be ``true`` and every objective metric a finite number, or the trial is
recorded as failed (``incomplete_output``, ``missing_metric``, ``invalid_metric``) and never
scored. A file that is absent is ``no_result``; one that is truncated or not a JSON object is
``malformed_result``, which is why :func:`report` replaces the file atomically. dse reads only a
regular file in the trial directory, of at most 16 MiB, and never waits on it: a symlink is
``result_symlink``, a FIFO, device, socket or directory ``result_not_regular``, a larger file
``result_too_large``, and one last written before its attempt started (an earlier attempt or
run left it) ``stale_result``.

A trial may span several tasks on several nodes (``nodes``, ``tasks_per_node``): each task
learns its place from ``DSE_RANK``, ``DSE_LOCAL_RANK``, ``DSE_NODE_RANK``, ``DSE_WORLD_SIZE``,
``DSE_NODE`` and ``DSE_NODES`` (:func:`rank`, :func:`world_size`, :func:`nodes`...), and only
the first task (rank 0) writes the result: :func:`report` on another rank writes nothing.

Calling any function here outside a dse trial raises :class:`TrialContextError`, naming the
variable that is missing (the task-place functions default to one task on this host); set the
variables by hand to debug a workload without dse.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.model._durable import sync_directory
from dse.model._errors import DseError
from dse.model._numbers import INT64_MAX, is_int64

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "RESULT_FILE",
    "TrialContextError",
    "append_progress",
    "attempt",
    "checkpoint_dir",
    "checkpoint_every",
    "checkpointed",
    "data_version",
    "environment",
    "is_first",
    "local_rank",
    "node",
    "node_rank",
    "nodes",
    "params",
    "rank",
    "report",
    "report_progress",
    "trial_dir",
    "trial_id",
    "world_size",
    "write_result",
]

RESULT_FILE = "result.json"
"""Name of the result file inside the trial directory."""
PROGRESS_FILE = "progress.jsonl"
"""Name of the progress file inside the trial directory (one JSON object per line)."""

_HINT = "run this as a dse trial (dse run <campaign.toml>), or set it by hand to debug"
_temp_names = itertools.count()


class TrialContextError(DseError, RuntimeError):
    """The code is not running as a dse trial, or the trial contract it sees is broken."""


def _require(variable: str, caller: str) -> str:
    value = os.environ.get(variable)
    if not value:
        msg = f"dse.trial.{caller}(): ${variable} is not set; {_HINT}"
        raise TrialContextError(msg)
    return value


def params() -> dict[str, Any]:
    """The params of this trial, as dse coerced them (ints are ints, choices keep their type).

    Read from the JSON file named by ``$DSE_PARAMS_FILE`` on every call; the dict is the
    caller's to change.
    """
    path = _require("DSE_PARAMS_FILE", "params")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        msg = f"dse.trial.params(): cannot read $DSE_PARAMS_FILE {path} ({exc.strerror})"
        raise TrialContextError(msg) from None
    except ValueError as exc:
        msg = f"dse.trial.params(): $DSE_PARAMS_FILE {path} is not valid JSON ({exc})"
        raise TrialContextError(msg) from None
    if not isinstance(data, dict):
        msg = f"dse.trial.params(): $DSE_PARAMS_FILE {path} does not hold a JSON object"
        raise TrialContextError(msg)
    return data


def trial_id() -> str:
    """The trial's stable id (``<campaign>-<run>-<number>``), the same for every attempt."""
    return _require("DSE_TRIAL_ID", "trial_id")


def trial_dir() -> Path:
    """The trial's own directory (``$DSE_TRIAL_DIR``), where ``result.json`` goes.

    It exists before the trial starts and is the same for every attempt of the trial.
    """
    return Path(_require("DSE_TRIAL_DIR", "trial_dir"))


def checkpoint_dir() -> Path:
    """The directory kept across attempts (``$DSE_CHECKPOINT_DIR``), created if needed.

    When infrastructure interrupts a trial (preemption, node failure, controller restart),
    dse starts a new attempt of the *same* trial with the same checkpoint directory: save
    progress here and resume from it when it is not empty.
    """
    path = Path(_require("DSE_CHECKPOINT_DIR", "checkpoint_dir"))
    path.mkdir(parents=True, exist_ok=True)
    return path


CHECKPOINT_MARK = ".dse-checkpointed"
"""Marker in the checkpoint directory: its time is the last checkpoint's."""


def checkpointed() -> None:
    """Tell dse that a checkpoint was just saved in :func:`checkpoint_dir`.

    dse then records, for an attempt that is interrupted, how much work was lost (the time
    since the last checkpoint) and, for the next attempt, that it resumed from a checkpoint.
    Call it after the checkpoint files are complete (written and renamed into place)::

        state = load(dse.trial.checkpoint_dir()) or fresh_state()
        for step in range(state.step, steps):
            ...
            if time_to_save():
                save(state, dse.trial.checkpoint_dir())
                dse.trial.checkpointed()
    """
    path = checkpoint_dir() / CHECKPOINT_MARK
    tmp = path.with_name(f"{CHECKPOINT_MARK}.{os.getpid()}.tmp")
    tmp.write_text(f"{attempt()}\n")
    os.replace(tmp, path)


def checkpoint_every() -> float | None:
    """Seconds between checkpoints the campaign asks for (``checkpoint_every``), or None."""
    text = os.environ.get("DSE_CHECKPOINT_EVERY", "")
    try:
        return float(text) if text else None
    except ValueError:
        return None


def attempt() -> int:
    """The attempt number of this run of the trial: 1 for the first, 2 after one retry..."""
    text = _require("DSE_ATTEMPT", "attempt")
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        msg = f"dse.trial.attempt(): $DSE_ATTEMPT is {text!r}, expected a positive integer"
        raise TrialContextError(msg)
    return number


def _count(variable: str, default: int, least: int) -> int:
    text = os.environ.get(variable)
    if text is None:
        return default
    try:
        number = int(text)
    except ValueError:
        number = least - 1
    if number < least:
        msg = f"dse.trial: ${variable} is {text!r}, expected an integer >= {least}"
        raise TrialContextError(msg)
    return number


def rank() -> int:
    """This task's rank among all tasks of the attempt, from 0 (``$DSE_RANK``; 0 when the
    trial runs one task)."""
    return _count("DSE_RANK", 0, 0)


def local_rank() -> int:
    """This task's rank among the tasks on its node, from 0 (``$DSE_LOCAL_RANK``)."""
    return _count("DSE_LOCAL_RANK", 0, 0)


def node_rank() -> int:
    """The rank of this task's node among the attempt's nodes, from 0 (``$DSE_NODE_RANK``)."""
    return _count("DSE_NODE_RANK", 0, 0)


def world_size() -> int:
    """How many tasks the attempt runs in all (``$DSE_WORLD_SIZE``; 1 for one task)."""
    return _count("DSE_WORLD_SIZE", 1, 1)


def node() -> str:
    """The name of the node this task runs on (``$DSE_NODE``; else this host's name)."""
    return os.environ.get("DSE_NODE") or socket.gethostname()


def nodes() -> list[str]:
    """The names of the attempt's nodes, in node-rank order (``$DSE_NODES``, comma-separated;
    else this node alone)."""
    text = os.environ.get("DSE_NODES", "")
    return [n for n in text.split(",") if n] or [node()]


def is_first() -> bool:
    """Whether this task is rank 0, the one that writes the result (:func:`report`)."""
    return rank() == 0


def data_version() -> str | None:
    """The data version dse expects the trial to read (``$DSE_DATA_VERSION``), or ``None``.

    ``None`` when the campaign declares none. A trial that reads another version should say
    so: ``report(metrics, data_version="<what it read>")``.
    """
    return os.environ.get("DSE_DATA_VERSION") or None


def report(
    metrics: Mapping[str, float],
    *,
    data_version: str | None = None,
    complete: bool = True,
    **extra: Any,
) -> Path:
    """Write the trial's ``result.json`` atomically and return its path.

    The file holds ``{"complete": ..., "metrics": {...}, "data_version": ...,
    "environment": ..., **extra}``: ``environment`` (:func:`environment`) names the Python and
    the installed distributions this process ran with, which dse records as the trial's
    dependency digest.
    It is written to a temporary file in the trial directory, flushed and fsynced, then
    renamed over ``result.json``: a reader (dse, after the process ends or is killed) sees
    the previous file or the whole new one, never half of it. Calling ``report`` again
    replaces the result.

    Metrics are written as they are: dse, not this function, judges them. A NaN or an
    infinity is written as the JSON extension token ``NaN`` / ``Infinity`` (the controller
    reads those and records the trial as ``invalid_metric``), so a diverged run is recorded
    as such instead of crashing the workload at its last line. numpy and similar scalars are
    written as the plain numbers they hold.

    :param metrics: metric name to value; must hold every objective metric of the campaign.
    :param data_version: the data version the trial actually read; default: the expected
        one (:func:`data_version`), ``null`` when there is none.
    :param complete: ``False`` records partial results that dse will never score
        (``incomplete_output``), e.g. a run that stopped early on purpose.
    :param extra: more JSON-serialisable keys to keep in the file (notes, paths, counters).
    :raises TypeError: a value cannot be written as JSON (nothing is written then).

    A trial of several tasks (``nodes``, ``tasks_per_node``) has one result, written by its
    first task: on any other rank (:func:`rank` > 0) this writes nothing and returns the
    path the first rank writes, so every rank may run the same code.
    """
    directory = trial_dir()
    # Serialise first: a value JSON cannot hold raises before any file is touched.
    text = _result_text(metrics, data_version or os.environ.get("DSE_DATA_VERSION") or None,
                        complete, extra)
    if not is_first():
        return directory / RESULT_FILE
    return _replace_result(directory, text)


def write_result(
    directory: Path,
    metrics: Mapping[str, float],
    *,
    data_version: str | None = None,
    complete: bool = True,
    **extra: Any,
) -> Path:
    """Write ``result.json`` in the trial directory *directory*, as :func:`report` writes it
    (the same document, replaced atomically), for code that is handed a trial's directory
    rather than run inside it: ``dse.ask_tell``'s ``tell``. Returns its path.

    :param data_version: the data version the trial read (``null`` when ``None``).
    :raises TypeError: a value cannot be written as JSON (nothing is written then).
    """
    return _replace_result(directory, _result_text(metrics, data_version, complete, extra))


def _result_text(metrics: Mapping[str, float], data_version: str | None, complete: bool,
                 extra: Mapping[str, Any]) -> str:
    """The JSON of a result document (what :func:`report` writes)."""
    document: dict[str, Any] = {
        "complete": complete,
        "metrics": dict(metrics),
        "data_version": data_version,
        "environment": environment(),
    }
    document.update(extra)
    return json.dumps(document, allow_nan=True, default=_plain)


def _replace_result(directory: Path, text: str) -> Path:
    """Replace ``result.json`` in *directory* with *text*: a temporary file, fsynced, renamed
    over it, the directory synced; its path."""
    target = directory / RESULT_FILE
    temporary = directory / f".{RESULT_FILE}.{os.getpid()}.{next(_temp_names)}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    sync_directory(directory)
    return target


def report_progress(step: int, metrics: Mapping[str, float]) -> Path:
    """Add a point to the trial's learning curve: *metrics* as they stand after *step*.

    Appends one line to ``progress.jsonl`` in the trial directory (``DSE_PROGRESS_FILE``)::

        {"step": 120, "metrics": {"loss": 0.41}, "attempt": 1, "at": 1733000000.5}

    in a single ``write`` to a file opened for appending, so a reader never sees half a line
    it would take for whole. dse reads the new lines of every running trial at each polling
    pass and keeps them in the record as the trial's learning curve (``dse show``). *step* is
    the workload's own measure of progress (an epoch, an iteration, samples seen): a whole
    number, at least 0, growing; an attempt resumed from a checkpoint goes on from the step it
    reached. A workload in another language appends the same lines (``step`` and
    ``metrics`` are required; ``attempt`` defaults to ``DSE_ATTEMPT``, ``at`` to when dse read
    the line).

    Returns the file's path. On a task other than the first (:func:`rank` > 0) nothing is
    written, as for :func:`report`.

    :raises ValueError: *step* is not a whole number from 0 to 2**63 - 1 (what the record
        keeps).
    :raises TypeError: a value cannot be written as JSON (nothing is written then).
    """
    directory = trial_dir()
    line = _progress_line("report_progress", step, metrics, attempt())
    if not is_first():
        return directory / PROGRESS_FILE
    return _append_progress(directory, line)


def append_progress(directory: Path, step: int, metrics: Mapping[str, float], *,
                    attempt: int) -> Path:
    """Add a point to the learning curve of the trial whose directory is *directory* (attempt
    *attempt*), as :func:`report_progress` adds it inside a trial: for code handed a trial's
    directory (``dse.ask_tell``'s trials). Returns the progress file's path.

    :raises ValueError: *step* is not a whole number from 0 to 2**63 - 1.
    :raises TypeError: a value cannot be written as JSON (nothing is written then).
    """
    return _append_progress(directory, _progress_line("append_progress", step, metrics,
                                                      attempt))


def _progress_line(caller: str, step: int, metrics: Mapping[str, float], number: int) -> bytes:
    """One line of ``progress.jsonl`` (checked and serialised before any file is touched)."""
    if not is_int64(step) or step < 0:
        raise ValueError(f"dse.trial.{caller}(): step must be a whole number from 0 to"
                         f" {INT64_MAX}, not {step!r:.40}")
    return (json.dumps({"step": step, "metrics": dict(metrics), "attempt": number,
                        "at": time.time()}, allow_nan=True, default=_plain) + "\n").encode()


def _append_progress(directory: Path, line: bytes) -> Path:
    """Append *line* to ``progress.jsonl`` in *directory* in one ``write``; its path."""
    target = directory / PROGRESS_FILE
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                 | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        data = line
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)
    return target


_ENVIRONMENT: dict[str, Any] = {}


def environment() -> dict[str, Any]:
    """The environment this trial runs in: the Python version and implementation, and the
    installed distributions (``{name: version}``, names normalised) that Python can import.

    :func:`report` writes it into ``result.json``; dse keeps it once per distinct digest and
    stamps the trial with that digest. The controller asks the command's interpreter the same
    question before any trial runs (its digest is part of a result's identity), so the two
    digests agree when the trial ran where it was dispatched. A workload in another language
    may write the same ``environment`` object itself (``distributions`` naming its own
    packages)."""
    if not _ENVIRONMENT:
        from dse._envprobe import environment as probe

        _ENVIRONMENT.update(probe())
    return {**_ENVIRONMENT, "distributions": dict(_ENVIRONMENT["distributions"])}


def _plain(value: Any) -> Any:
    """JSON for the numbers of numeric libraries: numpy/torch scalars, arrays, Decimal."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if hasattr(value, "__float__"):
        return float(value)
    msg = f"dse.trial.report(): a value of type {type(value).__name__} cannot be written as JSON"
    raise TypeError(msg)
