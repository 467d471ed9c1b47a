"""The plugin manager: entry points of group ``dse``, registration by ``name``."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from typing import TYPE_CHECKING, Any

import pluggy

from dse import hookspecs
from dse.model._errors import PluginError, did_you_mean
from dse.plugins._deferred import Deferred

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

GROUP = "dse"


class Registered:
    """One registered backend, agent, scorer or stopping-rule class and where it comes from
    (a :class:`Deferred` class is imported when :attr:`cls` is first read)."""

    __slots__ = ("_cls", "_deferred", "distribution", "kind", "name", "plugin", "version")

    def __init__(self, name: str, kind: str, cls: type | Deferred, plugin: str,
                 distribution: str, version: str) -> None:
        self.name = name
        """The registered name."""
        self.kind = kind
        """``backend``, ``agent``, ``scorer`` or ``stopping rule``."""
        self.plugin = plugin
        """The plugin (entry point) name."""
        self.distribution = distribution
        """The distribution that ships it."""
        self.version = version
        """The distribution's version."""
        self._deferred = cls if isinstance(cls, Deferred) else None
        self._cls = None if isinstance(cls, Deferred) else cls

    @property
    def class_version(self) -> str:
        """The class's own ``version`` (without importing a deferred class)."""
        if self._cls is None and self._deferred is not None:
            return self._deferred.version
        return str(getattr(self.cls, "version", "") or "")

    @property
    def cls(self) -> type:
        """The class (a deferred one imported now; :class:`PluginError` naming the plugin
        when that fails)."""
        if self._cls is None:
            assert self._deferred is not None
            self._cls = self._load(self._deferred)
        return self._cls

    def _load(self, deferred: Deferred) -> type:
        where = f"plugin {self.plugin!r} ({self.distribution}): {self.kind} {self.name!r}"
        module_name, _, attr = deferred.target.partition(":")
        try:
            loaded = getattr(importlib.import_module(module_name), attr)
        except Exception as exc:  # noqa: BLE001 - name the plugin whose class failed to load
            msg = f"{where} from {deferred.target} failed to load: {type(exc).__name__}: {exc}"
            raise PluginError(msg) from None
        if not isinstance(loaded, type) or getattr(loaded, "name", None) != self.name:
            msg = f"{where}: {deferred.target} is not a class named {self.name!r}"
            raise PluginError(msg)
        version = str(getattr(loaded, "version", "") or "")
        if deferred.version and version != deferred.version:
            msg = (f"{where}: {deferred.target} has version {version!r}, but was registered"
                   f" as version {deferred.version!r} (dse.Deferred's version must be the"
                   " class's)")
            raise PluginError(msg)
        return loaded


class PluginManager:
    """Loads plugins and keeps the registry of backends, agents, scorers and stopping rules.

    :param autoload: load the entry points of group ``dse`` (default: unless
        ``DSE_DISABLE_PLUGIN_AUTOLOAD`` is set; without them only dse-core's own plugin is
        registered). The modules named in ``DSE_PLUGINS`` are loaded either way.
    :param extra: plugin objects (modules, or objects with hook implementations) to register
        too, named ``extra-0``, ``extra-1``... (handy in tests).

    Each registry is collected from its hook the first time it is read; a plugin that fails to
    load, a hook that raises and a name registered twice are a :class:`~dse.PluginError`
    naming the plugin.
    """

    def __init__(self, *, autoload: bool | None = None, extra: Iterable[object] = ()) -> None:
        self.pm = pluggy.PluginManager("dse")
        self.pm.add_hookspecs(hookspecs)
        self._dist: dict[str, tuple[str, str]] = {}
        if os.environ.get("DSE_TRACE_PLUGINS"):
            self.pm.trace.root.setwriter(lambda msg: print(msg, end="", file=sys.stderr))
            self.pm.enable_tracing()
        if autoload is None:
            autoload = not os.environ.get("DSE_DISABLE_PLUGIN_AUTOLOAD")
        if autoload:
            self._load_entry_points()
        else:
            from dse.plugins import _builtin

            self.register(_builtin, name="core", distribution=("dse-core", _core_version()))
        for module_name in filter(None, os.environ.get("DSE_PLUGINS", "").split(",")):
            self._load_module(module_name.strip())
        for i, plugin in enumerate(extra):
            self.register(plugin, name=f"extra-{i}", distribution=("<in-process>", ""))
        self._backends: dict[str, Registered] | None = None
        self._agents: dict[str, Registered] | None = None
        self._scorers: dict[str, Registered] | None = None
        self._rules: dict[str, Registered] | None = None
        self._integrations: dict[str, Registered] | None = None

    def register(self, plugin: object, *, name: str, distribution: tuple[str, str]) -> None:
        """Register *plugin* (a module or object with hook implementations)."""
        self.pm.register(plugin, name=name)
        self._dist[name] = distribution
        self._backends = self._agents = self._scorers = self._rules = None
        self._integrations = None

    def _load_entry_points(self) -> None:
        seen: set[str] = set()
        for ep in importlib.metadata.entry_points(group=GROUP):
            if ep.name in seen or self.pm.get_plugin(ep.name) is not None:
                continue
            seen.add(ep.name)
            dist = ep.dist
            dist_name = dist.metadata["Name"] if dist is not None else "<unknown>"
            dist_version = dist.version if dist is not None else ""
            try:
                plugin = ep.load()
            except Exception as exc:  # noqa: BLE001 - a plugin that fails to load fails loudly
                msg = (
                    f"plugin {ep.name!r} ({ep.value}) from {dist_name} failed to load:"
                    f" {type(exc).__name__}: {exc}"
                )
                raise PluginError(msg) from None
            self.register(plugin, name=ep.name, distribution=(dist_name, dist_version))

    def _load_module(self, module_name: str) -> None:
        """Load a plugin named in ``DSE_PLUGINS`` (comma-separated importable modules)."""
        if self.pm.get_plugin(module_name) is not None:
            return
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - a plugin that fails to load fails loudly
            msg = (
                f"plugin module {module_name!r} named in DSE_PLUGINS failed to load:"
                f" {type(exc).__name__}: {exc}"
            )
            raise PluginError(msg) from None
        self.register(module, name=module_name, distribution=("DSE_PLUGINS", ""))

    def _collect(self, hook_name: str, kind: str) -> dict[str, Registered]:
        hook = getattr(self.pm.hook, hook_name)
        registry: dict[str, Registered] = {}
        for impl in hook.get_hookimpls():
            plugin_name = self.pm.get_name(impl.plugin) or "?"
            function: Callable[[], Any] = impl.function
            try:
                classes = function() or []
            except Exception as exc:  # noqa: BLE001 - name the plugin that broke
                msg = f"plugin {plugin_name!r}: {hook_name} raised {type(exc).__name__}: {exc}"
                raise PluginError(msg) from None
            dist, version = self._dist.get(plugin_name, ("<unknown>", ""))
            for cls in classes:
                name = cls.name if isinstance(cls, Deferred) else getattr(cls, "name", None)
                if not isinstance(name, str) or not name:
                    msg = f"plugin {plugin_name!r} ({dist}): {kind} class {cls!r} has no name"
                    raise PluginError(msg)
                if name in registry:
                    other = registry[name]
                    msg = (
                        f"{kind} name {name!r} is registered twice: by plugin"
                        f" {other.plugin!r} ({other.distribution}) and by plugin"
                        f" {plugin_name!r} ({dist})"
                    )
                    raise PluginError(msg)
                registry[name] = Registered(name, kind, cls, plugin_name, dist, version)
        return registry

    @property
    def backends(self) -> dict[str, Registered]:
        """The registered backends, by name (:func:`~dse.hookspecs.dse_register_backends`)."""
        if self._backends is None:
            self._backends = self._collect("dse_register_backends", "backend")
        return self._backends

    @property
    def agents(self) -> dict[str, Registered]:
        """The registered agents, by name (:func:`~dse.hookspecs.dse_register_agents`)."""
        if self._agents is None:
            self._agents = self._collect("dse_register_agents", "agent")
        return self._agents

    @property
    def scorers(self) -> dict[str, Registered]:
        """The registered scorers, by name (:func:`~dse.hookspecs.dse_register_scorers`)."""
        if self._scorers is None:
            self._scorers = self._collect("dse_register_scorers", "scorer")
        return self._scorers

    @property
    def stopping_rules(self) -> dict[str, Registered]:
        """The registered stopping rules, by name
        (:func:`~dse.hookspecs.dse_register_stopping_rules`)."""
        if self._rules is None:
            self._rules = self._collect("dse_register_stopping_rules", "stopping rule")
        return self._rules

    @property
    def integrations(self) -> dict[str, Registered]:
        """The registered integrations, by name
        (:func:`~dse.hookspecs.dse_register_integrations`)."""
        if self._integrations is None:
            self._integrations = self._collect("dse_register_integrations", "integration")
        return self._integrations

    def backend_class(self, name: str) -> type:
        """The backend class registered as *name*; a :class:`~dse.PluginError` listing the
        installed ones (and the distribution to install, for dse's own) when there is none."""
        return self._lookup(self.backends, name, "backend")

    def agent_class(self, name: str) -> type:
        """The agent class registered as *name* (a deferred one imported now); a
        :class:`~dse.PluginError` as :meth:`backend_class` says when there is none, or when
        a deferred one fails to load."""
        return self._lookup(self.agents, name, "agent")

    def scorer_class(self, name: str) -> type:
        """The scorer class registered as *name*; a :class:`~dse.PluginError` listing the
        installed ones when there is none."""
        return self._lookup(self.scorers, name, "scorer")

    def stopping_rule_class(self, name: str) -> type:
        """The stopping-rule class registered as *name*; a :class:`~dse.PluginError` listing
        the installed ones when there is none."""
        return self._lookup(self.stopping_rules, name, "stopping rule")

    def integration_class(self, name: str) -> type:
        """The integration class registered as *name* (a deferred one imported now); a
        :class:`~dse.PluginError` listing the installed ones when there is none."""
        return self._lookup(self.integrations, name, "integration")

    @staticmethod
    def _lookup(registry: dict[str, Registered], name: str, kind: str) -> type:
        if name not in registry:
            installed = ", ".join(sorted(registry)) or "none"
            msg = (f"unknown {kind} {name!r}; installed {kind}s: {installed}"
                   + did_you_mean([name], registry))
            home = _DISTRIBUTIONS.get((kind, name))
            if home is not None:
                msg += f" ({name!r} comes with {home}: pip install {home})"
            raise PluginError(msg)
        return registry[name].cls


_DISTRIBUTIONS = {
    ("agent", "grid"): "dse-agents",
    ("agent", "random"): "dse-agents",
    ("agent", "bayesian"): "dse-agents",
    ("backend", "local"): "dse-backend-local",
    ("backend", "slurm"): "dse-backend-slurm",
}
"""Where the plugins of the dse project live, named when one is asked for but missing."""


def _core_version() -> str:
    from dse._version import __version__

    return __version__
