"""A real terminal for tests: a tmux server of the test's own, its screen read as text.

A test takes the :func:`tmux` fixture (a session name on its own server), runs a command in
it (:func:`start`, or :func:`dse_command` for ``dse ARGS`` in a project), and waits for the
screen it needs (:func:`wait_screen`). The command runs without ``COLUMNS`` and ``LINES``: a
tmux server started from pytest exports ``COLUMNS=80``, which Rich would take for the width.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from support.cli import dse_env
from support.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def screen(session: str) -> str:
    """What *session*'s pane shows now."""
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True, check=True, timeout=30).stdout


def wait_screen(session: str, pattern: str, timeout: float = 120) -> str:
    """The screen of *session* once *pattern* (a multi-line regex) is on it; fail after
    *timeout* seconds, showing the screen."""
    seen = [""]

    def shown() -> bool:
        seen[0] = screen(session)
        return re.search(pattern, seen[0], re.MULTILINE) is not None

    wait_until(shown, timeout, f"{pattern!r} on the screen", interval=0.2,
               seen=lambda: "\n" + seen[0])
    return seen[0]


def start(session: str, command: str, width: int = 160, height: int = 50) -> None:
    """Run the shell *command* (without ``COLUMNS``, ``LINES``), then ``echo EXIT=$?``, in a
    new detached tmux *session* of *width* x *height*."""
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(width), "-y",
                    str(height), "unset COLUMNS LINES; export TERM=xterm-256color;"
                    f" {command}; echo EXIT=$?; sleep 600"], check=True, timeout=30)


def dse_command(project: Path, *args: str) -> str:
    """The shell command running ``dse ARGS`` in *project* with the test plugin loaded."""
    env = dse_env(project)
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in ("PYTHONPATH", "DSE_PLUGINS"))
    return (f"cd {shlex.quote(str(project))} && env {exports} {shlex.quote(sys.executable)}"
            f" -m dse {' '.join(args)}")


@pytest.fixture
def tmux(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tmux session name, on a tmux server of this test's own (its socket in tmp_path)."""
    assert shutil.which("tmux"), "tmux is needed (apt-get install tmux)"
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))
    session = f"dse-term-{os.getpid()}"
    yield session
    subprocess.run(["tmux", "kill-server"], capture_output=True, check=False, timeout=30)
