"""The one object that owns the terminal: status to stderr, results to stdout."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console as RichConsole
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from dse._engine import CampaignResult, Engine, EngineListener

if TYPE_CHECKING:
    from dse._types import TrialStatus


class Console:
    """Wraps two Rich consoles; user strings are never parsed as markup."""

    def __init__(self, *, json_output: bool = False) -> None:
        # Piped output is read by people and scripts alike: never cut a table to 80 columns.
        width = None if sys.stdout.isatty() else 200
        self.out = RichConsole(
            file=sys.stdout, markup=False, highlight=False, soft_wrap=True, width=width
        )
        self.err = RichConsole(file=sys.stderr, markup=False, highlight=False, soft_wrap=True)
        self.json_output = json_output

    @property
    def interactive(self) -> bool:
        return self.out.is_terminal and self.err.is_terminal

    def status(self, message: str) -> None:
        self.err.print(message)

    def error(self, message: str) -> None:
        self.err.print(Text(f"dse: error: {message}", style="bold red"))

    def result(self, text: str) -> None:
        self.out.print(text)

    def data(self, value: Any) -> None:
        sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
        sys.stdout.flush()


def _best_text(engine: Engine) -> str:
    best = engine.stats.best
    if best is None:
        return "-"
    metric = engine.campaign.objectives[0].metric
    return f"{metric}={best.score:.6g} (trial {best.number}) {dict(best.params)}"


class LiveView(EngineListener):
    """Shows a campaign's progress: a Rich live view on a terminal, plain lines otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None
        self.started = time.monotonic()
        self._last_refresh = 0.0

    def on_start(self, engine: Engine) -> None:
        c = engine.campaign
        self.started = time.monotonic()
        self.console.status(
            f"campaign {c.name} (run {engine.campaign_id}): agent {c.agent}, backend"
            f" {c.backend}, {c.mode} x{c.max_parallelism}, record {engine.store.path}"
        )
        if self.console.interactive:
            self.live = Live(
                self._render(engine), console=self.console.err, auto_refresh=False,
                transient=False,
            )
            self.live.start()

    def _render(self, engine: Engine) -> Table:
        s = engine.stats
        c = engine.campaign
        elapsed = max(time.monotonic() - self.started, 1e-9)
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        total = c.max_trials
        if total:
            bar = ProgressBar(total=total, completed=s.steps, width=40)
            table.add_row("progress", f"{s.steps}/{total}")
            table.add_row("", bar)
        else:
            table.add_row("progress", f"{s.steps} steps")
        table.add_row(
            "in flight",
            f"{engine.running}" + (f" ({s.retries} retries so far)" if s.retries else "")
            + ("  DISPATCH PAUSED: systematic interruptions" if s.paused else ""),
        )
        table.add_row(
            "finished",
            f"{s.completed} completed, {s.failed} failed, {s.cached} cached,"
            f" {s.rejected} rejected, {s.interrupted} interrupted, {s.cancelled} cancelled",
        )
        finished = s.completed + s.failed
        table.add_row("throughput", f"{finished / elapsed * 3600:.0f} trials/h")
        table.add_row("best so far", _best_text(engine))
        return table

    def on_trial_end(self, engine: Engine, number: int, status: TrialStatus) -> None:
        if self.live is None:
            best = engine.stats.best
            best_part = f"; best {best.score:.6g} (trial {best.number})" if best else ""
            self.console.status(f"trial {number} {status.value}{best_part}")

    def on_alert(self, engine: Engine, message: str) -> None:
        self.console.err.print(Text(f"dse: warning: {message}", style="bold yellow"))

    def on_pass(self, engine: Engine) -> None:
        if self.live is not None:
            now = time.monotonic()
            if now - self._last_refresh >= 0.1:
                self._last_refresh = now
                self.live.update(self._render(engine), refresh=True)

    def on_finish(self, engine: Engine, result: CampaignResult) -> None:
        if self.live is not None:
            self.live.update(self._render(engine), refresh=True)
            self.live.stop()
            self.live = None
