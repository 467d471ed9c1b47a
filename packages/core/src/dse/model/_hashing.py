"""Canonical JSON and configuration hashes.

Two proposals with the same config hash are the same trial: the hash covers the coerced
params together with the workload identity (command template and environment, code version,
resources asked, backend and placement) and the data version, so a result is only reused for
a measurement of the same thing (docs/record.md, "The identity of a result"). The prefix
names the identity's version: hashes of an older version never match a new one.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping


def _default(value: Any) -> Any:
    raise TypeError(f"value {value!r} of type {type(value).__name__} is not JSON-serialisable")


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_default
).encode


def canonical_json(value: Any) -> str:
    """Serialise *value* deterministically: sorted keys, no spaces, floats by ``repr``.

    Non-finite floats are refused: they have no canonical JSON form.
    """
    return _CANONICAL(value)


class ConfigHasher:
    """Hashes params for one workload and data version (the constant part is encoded once).

    The digest is sha256 over the canonical JSON of the workload identity, the data version
    and the params, each on its own line.
    """

    __slots__ = ("_prefix",)

    def __init__(
        self, workload: Mapping[str, Any] | None = None, data_version: str | None = None
    ) -> None:
        self._prefix = (
            f"dse-config-v2\n{canonical_json(workload or {})}\n{canonical_json(data_version)}\n"
        ).encode()

    def canonical(self, params: Mapping[str, Any]) -> str:
        """The canonical JSON of *params* (refusing non-finite floats)."""
        for key, value in params.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"param {key!r} is {value!r}; a config hash needs finite values")
        return canonical_json(params)

    def digest(self, canonical_params: str) -> str:
        """The config hash of params already in canonical JSON."""
        return hashlib.sha256(self._prefix + canonical_params.encode()).hexdigest()

    def __call__(self, params: Mapping[str, Any]) -> str:
        return self.digest(self.canonical(params))


def config_hash(
    params: Mapping[str, Any],
    workload: Mapping[str, Any] | None = None,
    data_version: str | None = None,
) -> str:
    """Return the sha256 hex digest identifying one trial.

    :param params: coerced params (see :meth:`dse.Space.coerce`).
    :param workload: identity of what runs: command template and environment, code version,
        resources, backend and placement.
    :param data_version: the version of the data the trial reads, or ``None`` when undeclared.
    """
    return ConfigHasher(workload, data_version)(params)


def lineage_hash(config: str, parent: str, step: int) -> str:
    """The config hash of a trial that starts from a copy of another trial's checkpoint
    (population-based training): its own params' hash *config*, its parent's config hash
    *parent* and the parent's *step* when it was copied. It is not the measurement a fresh
    run of the same params is, nor one from another parent or step."""
    return hashlib.sha256(f"dse-lineage-v1\n{config}\n{parent}\n{step}".encode()).hexdigest()
