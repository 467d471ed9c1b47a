"""OptunaHub's samplers for the optuna agent: ``sampler = "hub:samplers/<package>"`` loads a
package of the OptunaHub registry through ``optunahub.load_module`` (a git checkout of
github.com/optuna/optunahub-registry, cached under ``~/.cache/optunahub`` after the first
download), or of a registry on this machine through ``optunahub.load_local_module`` (``hub =
{ registry_root = "..." }``), and takes its sampler class.

The package's class is the one sampler class it exports (its ``__all__``, else its public
names); ``"hub:samplers/<package>:Class"`` names one where it exports several.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse import ConfigError, did_you_mean

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType

PREFIX = "hub:"
"""How a sampler of OptunaHub is named: ``hub:<package>`` or ``hub:<package>:Class``."""
REMOTE = ("ref", "repo_owner", "repo_name", "base_url", "force_reload")
"""``[agent.optuna] hub`` keys passed to ``optunahub.load_module`` as they are."""
LOCAL = "registry_root"
"""The ``hub`` key that loads from a registry on this machine instead."""
INSTALL = "pip install 'dse-agents[optunahub]'"


def hub_sampler_class(name: str, hub: Mapping[str, Any]) -> type:
    """The sampler class of OptunaHub package *name* (``samplers/<package>``, with an
    optional ``:Class``), loaded as *hub* says (``[agent.optuna] hub``), or a one-line
    :class:`dse.ConfigError`."""
    package, _, attr = name.partition(":")
    package = package.strip("/")
    where = f"agent.optuna.sampler: {PREFIX}{name}"
    if not package:
        msg = f"{where}: expected 'hub:samplers/<package>' (a package of the OptunaHub registry)"
        raise ConfigError(msg)
    module = _load(package, hub, where)
    samplers = _samplers(module)
    if attr:
        found = getattr(module, attr, None)
        if not isinstance(found, type):
            msg = (f"{where}: the package has no class {attr!r} (it exports"
                   f" {sorted(samplers) or 'no sampler'}){did_you_mean([attr], samplers)}")
            raise ConfigError(msg)
        return found
    if len(samplers) != 1:
        msg = (f"{where}: the package exports {sorted(samplers) or 'no sampler class'}; name"
               f" one as 'hub:{package}:<Class>'")
        raise ConfigError(msg)
    return next(iter(samplers.values()))


def _load(package: str, hub: Mapping[str, Any], where: str) -> ModuleType:
    """The package's module, from the registry on GitHub or a local one."""
    known = (*REMOTE, LOCAL)
    unknown = sorted(k for k in hub if k not in known)
    if unknown:
        msg = (f"agent.optuna.hub: unknown key(s) {unknown}; known: {sorted(known)}"
               f"{did_you_mean(unknown, known)}")
        raise ConfigError(msg)
    if LOCAL in hub and any(k in hub for k in REMOTE):
        msg = (f"agent.optuna.hub: {LOCAL} (a registry on this machine) takes none of"
               f" {list(REMOTE)} (a registry to download from)")
        raise ConfigError(msg)
    try:
        optunahub: Any = importlib.import_module("optunahub")
    except ImportError:
        msg = f"{where}: OptunaHub is not installed: {INSTALL}"
        raise ConfigError(msg) from None
    if LOCAL in hub:
        root = Path(str(hub[LOCAL])).expanduser().resolve()
        if not (root / package / "__init__.py").is_file():
            msg = (f"{where}: no OptunaHub package {package!r} under {root}"
                   f" (no {root / package / '__init__.py'})")
            raise ConfigError(msg)
        return _run(lambda: optunahub.load_local_module(package, registry_root=str(root)),
                    where, str(root))
    source = (f"{hub.get('base_url') or 'github.com'}/{hub.get('repo_owner', 'optuna')}/"
              f"{hub.get('repo_name', 'optunahub-registry')}@{hub.get('ref', 'main')}")
    return _run(lambda: optunahub.load_module(package, **{k: hub[k] for k in REMOTE if k in hub}),
                where, source)


def _run(load: Any, where: str, source: str) -> ModuleType:
    """``load()``, its failure one line naming *source*."""
    try:
        module: ModuleType = load()
    except ModuleNotFoundError as exc:
        msg = (f"{where}: the package needs {exc.name!r}, which is not installed (its"
               " README says what to install)")
        raise ConfigError(msg) from None
    except FileNotFoundError:
        msg = f"{where}: no such package in the registry {source}"
        raise ConfigError(msg) from None
    except Exception as exc:  # noqa: BLE001 -- git, the network, the package's own code: one line
        said = getattr(exc, "stderr", None)  # git's own words, when git failed
        text = " ".join((said if isinstance(said, str) and said.strip() else str(exc)).split())
        msg = f"{where}: could not be loaded from {source} ({type(exc).__name__}: {text[:300]})"
        raise ConfigError(msg) from None
    return module


def _samplers(module: ModuleType) -> dict[str, type]:
    """The sampler classes *module* exports, by name."""
    base: Any = importlib.import_module("optuna.samplers").BaseSampler
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    return {n: c for n in names if inspect.isclass(c := getattr(module, n, None))
            and issubclass(c, base) and not inspect.isabstract(c)}
