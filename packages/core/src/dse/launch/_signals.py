"""Ctrl+C (and SIGTERM) while campaigns run, as ``dse run`` and :func:`dse.run` take it: the
first asks every run to stop (its running trials are cancelled and recorded) and interrupts
the backend's slow query; a second raises :class:`KeyboardInterrupt` (nothing waited for)."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

from dse.plugins._backend import Backend

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType, TracebackType

    from dse.engine._engine import Engine

__all__ = ["CancelOnSignal"]


class CancelOnSignal:
    """A context in which *signals* cancel *engines* (see the module). Outside the main
    thread it changes nothing; a SIGINT the caller ignores (a shell's background job) stays
    ignored, as Python itself leaves it."""

    def __init__(self, engines: Sequence[Engine], backend: object,
                 signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM)) -> None:
        self.engines = engines
        self.backend = backend
        self.signals = signals
        self.count = 0
        """Signals received so far."""
        self._previous: dict[signal.Signals, object] = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        for engine in self.engines:
            engine.request_stop("cancelled")
        if isinstance(self.backend, Backend):
            self.backend.interrupt()  # a slow query in progress gives up

    def __enter__(self) -> CancelOnSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = {
                sig: signal.signal(sig, self._on_signal) for sig in self.signals
                if sig != signal.SIGINT or signal.getsignal(sig) is not signal.SIG_IGN
            }
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous = {}
