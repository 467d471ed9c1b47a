"""The campaign's scorer, built from its ``[scorer]`` table: a registered scorer class by name
(through the plugin manager), or a ``module:function``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.model._constraints import is_callable_ref
from dse.model._errors import ConfigError, PluginError
from dse.plugins._scoring import Scorer, function_scorer

if TYPE_CHECKING:
    from dse.campaign._model import Campaign
    from dse.plugins._plugins import PluginManager


def build_scorer(campaign: Campaign, plugins: PluginManager) -> Scorer:
    """The campaign's scorer: a registered one by name, or ``module:function``."""
    spec = campaign.scorer
    source = str(campaign.source or "<campaign>")
    where = f"{source}: scorer.name"
    objective = campaign.objectives[0]
    scorer: Scorer
    if is_callable_ref(spec.name):
        if spec.options:
            key = sorted(spec.options)[0]
            raise ConfigError(
                f"{source}: scorer.{key}: unknown key; a 'module:function' scorer takes only"
                " 'name' and 'direction'"
            )
        base_dir = campaign.source.parent if campaign.source else None
        scorer = function_scorer(spec.name, objective, spec, base_dir, where)
    else:
        cls = _scorer_class(plugins, spec.name, source)
        try:
            scorer = cls(objective, **spec.options)
        except TypeError as exc:
            raise ConfigError(f"{source}: scorer.{spec.name}: bad option(s): {exc}") from None
        if not isinstance(getattr(scorer, "version", None), str):
            scorer.version = plugins.scorers[spec.name].version
        if spec.direction is not None:
            scorer.direction = spec.direction
    if scorer.needs_baseline and campaign.baseline is None:
        raise ConfigError(
            f"{where}: scorer {scorer.name!r} compares against a baseline; add a [baseline]"
            " table with 'params' or 'trial'"
        )
    return scorer


def _scorer_class(plugins: PluginManager, name: str, source: str) -> Any:
    try:
        return plugins.scorer_class(name)
    except PluginError as exc:
        raise PluginError(f"{source}: campaign.scorer: {exc}") from None
