"""What ``dse.run`` tells as a run goes: its warnings as :class:`dse.RunWarning` warnings, and two
listeners told together. Imported by ``dse.run`` alone: ``dse.load`` never imports the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.engine._engine import EngineListener

if TYPE_CHECKING:
    from collections.abc import Callable

    from dse.engine._engine import Engine
    from dse.model._outcome import CampaignResult, Retry, TrialEnd
    from dse.model._types import TrialStatus


class Warnings(EngineListener):
    """A quiet run's listener: its alerts are still Python warnings."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self.warn = warn

    def on_alert(self, engine: Engine, message: str) -> None:
        if not message.startswith("budget exhausted"):  # an end, not a warning (DESIGN.md)
            self.warn(message)


class Both(EngineListener):
    """Tells two listeners everything, the view first."""

    def __init__(self, first: EngineListener, second: EngineListener) -> None:
        self.listeners = (first, second)

    def on_start(self, engine: Engine) -> None:
        for listener in self.listeners:
            listener.on_start(engine)

    def on_trial_end(self, engine: Engine, number: int, status: TrialStatus) -> None:
        for listener in self.listeners:
            listener.on_trial_end(engine, number, status)

    def on_trial_ended(self, engine: Engine, end: TrialEnd) -> None:
        for listener in self.listeners:
            listener.on_trial_ended(engine, end)

    def on_retry(self, engine: Engine, retry: Retry) -> None:
        for listener in self.listeners:
            listener.on_retry(engine, retry)

    def on_pass(self, engine: Engine) -> None:
        for listener in self.listeners:
            listener.on_pass(engine)

    def on_alert(self, engine: Engine, message: str) -> None:
        for listener in self.listeners:
            listener.on_alert(engine, message)

    def on_finish(self, engine: Engine, result: CampaignResult) -> None:
        for listener in self.listeners:
            listener.on_finish(engine, result)
