"""The ``[backend.ray]`` table, checked, and the controller's connection to the cluster."""

from __future__ import annotations

import logging
import math
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse import ConfigError, did_you_mean, parse_duration

if TYPE_CHECKING:
    from collections.abc import Mapping

log = logging.getLogger("dse.ray")

KEYS = ("address", "namespace", "grace", "linger", "resources", "connect_timeout",
        "shared_filesystem", "node_dir", "return_limit", "working_dir")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30}


@dataclass(frozen=True, slots=True)
class RayOptions:
    """What ``[backend.ray]`` says (see ``docs/ray.md``)."""

    address: str = "auto"
    """The cluster: ``"auto"`` (``RAY_ADDRESS``, else the cluster started on this machine),
    ``"host:port"`` of its head (the controller joins as a driver) or ``"ray://host:port"``
    (Ray Client, from outside the cluster: KubeRay's head service)."""
    namespace: str = "dse"
    """Ray namespace of the attempts' named actors: a controller finds them there again."""
    grace: float = 10.0
    """Seconds between SIGTERM and SIGKILL on a cancel or a time-out."""
    linger: float = 600.0
    """How long an ended attempt's actor waits for its controller to collect it (then it exits
    and frees its node; a later controller reads the exit files instead)."""
    resources: Mapping[str, float] = field(default_factory=dict)
    """Custom Ray resources each node of an attempt asks for (``{"accelerator_v5" = 1}``)."""
    connect_timeout: float = 30.0
    """Seconds to wait for the cluster to answer before giving up in one line."""
    shared_filesystem: bool = True
    """Whether the nodes see the controller's trial directories at the same paths. When not,
    each node runs the trial in a directory of its own under :attr:`node_dir` and the files
    travel through Ray (``_files``)."""
    node_dir: str = ""
    """Without a shared filesystem: where the nodes keep trial directories (``""``: the
    node's temporary directory's ``dse-ray``)."""
    return_limit: int = 64 << 20
    """Without a shared filesystem: the largest file (bytes) brought back to the controller;
    a larger one stays on its node, and the record says where."""
    working_dir: str = ""
    """Without a shared filesystem: where the command runs on the nodes (``""``: the
    campaign's working directory when the node has it, else the trial's directory there)."""


def ray_options(options: Mapping[str, Any], source: str) -> RayOptions:
    """The ``[backend.ray]`` table *options* (of *source*), checked: one-line
    :class:`~dse.ConfigError` naming the key otherwise."""
    where = f"{source}: backend.ray"
    unknown = sorted(set(options) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {unknown}" + did_you_mean(unknown, KEYS))
    values: dict[str, Any] = {}
    for key in ("address", "namespace", "node_dir", "working_dir"):
        if key in options:
            value = options[key]
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{where}.{key}: expected a non-empty string, got {value!r}")
            values[key] = value.strip()
    for key in ("grace", "linger", "connect_timeout"):
        if key in options:
            values[key] = parse_duration(options[key], f"{where}.{key}")
    if "shared_filesystem" in options:
        if not isinstance(options["shared_filesystem"], bool):
            raise ConfigError(f"{where}.shared_filesystem: expected true or false, got"
                              f" {options['shared_filesystem']!r}")
        values["shared_filesystem"] = options["shared_filesystem"]
    if "return_limit" in options:
        values["return_limit"] = parse_size(options["return_limit"], f"{where}.return_limit")
    for key in ("node_dir", "working_dir"):
        if key in values and not values[key].startswith("/"):
            raise ConfigError(f"{where}.{key}: expected an absolute path on the nodes, got"
                              f" {values[key]!r}")
    if "resources" in options:
        table = options["resources"]
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
            and v >= 0 for k, v in table.items()
        ):
            raise ConfigError(f"{where}.resources: expected a table of resource name to a"
                              f" number >= 0, got {table!r}")
        reserved = sorted(set(table) & {"CPU", "GPU", "memory"})
        if reserved:
            raise ConfigError(f"{where}.resources: {reserved} come from [environment] (cpus,"
                              " gpus, memory_mb), not from custom resources")
        values["resources"] = {k: float(v) for k, v in table.items()}
    return RayOptions(**values)


def parse_size(value: object, where: str) -> int:
    """A size: a whole number of bytes, or a string such as ``"64MiB"``, ``"1.5 GB"``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        number = text.rstrip("kmgib ")
        unit = text[len(number):].strip()
        try:
            amount = float(number)
        except ValueError:
            amount = -1.0
        if unit in _UNITS and math.isfinite(amount) and amount >= 0:
            return int(amount * _UNITS[unit])
    raise ConfigError(f"{where}: expected a size such as 64MiB or a number of bytes, got"
                      f" {value!r}")


def _endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) of an explicit address, ``None`` for ``auto``."""
    if address == "auto":
        return None
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        msg = f"backend.ray.address: {address!r} is not 'auto', 'host:port' or 'ray://host:port'"
        raise ConfigError(msg)
    return host, int(port)


def connect(opts: RayOptions) -> None:
    """Join the cluster as a driver (once per process; later backends share the connection).

    :raises ConfigError: nothing answers at the address (one line, naming it)."""
    import ray

    if ray.is_initialized():
        return
    endpoint = _endpoint(opts.address)
    if endpoint is not None:
        try:
            socket.create_connection(endpoint, timeout=opts.connect_timeout).close()
        except OSError as exc:
            msg = (f"backend.ray.address: no Ray cluster answers at {opts.address!r}"
                   f" ({exc.strerror or exc})")
            raise ConfigError(msg) from None
    elif not os.environ.get("RAY_ADDRESS") and not _local_cluster():
        msg = ("backend.ray.address: 'auto' found no Ray cluster (RAY_ADDRESS is not set and"
               " none was started on this machine with `ray start --head`)")
        raise ConfigError(msg)
    try:
        ray.init(address=opts.address, namespace=opts.namespace, log_to_driver=False,
                 logging_level=logging.WARNING, configure_logging=False)
    except Exception as exc:  # noqa: BLE001 - any failure to join is the address's, said once
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        msg = f"backend.ray.address: cannot join the Ray cluster at {opts.address!r}: {first}"
        raise ConfigError(msg) from None


def _local_cluster() -> bool:
    """Whether ``ray start --head`` left its address on this machine."""
    import tempfile

    return os.path.exists(os.path.join(tempfile.gettempdir(), "ray", "ray_current_cluster"))
