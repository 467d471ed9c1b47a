"""A real `dse dashboard` process for a test, and the address it printed."""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING

from support.cli import start_dse

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

URL = re.compile(r"dse dashboard: (http://\S+)")


def dashboard(project: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """`dse dashboard --port 0 ARGS` in *project*, and the address it printed."""
    proc = start_dse(project, "dashboard", "--port", "0", *args)
    found: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            match = URL.search(line)
            if match:
                found.append(match[1])
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    assert found, "dse dashboard printed no address within 60 s"
    return proc, found[0]
