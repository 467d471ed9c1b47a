"""Calls into an agent, which is a plugin's code: whatever goes wrong in one of them is an
:class:`~dse.AgentError` naming the agent, the plugin and distribution it comes from, and the
call — never an "internal error" of dse.

The engine makes every call to its agent through one :class:`AgentGuard`: ``__init__``
(building it, and rebuilding it from the record), ``propose``, ``observe`` and
``exhausted``. An answer of the wrong type (``propose`` returning ``None``, or something
other than mappings) is refused the same way as a raise. An error of the agent's own
(``KeyboardInterrupt`` aside) ends the campaign: dse cannot tell what the agent would have
proposed, and guessing would change the campaign's trajectory.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dse.model._errors import AgentError, ConfigError, DseError, PluginError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from dse.model._types import Observation
    from dse.plugins._plugins import PluginManager, Registered
    from dse.plugins._protocols import Agent


class AgentGuard:
    """Makes the calls into an agent; a raise or an ill-typed answer is an
    :class:`~dse.AgentError` naming the agent and the call.

    :param registered: where the agent's class was registered (its plugin, distribution and
        version), if it came from a plugin.
    """

    def __init__(self, registered: Registered | None = None) -> None:
        self.registered = registered
        self.calls = 0
        """``propose`` and ``observe`` calls made so far."""
        self.busy_s = 0.0
        """Seconds spent in them so far (what replaying them would cost again)."""

    @classmethod
    def lookup(cls, plugins: PluginManager, name: str) -> AgentGuard:
        """The guard of the agent registered as *name* in *plugins* (none found: a guard that
        names the agent by its class)."""
        try:
            registered = plugins.agents.get(name)
        except PluginError:
            registered = None  # the registry is broken; the class still names the agent
        return cls(registered)

    def describe(self, agent: object) -> str:
        """``agent 'NAME' (version V; plugin 'P' from distribution D VERSION)``."""
        cls = agent if isinstance(agent, type) else type(agent)
        version = getattr(cls, "version", None)
        parts = [f"version {version}"] if version else []
        reg = self.registered
        if reg is not None and issubclass(cls, reg.cls):
            dist = f"{reg.distribution} {reg.version}".strip()
            parts.append(f"plugin {reg.plugin!r} from distribution {dist}")
        else:
            parts.append(f"class {cls.__module__}.{cls.__qualname__}, not from a plugin")
        name = getattr(cls, "name", None) or cls.__name__
        return f"agent {name!r} ({'; '.join(parts)})"

    def error(self, agent: object, call: str, problem: str) -> AgentError:
        """The error for *problem* in *agent*'s *call*: ``<agent>: <call> <problem>``."""
        return AgentError(f"{self.describe(agent)}: {call} {problem}")

    def _raised(self, agent: object, call: str, exc: Exception) -> AgentError:
        return self.error(agent, call, f"raised {type(exc).__name__}: {exc}")

    # -- the calls --------------------------------------------------------------------------

    def build(self, cls: type, *args: Any, where: str, **kwargs: Any) -> Any:
        """``cls(*args, **kwargs)``: options the signature refuses are a
        :class:`~dse.ConfigError` at *where*; the agent's own :class:`~dse.DseError` (its
        option checks) is kept; anything else it raises is an :class:`~dse.AgentError`."""
        try:
            inspect.signature(cls).bind(*args, **kwargs)
        except TypeError as exc:
            raise ConfigError(f"{where}: bad option(s): {exc}") from None
        except ValueError:
            pass  # no signature to check against: the call tells
        try:
            return cls(*args, **kwargs)
        except DseError:
            raise
        except Exception as exc:
            raise self._raised(cls, "__init__()", exc) from exc

    def propose(
        self, agent: Agent, n: int, in_flight: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """``agent.propose(n, in_flight)`` as a list of mappings."""
        began = time.perf_counter()
        try:
            answer = agent.propose(n, in_flight)
            if isinstance(answer, (str, bytes, Mapping)) or not isinstance(answer, Iterable):
                raise self.error(agent, "propose()", f"returned {_kind(answer)}, not a sequence"
                                 " of proposals (mappings of parameter name to value)")
            proposals = list(answer)
        except AgentError:
            raise
        except Exception as exc:
            raise self._raised(agent, "propose()", exc) from exc
        finally:
            self.calls, self.busy_s = self.calls + 1, self.busy_s + time.perf_counter() - began
        for i, proposal in enumerate(proposals):
            if not isinstance(proposal, Mapping):
                raise self.error(agent, "propose()", f"returned {_kind(proposal)} as proposal"
                                 f" {i} (expected a mapping of parameter name to value)")
        return proposals

    def observe(self, agent: Agent, observations: Sequence[Observation]) -> None:
        """``agent.observe(observations)``."""
        began = time.perf_counter()
        try:
            agent.observe(observations)
        except Exception as exc:
            raise self._raised(agent, "observe()", exc) from exc
        finally:
            self.calls, self.busy_s = self.calls + 1, self.busy_s + time.perf_counter() - began

    def snapshot(self, agent: Agent) -> str | None:
        """``agent.snapshot()`` as JSON; ``None`` when the agent has no snapshot or gives none
        now. Anything but a JSON-serialisable answer is an :class:`~dse.AgentError`."""
        method = getattr(agent, "snapshot", None)
        if method is None or not callable(getattr(agent, "restore", None)):
            return None
        try:
            state = method()
        except Exception as exc:
            raise self._raised(agent, "snapshot()", exc) from exc
        if state is None:
            return None
        try:
            return json.dumps({"version": _version(agent), "state": state},
                              separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise self.error(agent, "snapshot()", f"returned what JSON cannot hold ({exc})"
                             ) from None

    def restore(self, agent: Agent, snapshot: str) -> bool:
        """``agent.restore(state)`` with the state :meth:`snapshot` recorded; ``False`` (and
        nothing restored) when the agent cannot restore or the snapshot is of another version
        of it."""
        doc = json.loads(snapshot)
        if doc.get("version") != _version(agent) or not callable(getattr(agent, "restore", None)):
            return False
        try:
            agent.restore(doc["state"])  # type: ignore[attr-defined]
        except Exception as exc:
            raise self._raised(agent, "restore()", exc) from exc
        return True

    def exhausted(self, agent: Agent) -> bool:
        """``agent.exhausted``."""
        try:
            return bool(agent.exhausted)
        except Exception as exc:
            raise self._raised(agent, "exhausted (a property)", exc) from exc


def _version(agent: object) -> str:
    """The version of *agent*'s class (a snapshot is restored only into the same)."""
    return str(getattr(type(agent), "version", "") or "")


def _kind(value: object) -> str:
    """*value*'s type in words, with a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


AGENT_METHODS = ("propose", "observe")
"""What a class named ``module:Class`` must have to be an agent (and ``exhausted``)."""


def agent_class_at(text: str, base_dir: Path | None, where: str) -> type:
    """The agent class ``agent = "module:Class"`` names (imported beside the campaign file
    first): a class with the :class:`~dse.Agent` protocol's ``propose``, ``observe`` and
    ``exhausted``; a :class:`~dse.ConfigError` in one line naming what it lacks otherwise.
    Its behaviour is what :class:`dse.testing.AgentContract` checks, in its author's tests."""
    from dse.model._constraints import is_callable_ref, load_callable

    if not is_callable_ref(text):
        raise ConfigError(f"{where}: expected a registered agent name or 'module:Class', got"
                          f" {text!r}")
    found = load_callable(text, base_dir, where)
    if not isinstance(found, type):
        raise ConfigError(f"{where}: {text} is not a class (an agent is a class built as"
                          " cls(space, seed=seed, **options))")
    lacks = [m for m in AGENT_METHODS if not callable(getattr(found, m, None))]
    lacks += [] if hasattr(found, "exhausted") else ["exhausted"]
    if lacks:
        raise ConfigError(f"{where}: {text} is not a dse.Agent: it has no {', '.join(lacks)}"
                          " (docs/plugins.md, \"Writing an agent\")")
    return found
