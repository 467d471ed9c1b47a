"""The code version of a workload: its git commit and a digest of what is not committed.

``git:<commit>`` for a clean checkout, ``git:<commit>+dirty:<digest>`` when the workload's
directory has uncommitted changes (tracked edits and untracked files, the dse workspace
excluded), ``None`` outside a git repository or without git. It is part of every trial's
identity, so a cache never crosses code versions.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["detect_code_version"]


def _git(workdir: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        proc = subprocess.run([git, "-C", str(workdir), *args], capture_output=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc if proc.returncode == 0 else None


def detect_code_version(workdir: Path, *, exclude: Path | None = None) -> str | None:
    """The code version of the workload in *workdir* (see the module docstring); *exclude*
    (the dse workspace) never counts as a change."""
    head = _git(workdir, "rev-parse", "HEAD")
    if head is None:
        return None
    commit = head.stdout.decode().strip()
    spec = ["--", "."]
    if exclude is not None:
        with contextlib.suppress(ValueError):  # a workspace elsewhere needs no exclusion
            spec.append(f":(exclude){exclude.resolve().relative_to(workdir.resolve())}")
    diff = _git(workdir, "diff", "HEAD", "--binary", *spec)
    others = _git(workdir, "ls-files", "--others", "--exclude-standard", "-z", *spec)
    if diff is None or others is None:
        return f"git:{commit}"
    digest = hashlib.sha256(diff.stdout)
    for name in sorted(filter(None, others.stdout.split(b"\0"))):
        digest.update(b"\0" + name + b"\0")
        try:
            digest.update((workdir / name.decode()).read_bytes())
        except OSError:
            continue
    if not diff.stdout and not others.stdout:
        return f"git:{commit}"
    return f"git:{commit}+dirty:{digest.hexdigest()[:12]}"
