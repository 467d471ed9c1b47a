"""dse-core's own plugin: registers the probe backend, the built-in scorers and stopping rules
through the public hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.hookspecs import hookimpl
from dse.plugins._deferred import Deferred

if TYPE_CHECKING:
    from dse.plugins._backend import Backend
    from dse.plugins._protocols import StoppingRule
    from dse.plugins._scoring import Scorer


@hookimpl
def dse_register_backends() -> list[type[Backend]]:
    from dse.testing._probe import ProbeBackend

    return [ProbeBackend]


@hookimpl
def dse_register_scorers() -> list[type[Scorer]]:
    from dse.plugins._scoring import DefaultScorer, RatioScorer

    return [DefaultScorer, RatioScorer]


@hookimpl
def dse_register_stopping_rules() -> list[type[StoppingRule]]:
    from dse.plugins._pbt import PbtRule
    from dse.plugins._stopping_rules import AshaRule, HyperbandRule, MedianRule

    return [MedianRule, AshaRule, HyperbandRule, PbtRule]


@hookimpl
def dse_register_integrations() -> list[Deferred]:
    # Deferred: MLflow, TensorBoard and W&B are imported only by a campaign that names them.
    return [Deferred("mlflow", "dse.integrations._mlflow:MlflowIntegration", "1"),
            Deferred("tensorboard", "dse.integrations._tensorboard:TensorBoardIntegration", "1"),
            Deferred("wandb", "dse.integrations._wandb:WandbIntegration", "1")]
