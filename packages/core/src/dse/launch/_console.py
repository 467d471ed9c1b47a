"""The live view of ``dse run``: a Rich live table on a terminal, plain lines otherwise.

It prints through :class:`dse.report._terminal.Console`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from dse.engine._engine import EngineListener
from dse.model._types import TrialStatus
from dse.report._render import duration_text, hours_text, money_text, rate_text
from dse.report._summary import live_counts, numbers, tally_text

if TYPE_CHECKING:
    from collections.abc import Callable

    from dse.engine._engine import Engine
    from dse.engine._live import LiveTrial
    from dse.model._outcome import CampaignResult, Retry, TrialEnd
    from dse.report._terminal import Console

RUNNING_SHOWN = 6
"""Running trials the live view lists (the longest-running first)."""

_FAILED = frozenset({TrialStatus.FAILED, TrialStatus.INTERRUPTED, TrialStatus.BUDGET_EXHAUSTED})
"""The outcomes a line names with their failure class and log."""


def budget_bar(spent: float, reserved: float, ceiling: float, width: int = 30) -> Text:
    """``█`` spent, ``▒`` reserved, ``·`` still free, out of *ceiling*."""
    if ceiling <= 0:
        used = width if spent + reserved > 0 else 0
        return Text("█" * used + "·" * (width - used), style="red" if used else "")
    full = min(round(spent / ceiling * width), width)
    held = min(round((spent + reserved) / ceiling * width), width) - full
    bar = Text()
    bar.append("█" * full, style="red" if spent >= ceiling else "green")
    bar.append("▒" * held, style="yellow")
    bar.append("·" * (width - full - held), style="dim")
    return bar


def _elapsed(engine: Engine) -> float:
    """Seconds the run was driven (the monotonic clock; a resumed run's earlier processes
    from the record): the time the three numbers are per."""
    return max(engine.clock.monotonic() - engine.ledger.started_at, 0.0)


def _numbers_text(engine: Engine) -> str:
    """The three numbers, live: :func:`dse.report._summary.numbers`, as ``dse report`` and the line
    ``dse run`` ends with compute them (a trial stopped at a rung is a usable result)."""
    spent = engine.ledger.spent
    three = numbers(live_counts(engine.stats), wall_s=_elapsed(engine), spent=spent)
    currency = engine.ledger.budget.currency or engine.campaign.price.currency
    money = three.cost_per_effective
    if money is not None:
        compute = engine.ledger.budget.compute
        unit = compute[0] if compute else ("gpu" if spent.gpu_s > 0 else "cpu")
        cost = (f"{money_text(money)} {currency},"
                f" {hours_text(three.compute_per_effective_h(unit) or 0.0)} {unit}-h")
    else:
        cost = "-"
    return (f"{rate_text(three.throughput_per_h)} trials/h, {rate_text(three.effective_per_h)}"
            f" results/h, {cost} per result")


def _budget_rows(engine: Engine) -> list[tuple[str, Text, str]]:
    """A bar per campaign ceiling: spent, reserved (in flight) and what is left."""
    ledger = engine.ledger
    budget = ledger.budget
    earlier = ledger.earlier  # the campaign's earlier runs (``scope = "campaign"``)
    spent, reserved = earlier.spent + ledger.spent, ledger.reserved
    rows = []
    if budget.money is not None:
        rows.append(("money", budget_bar(spent.money, reserved.money, budget.money),
                     f"{money_text(spent.money)} spent + {money_text(reserved.money)} reserved"
                     f" / {money_text(budget.money)} {budget.currency}"))
    if budget.compute is not None:
        unit, ceiling = budget.compute
        used, held = spent.compute_s(unit) / 3600.0, reserved.compute_s(unit) / 3600.0
        rows.append(("compute", budget_bar(used, held, ceiling),
                     f"{hours_text(used)} spent + {hours_text(held)} reserved"
                     f" / {ceiling:g} {unit}-hours"))
    if budget.trials is not None:
        running = min(engine.running, ledger.trials)
        done = earlier.trials + ledger.trials - running
        rows.append(("trials", budget_bar(done, running, budget.trials),
                     f"{done} ended + {running} in flight / {budget.trials}"))
    if budget.wall_clock_s is not None:
        elapsed = earlier.run_s + _elapsed(engine)
        rows.append(("wall clock", budget_bar(elapsed, 0.0, budget.wall_clock_s),
                     f"{duration_text(elapsed)} / {duration_text(budget.wall_clock_s)}"))
    return rows


def number_ranges(numbers: list[int]) -> str:
    """``1-4, 7, 9-10``: *numbers* (in any order) as runs of consecutive ones."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _best_text(engine: Engine) -> str:
    front = engine.stats.front
    if engine.campaign.pareto:
        return f"front of {len(front)}: trials {number_ranges(list(front))}" if front else "-"
    best = engine.stats.best
    if best is None:
        return "-"
    metric = engine.campaign.objectives[0].metric
    return f"{metric}={best.score:.6g} (trial {best.number}) {dict(best.params)}"


def shown_path(path: Path) -> str:
    """*path* relative to the working directory when it is under it (shorter to read)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _started(engine: Engine) -> tuple[list[LiveTrial], int]:
    """The submitted trials the backend says started, longest-running first, and how many
    more it holds that have not started yet (pending on Slurm, queued ahead locally)."""
    submitted = list(engine.table.running.values())
    started = sorted((t for t in submitted if t.running_since is not None),
                     key=lambda t: (t.running_since or 0.0, t.number))
    return started, len(submitted) - len(started)


def in_flight(engine: Engine) -> tuple[int, int]:
    """(running, queued) of *engine*'s trials in flight: those an attempt of which the
    backend says started, and the rest (submitted and not started yet, waiting for the
    pool's resources or for a retry, or on another controller's trial)."""
    running = sum(1 for t in engine.table.running.values() if t.running_since is not None)
    return running, max(engine.running - running, 0)


def ended(engine: Engine) -> int:
    """Trials of *engine* that reached an outcome (cache hits and cancelled ones too): its
    proposals that became trials less those in flight."""
    return max(engine.stats.steps - engine.running, 0)


def _slots(engine: Engine) -> int:
    parallelism = engine.campaign.max_parallelism
    if engine.pool is not None:
        parallelism = engine.pool.parallelism.get(engine.campaign.name, parallelism)
    return max(parallelism, 1)


def eta_text(engine: Engine, mean: float | None) -> str:
    """When the campaign should end, from the mean wall time of the trials ended (*mean*;
    else what the scheduler expected of those running, else their time limit): the trials
    still to start and what those running have left, spread over the slots; ``-`` when
    nothing bounds the run (no trial count, no wall-clock ceiling)."""
    c, s, ledger = engine.campaign, engine.stats, engine.ledger
    bounds = [c.max_trials - s.steps] if c.max_trials else []
    if ledger.budget.trials is not None:
        bounds.append(ledger.budget.trials - ledger.trials - ledger.earlier.trials)
    now = engine.clock.time()
    wall = ledger.budget.wall_clock_s
    wall_left = None if wall is None else max(
        wall - ledger.earlier.run_s - _elapsed(engine), 0.0)
    running, waiting = _started(engine)
    if mean is None:
        guesses = [t.expected or (t.spec.time_limit if t.spec else None) for t in running]
        known = [g for g in guesses if g]
        mean = sum(known) / len(known) if known else None
    if not bounds:
        if wall_left is None:
            return "-"
        return f"by the wall-clock ceiling, in {duration_text(wall_left)}"
    left = max(min(bounds), 0) + len(engine.table.queued) + waiting
    if mean is None:
        return f"{left} trial(s) to start; no trial has ended yet"
    ahead = sum(max(mean - (now - (t.running_since or now)), 0.0) for t in running)
    eta = (left * mean + ahead) / _slots(engine)
    capped = "" if wall_left is None or eta <= wall_left else " (the wall-clock ceiling first)"
    if capped:
        eta = wall_left or 0.0
    return (f"~{duration_text(eta)}{capped}: {left} to start, {len(running)} running,"
            f" ~{duration_text(mean)} a trial")


def running_text(engine: Engine) -> str:
    """The trials the backend says run, longest-running first (number, attempt, elapsed
    time, node), and how many more it holds that have not started."""
    now = engine.clock.time()
    trials, waiting = _started(engine)
    lines = [f"trial {t.number}" + (f" (attempt {t.attempt})" if t.attempt > 1 else "")
             + f"  {duration_text(max(now - (t.running_since or now), 0.0))}"
             + (f"  on {t.node}" if t.node else "") for t in trials[:RUNNING_SHOWN]]
    if len(trials) > RUNNING_SHOWN:
        lines.append(f"... and {len(trials) - RUNNING_SHOWN} more")
    if waiting:
        lines.append(f"{waiting} submitted, not started yet")
    return "\n".join(lines) or "-"


def failure_line(end: TrialEnd) -> str:
    """``trial 3 failed (nonzero_exit: exit code 3) after 1 attempt on n2; log
    .dse/c/run-1/000003/attempt-1``: a trial that did not succeed, its class and log."""
    why = ": ".join(p for p in (end.failure.value if end.failure else None, end.message) if p)
    line = f"trial {end.number} {end.status.value}" + (f" ({why})" if why else "")
    if end.attempts:
        line += f" after {end.attempts} attempt{'s' if end.attempts > 1 else ''}"
    if end.node:
        line += f" on {end.node}"
    if end.log is not None and end.log.is_dir():  # looked at only for a failure's line
        line += f"; log {shown_path(end.log)}{os.sep}"
    return line


def retry_line(retry: Retry) -> str:
    """``trial 4: attempt 1 ended preempted on n2 (preempted); attempt 2 queued, resuming
    from its checkpoint``."""
    where = f" on {retry.node}" if retry.node else ""
    why = [w for w in (None if retry.cause == retry.after else retry.cause, retry.message) if w]
    cause = f" ({': '.join(why)})" if why else ""
    start = "resuming from its checkpoint" if retry.resumed else "starting over"
    return (f"trial {retry.number}: attempt {retry.attempt - 1} ended {retry.after}{where}"
            f"{cause}; attempt {retry.attempt} queued, {start}")


def _share_text(engine: Engine) -> str:
    """``62% of the pool (target 67%)``: what the campaign used while the campaigns competed,
    against its weight's share."""
    assert engine.pool is not None
    target, actual = engine.pool.shares(engine.clock.time())[engine.campaign.name]
    return f"{actual:.0%} of the pool's use (target {target:.0%})"


class LiveView(EngineListener):
    """Shows a campaign's progress: a Rich live view on a terminal, plain lines otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None
        self._last_refresh = 0.0
        self.engines: list[Engine] = []
        """The campaigns shown (several when they share a pool)."""
        self._cached: dict[int, list[int]] = {}
        """Trials of each campaign (by ``id`` of its engine) that were cache hits since the
        last line: summarised once per pass, not a line each."""
        self._walls: dict[int, tuple[float, int]] = {}
        """Each campaign's (by ``id`` of its engine) wall seconds of the trials that ended
        after running, and how many: the mean the ETA is made of."""

    def on_start(self, engine: Engine) -> None:
        c = engine.campaign
        self.engines.append(engine)
        parallelism = c.max_parallelism
        if engine.pool is not None:
            parallelism = engine.pool.parallelism.get(c.name, parallelism)
        self.console.status(
            f"campaign {c.name} (run {engine.campaign_id}): agent {c.agent}, backend"
            f" {c.backend}, {c.mode} x{parallelism}, record {engine.store.where}"
        )
        if engine.seeds.note is not None:
            self.console.status(engine.seeds.note)
        self._open()

    def _open(self) -> None:
        """Start showing the campaigns (a campaign started): the live table, on a terminal."""
        if self.console.interactive:
            if self.live is None:
                self.live = Live(
                    self._view(), console=self.console.err, auto_refresh=False,
                    transient=False,
                )
                self.live.start()
            else:
                self.live.update(self._view(), refresh=True)

    @property
    def showing(self) -> bool:
        """Whether the view stands on screen (the live table): each trial's end is a line of
        its own only when it does not (failures always are)."""
        return self.live is not None

    def _view(self) -> Group:
        """Every campaign's table, each under its name when several share a pool."""
        if len(self.engines) == 1:
            return Group(self._render(self.engines[0]))
        parts: list[Any] = []
        for engine in self.engines:
            parts.append(Text(f"campaign {engine.campaign.name}", style="bold underline"))
            parts.append(self._render(engine))
        return Group(*parts)

    def _render(self, engine: Engine) -> Table:
        s = engine.stats
        c = engine.campaign
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        total = c.max_trials
        result = engine.finished
        # The trials that ended (a cancelled one did not run to an outcome: not progress).
        done = ended(engine) - s.cancelled
        if total:
            table.add_row("progress", f"{done}/{total} ended" + (
                "" if result is None else f"; {result.status} ({result.end_reason})"))
            table.add_row("", ProgressBar(total=total, completed=min(done, total), width=40,
                                          complete_style="bar.complete" if result is None
                                          or result.status != "cancelled" else "red"))
        else:
            table.add_row("progress", f"{done} ended" + (
                "" if result is None else f"; {result.status} ({result.end_reason})"))
        running, queued = in_flight(engine)
        table.add_row(
            "in flight",
            f"{running} running, {queued} queued (not started)"
            + (f" ({s.retries} retries so far)" if s.retries else "")
            + ("  DISPATCH PAUSED: systematic interruptions" if s.paused else ""),
        )
        table.add_row("finished", tally_text(s))
        table.add_row("eta", eta_text(engine, self._mean(engine)) if result is None
                      else f"- ({result.status})")
        if engine.table.running:
            table.add_row("running", running_text(engine))
        table.add_row("numbers", _numbers_text(engine))
        for label, gauge, text in _budget_rows(engine):
            table.add_row(label, Text.assemble(gauge, "  ", text))
        table.add_row("front" if engine.campaign.pareto else "best so far", _best_text(engine))
        pool = engine.pool
        if pool is not None and not pool.trivial:
            table.add_row("share", _share_text(engine))
            reservation = pool.reservation
            if reservation is not None and reservation.campaign == c.name:
                held = ", ".join(f"{v} {k}" for k, v in reservation.size.items())
                start = max(reservation.start - engine.clock.time(), 0.0)
                table.add_row("reservation", f"trial {reservation.key} ({held}) in"
                              f" {duration_text(start)}")
        return table

    def _mean(self, engine: Engine) -> float | None:
        total, count = self._walls.get(id(engine), (0.0, 0))
        return total / count if count else None

    def on_trial_ended(self, engine: Engine, end: TrialEnd) -> None:
        if end.wall_s > 0:
            total, count = self._walls.get(id(engine), (0.0, 0))
            self._walls[id(engine)] = (total + end.wall_s, count + 1)
        if end.status in _FAILED:
            # A failure is a line on a terminal too (above the live table): its class, and
            # where its log is.
            self._trial_line(engine, failure_line(end))
            return
        if self.showing:
            return
        if end.status is TrialStatus.CACHED:
            self._cached.setdefault(id(engine), []).append(end.number)
            return
        self._trial_line(engine, f"trial {end.number} {end.status.value}")

    def on_retry(self, engine: Engine, retry: Retry) -> None:
        name = f"{engine.campaign.name}: " if len(self.engines) > 1 else ""
        self.console.status(name + retry_line(retry))

    def _trial_line(self, engine: Engine, what: str) -> None:
        """One plain line about *engine*'s trials, with the best so far and the spend."""
        name = f"{engine.campaign.name}: " if len(self.engines) > 1 else ""
        best = engine.stats.best
        best_part = f"; best {best.score:.6g} (trial {best.number})" if best else ""
        if engine.campaign.pareto:
            best_part = f"; front of {len(engine.stats.front)}"
        budget = engine.ledger.budget
        spend_part = "" if budget.money is None else (
            f"; spent {money_text(engine.ledger.earlier.spent.money + engine.ledger.spent.money)}"
            f"/{money_text(budget.money)}"
            f" {budget.currency}"
        )
        self.console.status(f"{name}{what}{best_part}{spend_part}")

    def _flush_cached(self, engine: Engine) -> None:
        """The line summarising *engine*'s cache hits since the last one, if any."""
        numbers = self._cached.pop(id(engine), None)
        if numbers:
            hits = "1 cache hit" if len(numbers) == 1 else f"{len(numbers)} cache hits"
            self._trial_line(engine, f"{hits} (trial{'s' if len(numbers) > 1 else ''}"
                                     f" {number_ranges(numbers)}), reusing recorded results")

    def on_alert(self, engine: Engine, message: str) -> None:
        if message.startswith("budget exhausted"):
            # Running out of budget is a normal end (DESIGN.md), not something to warn about.
            self.console.status(message)
            return
        self.console.err.print(Text(f"dse: warning: {message}", style="bold yellow"))

    def on_pass(self, engine: Engine) -> None:
        self._flush_cached(engine)
        if self.live is not None:
            now = time.monotonic()
            if now - self._last_refresh >= 0.1:
                self._last_refresh = now
                self.live.update(self._view(), refresh=True)

    def on_finish(self, engine: Engine, result: CampaignResult) -> None:
        self._flush_cached(engine)
        if self.live is not None:
            self.live.update(self._view(), refresh=True)
            if all(e.finished is not None for e in self.engines):
                self.live.stop()
                self.live = None


class LineView(LiveView):
    """The progress of :func:`dse.run`: the live view's figures as one line rewritten in place
    in a terminal or a notebook (trials done of the total, the counts, the best, the ETA), its
    plain lines in a log; failures and retries are lines of their own as in ``dse run``, and
    its warnings are *warn*'s (Python warnings: :class:`dse.RunWarning`)."""

    REDRAW_S = 0.2
    """The least time between two draws of the line."""

    def __init__(self, console: Console, warn: Callable[[str], None]) -> None:
        super().__init__(console)
        self._warn = warn
        self._in_place = console.in_place

    @property
    def showing(self) -> bool:
        return self._in_place

    def _open(self) -> None:
        self._draw(force=True)

    def _draw(self, *, force: bool = False) -> None:
        if not self._in_place:
            return
        now = time.monotonic()
        if force or now - self._last_refresh >= self.REDRAW_S:
            self._last_refresh = now
            self.console.progress("; ".join(progress_text(e, self._mean(e)) for e in self.engines))

    def on_pass(self, engine: Engine) -> None:
        self._flush_cached(engine)
        self._draw()

    def on_alert(self, engine: Engine, message: str) -> None:
        if message.startswith("budget exhausted"):
            self.console.status(message)
            return
        with self.console.above_progress():
            self._warn(message)

    def on_finish(self, engine: Engine, result: CampaignResult) -> None:
        self._flush_cached(engine)
        self._draw(force=True)
        if all(e.finished is not None for e in self.engines):
            self.console.progress(None)


def progress_text(engine: Engine, mean: float | None) -> str:
    """``quad: 6/10 trials (5 completed, 1 failed, 1 running); best loss=0.1025 (trial 3);
    eta ~4s``: the live view's figures of *engine* in one line: the trials ended (of the
    campaign's ``max_trials``), the counts, the best, the ETA (*mean*: the mean wall time of
    the trials ended), and how the run ended once it did."""
    s, c = engine.stats, engine.campaign
    over = ended(engine)
    done = f"{over}/{c.max_trials}" if c.max_trials else f"{over}"
    running, queued = in_flight(engine)
    counts = [(s.completed, "completed"), (s.failed, "failed"),
              (s.budget_exhausted, "budget_exhausted"), (s.cached, "cached"),
              (s.interrupted, "interrupted"), (s.stopped, "stopped early"),
              (s.cancelled, "cancelled"), (running, "running"), (queued, "queued")]
    shown = ", ".join(f"{n} {what}" for n, what in counts if n)
    line = f"{c.name}: {done} trials" + (f" ({shown})" if shown else "")
    if c.pareto:
        line += f"; front of {len(s.front)}" if s.front else ""
    elif s.best is not None:
        line += f"; best {c.objectives[0].metric}={s.best.score:.6g} (trial {s.best.number})"
    if engine.finished is None:
        eta = eta_text(engine, mean)
        if eta.startswith("~"):
            line += f"; eta {eta.split(':', 1)[0]}"
    else:
        line += f"; {engine.finished.status}"
    return line
