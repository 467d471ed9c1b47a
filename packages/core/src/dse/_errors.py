"""The one error hierarchy of dse and the exit codes of the ``dse`` command.

Every error a user can cause derives from :class:`DseError` and also from the builtin a
caller would naturally catch. Messages are complete sentences built before the ``raise``:
they name the file, the key or the plugin concerned and what was expected, so the CLI can
print them as one line. A spent budget or a failed trial is a *status*, never an exception.
"""

from __future__ import annotations

import enum


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


class StorageError(DseError, OSError):
    """The machine refused a write dse must make: a full disk, a read-only record or
    workspace. The message names the file; nothing already recorded is lost (SQLite rolls
    the refused transaction back)."""


class LockedError(DseError, RuntimeError):
    """The campaign is held by another controller (the message names its host and pid)."""


class BackendError(DseError, RuntimeError):
    """A backend could not do what it was asked (for example, a submission was refused)."""


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
    INTERRUPTED = 130
    """The user stopped the campaign (Ctrl+C or SIGTERM); running trials were cancelled."""
