"""Building an engine from a campaign: the plugins resolved, the agent and backend made."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from dse.engine._closing import ClosingEngine
from dse.engine._engine import Engine, EngineListener
from dse.integrations._exporter import Exporting, build_targets
from dse.model._errors import PluginError
from dse.plugins._campaign_scorer import build_scorer
from dse.plugins._guard import AgentGuard, agent_class_at
from dse.plugins._plugins import PluginManager
from dse.record._open import read_twin

if TYPE_CHECKING:
    from dse.campaign._model import Campaign
    from dse.model._clock import Clock
    from dse.plugins._backend import Backend
    from dse.plugins._protocols import Runner
    from dse.record._base import Storage


def build_engine(
    campaign: Campaign,
    *,
    store: Storage,
    plugins: PluginManager | None = None,
    listener: EngineListener | None = None,
    clock: Clock | None = None,
    backend: Runner | None = None,
    engine_class: type[Engine] = Engine,
) -> Engine:
    """Resolve the campaign's agent and backend by name and build its engine.

    :param campaign: the campaign (from :func:`dse.load_campaign` or built in Python).
    :param store: the record to write to.
    :param plugins: where names are looked up (default: every installed plugin).
    :param listener: receives progress (the console).
    :param clock: the engine's clock (default: the system clock).
    :param backend: an already-built backend, instead of the campaign's.
    :param engine_class: the engine to build (an :class:`Engine` subclass).
    """
    plugins = plugins or PluginManager()
    source = str(campaign.source or "<campaign>")
    if ":" in campaign.agent:  # a class of the user's own, or of another library
        base_dir = campaign.source.parent if campaign.source else None
        agent_cls = agent_class_at(campaign.agent, base_dir, f"{source}: campaign.agent")
    else:
        agent_cls = _resolve(plugins.agent_class, campaign.agent, source, "agent")
    if backend is None:
        backend_cls = _resolve(plugins.backend_class, campaign.backend, source, "backend")
        built: Backend = backend_cls.from_options(campaign.backend_options, source=source)
        env = campaign.environment
        backend = built.for_trials(time_limit=env.time_limit, resources=env.resources,
                                     parallelism=campaign.max_parallelism)
        backend.expect_command(env.command, shell=env.shell)

    guard = AgentGuard.lookup(plugins, campaign.agent)

    def make_agent() -> Any:
        """The campaign's agent; called again, the same agent afresh (when it is rebuilt)."""
        return guard.build(agent_cls, campaign.space, seed=campaign.seed,
                           where=f"{source}: agent.{campaign.agent}", **campaign.agent_options)

    agent = make_agent()
    scorer = build_scorer(campaign, plugins)
    if campaign.integrations:
        targets = build_targets(campaign, plugins.integration_class)
        listener = Exporting(listener or EngineListener(), campaign, targets,
                             functools.partial(read_twin, store))
    return engine_class(
        campaign, agent=agent, backend=backend, store=store, listener=listener, clock=clock,
        scorer=scorer, agent_factory=make_agent, plugins=plugins,
    )


def closing_engine(
    campaign: Campaign, *, store: Storage, plugins: PluginManager | None = None,
    listener: EngineListener | None = None, backend: Runner | None = None,
) -> Engine:
    """An engine of *campaign* that reopens a run its controller left running only to close
    it (:class:`dse.engine._closing.ClosingEngine`): ``engine.run(resume=RUN)`` waits for its
    running trials, records them in it, starts nothing and ends it ``superseded``."""
    return build_engine(campaign, store=store, plugins=plugins, listener=listener,
                        backend=backend, engine_class=ClosingEngine)


def _resolve(lookup: Any, name: str, source: str, kind: str) -> Any:
    try:
        return lookup(name)
    except PluginError as exc:
        raise PluginError(f"{source}: campaign.{kind}: {exc}") from None
