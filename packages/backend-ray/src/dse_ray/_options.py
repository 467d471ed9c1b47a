"""The ``[backend.ray]`` table, checked, and the controller's connection to the cluster."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse import ConfigError, did_you_mean, parse_duration

if TYPE_CHECKING:
    from collections.abc import Mapping

log = logging.getLogger("dse.ray")

KEYS = ("address", "namespace", "grace", "linger", "resources", "connect_timeout")


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


def ray_options(options: Mapping[str, Any], source: str) -> RayOptions:
    """The ``[backend.ray]`` table *options* (of *source*), checked: one-line
    :class:`~dse.ConfigError` naming the key otherwise."""
    where = f"{source}: backend.ray"
    unknown = sorted(set(options) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {unknown}" + did_you_mean(unknown, KEYS))
    values: dict[str, Any] = {}
    for key in ("address", "namespace"):
        if key in options:
            value = options[key]
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{where}.{key}: expected a non-empty string, got {value!r}")
            values[key] = value.strip()
    for key in ("grace", "linger", "connect_timeout"):
        if key in options:
            values[key] = parse_duration(options[key], f"{where}.{key}")
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
