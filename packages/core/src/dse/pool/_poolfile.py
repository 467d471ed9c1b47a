"""A pool file (``dse run pool.toml``): several campaigns sharing resources, each with its
weight, read and checked into a :class:`PoolConfig`."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dse.campaign._campaignfile import check_numbers
from dse.model._errors import ConfigError
from dse.model._units import parse_duration

RESOURCES = ("slots", "cpus", "gpus", "nodes")
"""What a pool can count: trials at once (or outstanding Slurm jobs), CPUs, GPUs."""


POOL_FILE_KEYS = frozenset({"pool", "campaign"})
"""The tables of a pool file: ``[pool]`` and ``[[campaign]]``."""


POOL_KEYS = frozenset({*RESOURCES, "half_life", "max_wait", "wait_factor"})
"""The keys of a pool file's ``[pool]`` table."""


POOL_CAMPAIGN_KEYS = frozenset({"file", "weight"})
"""The keys of each ``[[campaign]]`` table of a pool file."""


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """What several campaigns share: a capacity, a weight each, and the scheduler's bounds."""

    capacity: Mapping[str, int]
    """``slots`` (trials at once; on Slurm, outstanding jobs), ``cpus``, ``gpus``."""
    weights: Mapping[str, float] = field(default_factory=dict)
    """Each campaign's weight by name (default 1)."""
    half_life: float = 3600.0
    """Seconds after which past usage counts half in the fair share."""
    max_wait: float | None = None
    """Seconds after which a waiting trial goes ahead of the fair-share order."""
    wait_factor: float | None = None
    """A trial that waited this many times its expected duration goes ahead too."""
    campaigns: tuple[Path, ...] = ()
    """The campaign files of a pool file."""
    source: str = "<pool>"
    """The pool file's path, as error messages name it."""


def is_pool_file(path: Path) -> bool:
    """Whether *path* reads as a pool file (a ``[pool]`` table or ``[[campaign]]`` tables)
    rather than a campaign file (whose ``[campaign]`` is one table)."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):  # TOMLDecodeError is a ValueError
        return False  # reading it as a campaign file reports what is wrong
    return "pool" in raw or isinstance(raw.get("campaign"), list)


def load_pool(path: str | Path) -> PoolConfig:
    """Read a pool file: a ``[pool]`` table and one ``[[campaign]]`` table per campaign."""
    path = Path(path)
    where = str(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read: {exc}") from None
    except ValueError as exc:  # TOMLDecodeError, or an integer of over 4300 digits
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    check_numbers(raw, where)
    unknown = sorted(set(raw) - POOL_FILE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown table(s) {unknown}; expected [pool], [[campaign]]")
    table = raw.get("pool", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: pool: expected a table")
    unknown = sorted(set(table) - POOL_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: pool: unknown key(s) {unknown}; expected {sorted(POOL_KEYS)}")
    capacity: dict[str, int] = {}
    for key in RESOURCES:
        value = table.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{where}: pool.{key}: expected a positive integer, got {value!r}")
        capacity[key] = value
    entries = raw.get("campaign", [])
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where}: campaign: expected one or more [[campaign]] tables")
    files: list[Path] = []
    weights: dict[str, float] = {}
    for i, entry in enumerate(entries):
        at = f"{where}: campaign[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("file"), str):
            raise ConfigError(f"{at}: expected a table with 'file' (a campaign file)")
        extra = sorted(set(entry) - POOL_CAMPAIGN_KEYS)
        if extra:
            raise ConfigError(f"{at}: unknown key(s) {extra}; expected 'file' and 'weight'")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not (
            weight > 0 and math.isfinite(weight)
        ):
            raise ConfigError(f"{at}.weight: expected a positive number, got {weight!r}")
        file = path.parent / entry["file"]
        files.append(file)
        weights[str(file.resolve())] = float(weight)
    factor = table.get("wait_factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, int | float)
                               or factor <= 0):
        raise ConfigError(f"{where}: pool.wait_factor: expected a positive number, got {factor!r}")

    def duration(key: str, default: float | None) -> float | None:
        value = table.get(key)
        return default if value is None else parse_duration(value, f"{where}: pool.{key}")

    half_life = duration("half_life", 3600.0)
    assert half_life is not None
    return PoolConfig(
        capacity=capacity, weights=weights, half_life=half_life,
        max_wait=duration("max_wait", None),
        wait_factor=None if factor is None else float(factor),
        campaigns=tuple(files), source=where,
    )
