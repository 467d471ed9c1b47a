"""dse-core's own plugin: registers the probe backend and the built-in scorers through the
public hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.hookspecs import hookimpl

if TYPE_CHECKING:
    from dse._backend import Backend
    from dse._scoring import Scorer


@hookimpl
def dse_register_backends() -> list[type[Backend]]:
    from dse.testing._probe import ProbeBackend

    return [ProbeBackend]


@hookimpl
def dse_register_scorers() -> list[type[Scorer]]:
    from dse._scoring import DefaultScorer, RatioScorer

    return [DefaultScorer, RatioScorer]
