"""The plugin manager: registration by name, duplicates, autoload switches, loud failures."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

import dse
from dse import PluginError, PluginManager
from dse.testing import ProbeBackend


def test_the_probe_registers_through_the_public_hook() -> None:
    plugins = PluginManager(autoload=False)
    entry = plugins.backends["probe"]
    assert entry.cls is ProbeBackend
    assert entry.distribution == "dse-core"
    assert entry.version == dse.__version__
    assert plugins.backend_class("probe") is ProbeBackend


def test_a_deferred_class_is_imported_only_when_a_campaign_asks_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "heavy_agent.py").write_text(
        "class Heavy:\n    name = 'heavy'\n    version = '2'\n"
        "class Misnamed:\n    name = 'other'\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class Plugin:
        @dse.hookimpl
        def dse_register_agents(self) -> list[Any]:
            return [dse.Deferred("heavy", "heavy_agent:Heavy", version="2"),
                    dse.Deferred("misnamed", "heavy_agent:Misnamed"),
                    dse.Deferred("broken", "no_such_module_here:Agent")]

    plugins = PluginManager(autoload=False, extra=[Plugin()])
    assert sorted(plugins.agents) == ["broken", "heavy", "misnamed"]
    assert plugins.agents["heavy"].class_version == "2"
    assert "heavy_agent" not in sys.modules  # named and listed without importing it
    cls = plugins.agent_class("heavy")
    assert cls.__name__ == "Heavy"
    assert "heavy_agent" in sys.modules
    with pytest.raises(PluginError, match=r"plugin 'extra-0' \(<in-process>\): agent 'misnamed'"
                                          r": heavy_agent:Misnamed is not a class named"):
        plugins.agent_class("misnamed")
    with pytest.raises(PluginError, match=r"agent 'broken' from no_such_module_here:Agent"
                                          r" failed to load: ModuleNotFoundError"):
        plugins.agent_class("broken")


def test_a_deferred_class_must_have_the_version_it_was_registered_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `dse plugins` shows the Deferred's version; the record stamps the class's: the two
    # never disagree unseen.
    (tmp_path / "stale_agent.py").write_text("class Stale:\n    name = 'stale'\n"
                                            "    version = '0.2.0'\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class Plugin:
        @dse.hookimpl
        def dse_register_agents(self) -> list[Any]:
            return [dse.Deferred("stale", "stale_agent:Stale", version="0.1.0")]

    plugins = PluginManager(autoload=False, extra=[Plugin()])
    assert plugins.agents["stale"].class_version == "0.1.0"
    with pytest.raises(PluginError, match=r"agent 'stale': stale_agent:Stale has version"
                                          r" '0.2.0', but was registered as version '0.1.0'"):
        plugins.agent_class("stale")


def test_a_duplicate_name_is_refused_naming_both_plugins() -> None:
    class Impostor(ProbeBackend):
        name: ClassVar[str] = "probe"

    class Plugin:
        @dse.hookimpl
        def dse_register_backends(self) -> list[type[dse.Backend]]:
            return [Impostor]

    plugins = PluginManager(autoload=False, extra=[Plugin()])
    with pytest.raises(PluginError, match=r"'probe' is registered twice.*'core' \(dse-core\)"
                                          r".*'extra-0' \(<in-process>\)"):
        _ = plugins.backends


def test_an_unknown_name_lists_the_installed_ones() -> None:
    class Agent:
        name = "mine"
        version = "1"

    class Plugin:
        @dse.hookimpl
        def dse_register_agents(self) -> list[Any]:
            return [Agent]

    plugins = PluginManager(autoload=False, extra=[Plugin()])
    with pytest.raises(PluginError, match="unknown agent 'other'; installed agents: mine"):
        plugins.agent_class("other")


def test_a_class_without_a_name_is_refused() -> None:
    class Nameless:
        pass

    class Plugin:
        @dse.hookimpl
        def dse_register_agents(self) -> list[Any]:
            return [Nameless]

    with pytest.raises(PluginError, match="has no name"):
        _ = PluginManager(autoload=False, extra=[Plugin()]).agents


def test_disable_autoload_loads_only_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSE_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins = PluginManager()
    assert set(plugins.backends) == {"probe"}
    assert plugins.agents == {}


def test_a_plugin_module_that_fails_to_import_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "broken_dse_plugin_mod.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DSE_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("DSE_PLUGINS", "broken_dse_plugin_mod")
    with pytest.raises(PluginError, match=r"'broken_dse_plugin_mod'.*RuntimeError: boom"):
        PluginManager()
    sys.modules.pop("broken_dse_plugin_mod", None)


def test_a_hook_that_raises_is_named() -> None:
    class Plugin:
        @dse.hookimpl
        def dse_register_backends(self) -> list[type[dse.Backend]]:
            raise ValueError("nope")

    with pytest.raises(PluginError, match="'extra-0': dse_register_backends raised ValueError"):
        _ = PluginManager(autoload=False, extra=[Plugin()]).backends
