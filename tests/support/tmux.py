"""A real terminal for tests: a tmux server of the test's own, its screen read as text."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def screen(session: str) -> str:
    """What *session*'s pane shows now."""
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True, check=True, timeout=30).stdout


def wait_screen(session: str, pattern: str, timeout: float = 90) -> str:
    """The screen of *session* once *pattern* (a multi-line regex) is on it; fail after
    *timeout* seconds, showing the screen."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = screen(session)
        if re.search(pattern, text, re.MULTILINE):
            return text
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} never on the screen:\n{text}")


def start(session: str, command: str, width: int = 160, height: int = 50) -> None:
    """Run the shell *command* in a new detached tmux *session* of *width* x *height*."""
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(width), "-y",
                    str(height), command], check=True, timeout=30)


@pytest.fixture
def tmux(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tmux session name, on a tmux server of this test's own (its socket in tmp_path)."""
    assert shutil.which("tmux"), "tmux is needed (apt-get install tmux)"
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))
    session = f"dse-term-{os.getpid()}"
    yield session
    subprocess.run(["tmux", "kill-server"], capture_output=True, check=False, timeout=30)
