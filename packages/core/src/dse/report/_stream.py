"""The Rich console :class:`dse.report._terminal.Console` prints through when a line needs Rich."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console as RichConsole

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Stream"]


class Stream(RichConsole):
    """A Rich console that goes quiet when its reader is gone, and says so to *gone*."""

    def __init__(self, *, gone: Callable[[], None], **options: Any) -> None:
        super().__init__(**options)
        self.gone = gone

    def on_broken_pipe(self) -> None:
        self.quiet = True
        self.gone()
