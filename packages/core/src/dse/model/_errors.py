"""The one error hierarchy of dse and the exit codes of the ``dse`` command.

Every error a user can cause derives from :class:`DseError` and also from the builtin a
caller would naturally catch. Messages are complete sentences built before the ``raise``:
they name the file, the key or the plugin concerned and what was expected, so the CLI can
print them as one line. A spent budget or a failed trial is a *status*, never an exception.
"""

from __future__ import annotations

import difflib
import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


class DseError(Exception):
    """Root of every error raised by dse on purpose."""


class ConfigError(DseError, ValueError):
    """A campaign file, a search space or an option is malformed.

    The message names the file, the key and what was expected.
    """


class PluginError(DseError, RuntimeError):
    """A plugin failed to load, registered a duplicate name, or a name is unknown."""


class AgentError(PluginError):
    """An agent (a plugin's code) raised in a call, or answered one with the wrong type.

    The message names the agent, the plugin and distribution it comes from, and the call
    (``__init__()``, ``propose()``, ``observe()``); the campaign ends, recorded as failed.
    """


class ConstraintError(DseError, RuntimeError):
    """A user constraint raised instead of answering ``True`` or ``False``."""


class StoreError(DseError, RuntimeError):
    """The SQLite record cannot be opened or has an unknown schema version."""


class DamagedRecordError(StoreError):
    """The record's file is damaged: truncated, a page overwritten, not a SQLite file at all.
    The message names the file and what SQLite found; nothing was written to it (a write
    there could spread the damage). ``dse doctor`` says what can still be read, and
    ``dse doctor --salvage OUT`` writes a new record of it."""


class StorageError(DseError, OSError):
    """The machine refused a write dse must make: a full disk, a read-only record or
    workspace. The message names the file; nothing already recorded is lost (SQLite rolls
    the refused transaction back)."""


class LockedError(DseError, RuntimeError):
    """The campaign is held by another controller (the message names its host and pid)."""


class LeaseLostError(LockedError):
    """Another controller took over the campaign: this one's lease expired (it was stopped
    or stalled past it). Its commit that found out failed whole; it stops writing."""


class BackendError(DseError, RuntimeError):
    """A backend could not do what it was asked (for example, a submission was refused)."""


class NoResultError(DseError, RuntimeError):
    """:func:`dse.run`: the run ended with no completed trial (every trial failed, or the
    campaign stopped after failures in a row): no result about the design to act on. The
    message says how it ended and why the first failed trial failed (its error, its log);
    :attr:`results` is the run as the record has it (every trial, its message and logs)."""

    def __init__(self, message: str, results: object) -> None:
        super().__init__(message)
        self.results = results
        """The run's :class:`dse.Results`."""


class RunWarning(UserWarning):
    """What ``dse run`` prints as ``dse: warning: ...`` while a campaign runs (fewer trials at
    a time than ``max_parallelism`` asks, an interruption pattern, the data changed...),
    issued by :func:`dse.run` as a Python warning: the ``warnings`` module's filters apply
    (``warnings.simplefilter("error", dse.RunWarning)`` turns each into an exception)."""


def did_you_mean(unknown: Iterable[str], known: Iterable[str]) -> str:
    """The end of an "unknown name" message: ``"; did you mean 'max_parallelism'?"`` for the
    closest of *known* to a name of *unknown* (``difflib``'s ratio at least 0.6; with several
    unknown names, ``"...'cpus' for 'cpu', 'grace' for 'grac'?"``), or ``""`` when none of
    them is close to a known name. Plugins use it for their own options, as dse does for keys,
    plugin names and options::

        raise ConfigError(f"{where}: unknown option(s) {bad}" + did_you_mean(bad, KNOWN))
    """
    choices = sorted(set(known))
    names = list(unknown)
    pairs = [(name, close[0]) for name in names
             if (close := difflib.get_close_matches(name, choices, n=1, cutoff=0.6))]
    if not pairs:
        return ""
    if len(names) == 1:
        return f"; did you mean {pairs[0][1]!r}?"
    return "; did you mean " + ", ".join(f"{right!r} for {wrong!r}" for wrong, right in pairs) + "?"


class ExitCode(enum.IntEnum):
    """Exit codes of the ``dse`` command."""

    OK = 0
    """The command succeeded; a campaign that ended by exhausting its budget is also OK."""
    INTERNAL_ERROR = 1
    """A bug in dse or a plugin: the message says where."""
    USAGE_ERROR = 2
    """Bad input: a malformed campaign file, an unknown plugin, a raising constraint."""
    ENVIRONMENT_ERROR = 3
    """The machine refused: a full disk, a read-only record or workspace (the message names
    the file). What was recorded is kept; a run left unfinished resumes with ``dse run``."""
    NO_RESULT = 4
    """The campaign ran but has no result: it stopped because ``max_consecutive_failures``
    trials in a row failed the same way, or it ended with no completed trial (none
    completed, none reused)."""
    DAMAGED_RECORD = 5
    """The record is damaged (a truncated file, a page overwritten, not a SQLite file):
    refused in one line before anything is written to it; ``dse doctor`` says what can be
    saved."""
    INTERRUPTED = 130
    """The user stopped the campaign (Ctrl+C or SIGTERM); running trials were cancelled."""
