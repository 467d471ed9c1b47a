"""Hook specifications: how plugins extend dse.

A plugin is a module (or object) registered under the entry-point group ``dse``::

    [project.entry-points.dse]
    myplugin = "my_package.dse_plugin"

and implements any of the hooks below with :data:`dse.hookimpl`. dse's own probe backend
and its agents register through these same hooks.

Hooks are called with keyword arguments only; new arguments are added over time, never
reordered, so an implementation names just the arguments it uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from dse.plugins._backend import Backend
    from dse.plugins._deferred import Deferred
    from dse.plugins._integration import Integration
    from dse.plugins._protocols import Agent, StoppingRule
    from dse.plugins._scoring import Scorer

hookspec = pluggy.HookspecMarker("dse")
hookimpl = pluggy.HookimplMarker("dse")
"""The marker of a hook implementation: decorate each ``dse_*`` function of a plugin module
with ``@dse.hookimpl``."""


# -------------------------------------------------------------------------------------------
# Registration: called once when the plugin manager is built
# -------------------------------------------------------------------------------------------


@hookspec
def dse_register_backends() -> list[type[Backend]]:  # type: ignore[empty-body]
    """Return the backend classes this plugin provides.

    Called once per process, when dse first needs a backend (``dse run``, ``dse plugins``).
    Every plugin's result is collected (this is not a first-result hook). Each class must
    subclass :class:`dse.Backend` and set a ``name`` class attribute; that name is what a
    campaign file writes as ``backend = "<name>"``. Two plugins returning the same name is an
    error naming both distributions. The class is built with
    :meth:`dse.Backend.from_options` from the campaign's ``[backend.<name>]`` table.

    :return: a list of :class:`dse.Backend` subclasses (possibly empty).
    """


@hookspec
def dse_register_agents() -> list[type[Agent] | Deferred]:  # type: ignore[empty-body]
    """Return the agent classes this plugin provides.

    Called once per process, when dse first needs an agent. Every plugin's result is
    collected. Each class satisfies the :class:`dse.Agent` protocol and sets ``name`` and
    ``version`` class attributes; the campaign file selects it with ``agent = "<name>"`` and
    it is built as ``cls(space, seed=seed, **options)`` with the ``[agent.<name>]`` table as
    *options*. Two plugins returning the same name is an error naming both distributions.
    An agent whose module is heavy to import may be returned as a :class:`dse.Deferred`
    (its name, ``"module:Class"`` and its ``version``): it is imported only when a campaign
    asks for it, and must then have that name and version. The space it is built with is a
    :class:`dse.Space`; the observations it is told name their proposal
    (:attr:`dse.Observation.proposal`).

    :return: a list of agent classes or :class:`dse.Deferred` (possibly empty).
    """


@hookspec
def dse_register_scorers() -> list[type[Scorer]]:  # type: ignore[empty-body]
    """Return the scorer classes this plugin provides.

    Called once per process, when dse first needs a scorer. Every plugin's result is
    collected. Each class satisfies :class:`dse.Scorer` (``name``, ``version``, ``direction``,
    ``needs_baseline``, ``score(metrics, baseline)``); the campaign file selects it with
    ``[scorer] name = "<name>"`` and it is built as ``cls(objective, **options)`` with the
    primary objective and the rest of the ``[scorer]`` table. A class without a ``version``
    is recorded with its distribution's version. Two plugins returning the same name is an
    error naming both distributions.

    :return: a list of scorer classes (possibly empty).
    """


@hookspec
def dse_register_stopping_rules() -> list[type[StoppingRule]]:  # type: ignore[empty-body]
    """Return the stopping-rule classes this plugin provides.

    Called once per process, when dse first needs a stopping rule. Every plugin's result is
    collected. Each class satisfies :class:`dse.StoppingRule` (``name``, ``version``,
    ``report(trial, step, value)``, ``promotions(stopped)``); the campaign file selects it with
    ``[stopping] rule = "<name>"`` and it is built as
    ``cls(min_step=..., max_step=..., **options)`` with the ``[stopping.<name>]`` table as
    *options*. dse-core registers ``median``, ``asha`` and ``hyperband``. Two plugins
    returning the same name is an error naming both distributions.

    :return: a list of stopping-rule classes (possibly empty).
    """


@hookspec
def dse_register_integrations() -> list[type[Integration] | Deferred]:  # type: ignore[empty-body]
    """Return the integration classes this plugin provides: places a campaign's trials are
    also written to as they end (an experiment tracker, a dashboard's files).

    Called once per process, when a campaign names one. Every plugin's result is collected.
    Each class subclasses :class:`dse.Integration` and sets ``name``; the campaign file
    enables it with an ``[integrations.<name>]`` table, and it is built with
    :meth:`dse.Integration.from_options` from that table. dse-core registers ``mlflow``,
    ``tensorboard`` and ``wandb`` (as :class:`dse.Deferred`: their libraries are imported only
    when a campaign asks for them). Two plugins returning the same name is an error naming
    both distributions.

    :return: a list of integration classes or :class:`dse.Deferred` (possibly empty).
    """
