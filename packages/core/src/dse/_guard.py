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
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dse._errors import AgentError, ConfigError, DseError, PluginError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dse._plugins import PluginManager, Registered
    from dse._protocols import Agent
    from dse._types import Observation


class AgentGuard:
    """Makes the calls into an agent; a raise or an ill-typed answer is an
    :class:`~dse.AgentError` naming the agent and the call.

    :param registered: where the agent's class was registered (its plugin, distribution and
        version), if it came from a plugin.
    """

    def __init__(self, registered: Registered | None = None) -> None:
        self.registered = registered

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
        for i, proposal in enumerate(proposals):
            if not isinstance(proposal, Mapping):
                raise self.error(agent, "propose()", f"returned {_kind(proposal)} as proposal"
                                 f" {i} (expected a mapping of parameter name to value)")
        return proposals

    def observe(self, agent: Agent, observations: Sequence[Observation]) -> None:
        """``agent.observe(observations)``."""
        try:
            agent.observe(observations)
        except Exception as exc:
            raise self._raised(agent, "observe()", exc) from exc

    def exhausted(self, agent: Agent) -> bool:
        """``agent.exhausted``."""
        try:
            return bool(agent.exhausted)
        except Exception as exc:
            raise self._raised(agent, "exhausted (a property)", exc) from exc


def _kind(value: object) -> str:
    """*value*'s type in words, with a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"
