"""The ``[backend.slurm]`` table, read once for every mode (``mode = "auto"``, the default,
``"jobs"`` or ``"allocation"``); each error names the file and the key."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from dse import ConfigError, did_you_mean, parse_duration
from dse_slurm._script import SlurmOptions

if TYPE_CHECKING:
    from collections.abc import Mapping

MODES = ("auto", "jobs", "allocation")
AUTO_THRESHOLD_S = 600.0
"""``mode = "auto"`` runs trials whose time limit is at most this in an allocation."""
ALLOCATION_KEYS = (
    "allocation_nodes", "allocation_time", "allocation_cpus", "allocation_grace",
)
OPTION_KEYS = frozenset({
    "partition", "account", "qos", "constraint", "exclusive", "extra_sbatch", "setup",
    "signal_lead", "array_throttle", "python", "sacct_lag", "command_timeout",
    "mode", "auto_threshold", *ALLOCATION_KEYS,
})


class Timing(TypedDict, total=False):
    """How long Slurm's commands may take, in seconds (keys the table sets)."""

    sacct_lag: float
    command_timeout: float


class Allocation(TypedDict, total=False):
    """The pilot job of allocation mode (keys the table sets)."""

    allocation_nodes: int
    allocation_time: float
    allocation_cpus: int
    allocation_grace: float


@dataclass(frozen=True, slots=True)
class SlurmTable:
    """A checked ``[backend.slurm]`` table."""

    options: SlurmOptions
    """What goes into the batch scripts."""
    mode: str
    """``"jobs"`` (job arrays), ``"allocation"`` (steps of a pilot job) or ``"auto"`` (one
    of them, chosen by the trials' time limit: :meth:`dse_slurm.SlurmBackend.for_trials`)."""
    timing: Timing
    """``sacct_lag`` and ``command_timeout``, where the table sets them."""
    allocation: Allocation
    """``allocation_nodes``, ``allocation_time``, ``allocation_cpus`` and
    ``allocation_grace``, where the table sets them."""
    auto_threshold: float = AUTO_THRESHOLD_S
    """``mode = "auto"``: the longest time limit that still picks the allocation."""


def read_table(
    options: Mapping[str, Any], source: str, *, default_mode: str = "auto"
) -> SlurmTable:
    """Check *options* (the ``[backend.slurm]`` table of the file *source*)."""
    where = f"{source}: backend.slurm"
    unknown = sorted(set(options) - OPTION_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {unknown}"
                          + did_you_mean(unknown, OPTION_KEYS))
    values = _script_values(options, where)
    timing = Timing()
    if "sacct_lag" in options:
        timing["sacct_lag"] = parse_duration(options["sacct_lag"], f"{where}.sacct_lag")
    if "command_timeout" in options:
        timing["command_timeout"] = parse_duration(
            options["command_timeout"], f"{where}.command_timeout"
        )
    mode = options.get("mode", default_mode)
    if mode not in MODES:
        raise ConfigError(
            f'{where}.mode: expected "auto", "jobs" or "allocation" (got {mode!r})'
        )
    asked = sorted(key for key in ALLOCATION_KEYS if key in options)
    if asked and mode == "jobs":
        raise ConfigError(f'{where}: {asked} need mode = "allocation" or "auto"')
    threshold = AUTO_THRESHOLD_S
    if "auto_threshold" in options:
        if mode != "auto":
            raise ConfigError(f'{where}: auto_threshold needs mode = "auto"')
        threshold = parse_duration(options["auto_threshold"], f"{where}.auto_threshold")
    allocation = _allocation_values(options, where)
    try:
        script_options = SlurmOptions(**values)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return SlurmTable(script_options, mode, timing, allocation, threshold)


def _script_values(options: Mapping[str, Any], where: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key in ("partition", "account", "qos", "constraint", "python"):
        if key in options:
            if not isinstance(options[key], str):
                raise ConfigError(f"{where}.{key}: expected a string")
            values[key] = options[key]
    if "exclusive" in options:
        if not isinstance(options["exclusive"], bool):
            raise ConfigError(f"{where}.exclusive: expected true or false")
        values["exclusive"] = options["exclusive"]
    for key in ("extra_sbatch", "setup"):
        if key in options:
            items = options[key]
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ConfigError(f"{where}.{key}: expected a list of strings")
            values[key] = tuple(items)
    if "array_throttle" in options:
        throttle = options["array_throttle"]
        if not isinstance(throttle, int) or isinstance(throttle, bool):
            raise ConfigError(f"{where}.array_throttle: expected an integer")
        values["array_throttle"] = throttle
    if "signal_lead" in options:
        values["signal_lead_s"] = math.ceil(
            parse_duration(options["signal_lead"], f"{where}.signal_lead")
        )
    return values


def _allocation_values(options: Mapping[str, Any], where: str) -> Allocation:
    values = Allocation()
    if "allocation_nodes" in options:
        values["allocation_nodes"] = _positive(options["allocation_nodes"],
                                               f"{where}.allocation_nodes")
    if "allocation_cpus" in options:
        values["allocation_cpus"] = _positive(options["allocation_cpus"],
                                              f"{where}.allocation_cpus")
    if "allocation_time" in options:
        values["allocation_time"] = parse_duration(
            options["allocation_time"], f"{where}.allocation_time"
        )
    if "allocation_grace" in options:
        values["allocation_grace"] = parse_duration(
            options["allocation_grace"], f"{where}.allocation_grace"
        )
    return values


def _positive(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where}: expected a positive integer")
    return value
