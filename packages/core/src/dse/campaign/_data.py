"""Data versions: what a campaign's ``[data]`` table declares, turned into one version string.

```toml
[data]
paths = ["data/train.parquet", "data/val/"]   # content digest (files under a directory too)
command = ["git", "-C", "data", "rev-parse", "HEAD"]   # prints a version (git, DVC, ...)
version = "2024-06"                           # or a literal
```

The version is computed when the campaign starts and again before each dispatch batch, so a
dataset replaced mid-campaign is noticed. Path digests are incremental: a file whose size,
modification time and inode did not change is not read again (the digests are cached in the
workspace: :class:`dse.model._digests.FileDigests`), so a large dataset costs one ``stat`` per file
per check.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dse.model._digests import FileDigests
from dse.model._errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["DATA_KEYS", "DataSpec", "DataVersioner", "parse_data"]

DATA_KEYS = frozenset({"paths", "command", "version"})
"""The keys of a ``[data]`` table."""
_CACHE = "data-digests.json"


@dataclass(frozen=True, slots=True)
class DataSpec:
    """The campaign's declared inputs (at least one kind)."""

    paths: tuple[Path, ...] = ()
    command: tuple[str, ...] = ()
    version: str | None = None
    cwd: Path | None = None
    """Where the command runs: the campaign file's directory (its paths are relative to it
    too), wherever ``dse run`` was started."""


def parse_data(raw: object, where: str, base_dir: Path) -> DataSpec | None:
    """The ``[data]`` table; ``None`` when the campaign declares no data."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = sorted(set(raw) - DATA_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}"
                          + did_you_mean(unknown, DATA_KEYS))
    paths = raw.get("paths", [])
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise ConfigError(f"{where}.paths: expected a list of paths")
    command = raw.get("command", [])
    if isinstance(command, str):
        command = command.split()
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        raise ConfigError(f"{where}.command: expected a list of strings")
    version = raw.get("version")
    if version is not None and (not isinstance(version, str) or not version):
        raise ConfigError(f"{where}.version: expected a non-empty string")
    if not paths and not command and version is None:
        raise ConfigError(f"{where}: declare paths, a command or a version")
    return DataSpec(tuple(base_dir / p for p in paths), tuple(command), version, base_dir)


class DataVersioner:
    """Computes the version of a :class:`DataSpec`, caching file digests in *cache_dir*."""

    def __init__(self, spec: DataSpec, *, cache_dir: Path, where: str = "data") -> None:
        self.spec = spec
        self.where = where
        self._digests = FileDigests(cache_dir / _CACHE)

    def compute(self) -> str:
        """The current version; :class:`ConfigError` when a path is missing or the command
        fails (a campaign must never run against an unknown "current")."""
        parts = []
        if self.spec.version is not None:
            parts.append(self.spec.version)
        if self.spec.paths:
            parts.append("sha256:" + self._digest_paths()[:16])
        if self.spec.command:
            parts.append(self._run_command())
        return "+".join(parts)

    def _run_command(self) -> str:
        try:
            proc = subprocess.run(list(self.spec.command), capture_output=True, text=True,
                                  timeout=60, check=False, cwd=self.spec.cwd)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(f"{self.where}.command: cannot run it: {exc}") from None
        out = proc.stdout.strip()
        if proc.returncode != 0 or not out:
            why = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            raise ConfigError(
                f"{self.where}.command: exited {proc.returncode} without a version ({why[0]})"
            )
        return out.splitlines()[0].strip()

    def _files(self) -> list[Path]:
        files: list[Path] = []
        for path in self.spec.paths:
            if path.is_dir():
                files += sorted(p for p in path.rglob("*") if p.is_file())
            elif path.is_file():
                files.append(path)
            else:
                raise ConfigError(f"{self.where}.paths: {path} does not exist")
        return files

    def _digest_paths(self) -> str:
        digests = self._digests
        total = hashlib.sha256()
        for file in self._files():
            key = str(file)
            total.update(f"{key}\0{digests.digest(file)}\n".encode())
        digests.save()
        return total.hexdigest()


