"""The one object that owns the terminal: status to stderr, results to stdout.

Output is optional: when the reader of stdout or stderr goes away (``dse run | head -3``, a
closed terminal pipe), writing there fails with ``EPIPE``; the console then goes quiet on
that stream for good and the campaign goes on to its normal end, recorded as it would be
otherwise. Rich's own answer, ``SystemExit(1)`` in the middle of a pass, would end the run
``failed`` and cancel its trials.

Every subcommand prints through it, so Rich is imported when something needs it (a styled
line, a line Rich would change: a tab, a control character; a table on a terminal), not for
what Rich would print as it is: plain lines (all ``dse report`` and ``dse show`` print), and
a table of plain ASCII cells that fits the width off a terminal (``dse status | ...``), which
is written in Rich's own layout. The live view of ``dse run`` is :mod:`dse.launch._console`'s.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from rich.console import Console as RichConsole

__all__ = ["Console", "silence"]


def silence(stream: IO[str]) -> None:
    """Point *stream*'s file descriptor at ``/dev/null``, its reader being gone: every later
    write to it (a warning logged, the interpreter's last flush at exit) succeeds unread
    instead of failing again."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return  # not a file (a test's StringIO): nothing outlives this process
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def plain(text: str) -> bool:
    """Whether Rich would print *text* (markup, highlighting and emoji codes off, soft wrap)
    exactly as it is: no tab to expand, no control character to strip."""
    return text.isprintable() or all(line.isprintable() for line in text.split("\n"))


PIPED_WIDTH = 200
"""The width of stdout off a terminal: piped output is read by people and scripts alike, so
a table is never cut to 80 columns."""

_ASCII = frozenset(chr(c) for c in range(0x20, 0x7F))


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str | None:
    """*columns* and *rows* as Rich prints a default ``Table`` to stdout off a terminal (a
    heavy head, a space each side of a cell, cells left-aligned), or None where Rich would
    do more: on a terminal, or one it is told to treat as one (``FORCE_COLOR``,
    ``TTY_COMPATIBLE``), not UTF-8 (an ASCII box), a cell not printable ASCII (its width in
    cells), or wider than :data:`PIPED_WIDTH` (cells wrapped)."""
    if (sys.stdout.isatty() or sys.platform == "win32"
            or not (sys.stdout.encoding or "").lower().startswith("utf")
            or "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ):
        return None
    if any(not _ASCII.issuperset(cell.replace("\n", "")) for row in (columns, *rows)
           for cell in row):
        return None
    widths = [max([len(name), *(len(line) for row in rows for line in row[i].split("\n"))])
              for i, name in enumerate(columns)]
    if sum(widths) + 3 * len(widths) + 1 > PIPED_WIDTH:
        return None

    def rule(left: str, middle: str, right: str, fill: str) -> str:
        return left + middle.join(fill * (w + 2) for w in widths) + right + "\n"

    def line(bar: str, cells: Sequence[str]) -> str:
        split = [cell.split("\n") for cell in cells]  # a cell of several lines: Rich's too
        return "".join(
            bar + bar.join(f" {(c[i] if i < len(c) else '').ljust(w)} "
                           for c, w in zip(split, widths, strict=True)) + bar + "\n"
            for i in range(max(len(c) for c in split)))

    return "".join([rule("┏", "┳", "┓", "━"), line("┃", columns), rule("┡", "╇", "┩", "━"),
                    *(line("│", row) for row in rows), rule("└", "┴", "┘", "─")])


class Console:
    """Wraps two Rich consoles, each made on first use; user strings are never parsed as
    markup nor as emoji codes. Either goes quiet when its reader is gone (see the module's
    docstring)."""

    def __init__(self, *, json_output: bool = False) -> None:
        self.json_output = json_output
        self._gone: set[str] = set()
        """The streams (``"out"``, ``"err"``) whose reader went away before their Rich
        console was made."""
        self._progress: str | None = None
        """The progress line standing at the bottom of stderr (:meth:`progress`), if any."""

    @functools.cached_property
    def out(self) -> RichConsole:
        width = None if sys.stdout.isatty() else PIPED_WIDTH
        return self._rich("out", sys.stdout, width)

    @functools.cached_property
    def err(self) -> RichConsole:
        return self._rich("err", sys.stderr, None)

    def _rich(self, name: str, file: IO[str], width: int | None) -> RichConsole:
        from dse.report._stream import Stream

        console = Stream(file=file, markup=False, highlight=False, emoji=False, soft_wrap=True,
                         width=width, gone=functools.partial(self._reader_gone, name, file))
        console.quiet = name in self._gone
        return console

    def _reader_gone(self, name: str, stream: IO[str]) -> None:
        self._gone.add(name)
        made: RichConsole | None = self.__dict__.get(name)
        if made is not None:
            made.quiet = True
        silence(stream)

    @property
    def interactive(self) -> bool:
        return self.out.is_terminal and self.err.is_terminal

    @property
    def in_place(self) -> bool:
        """Whether a line of stderr can be rewritten where it stands: a terminal, or a
        notebook's output (Jupyter honours a carriage return)."""
        return self.err.is_terminal or self.err.is_jupyter

    def progress(self, text: str | None) -> None:
        """*text* as the one line at the bottom of stderr, in place of the one there before
        (:attr:`in_place` streams only); cut to the terminal's width, so it never wraps.
        Lines printed on stderr meanwhile go above it. ``None``: the line stays as it is and
        later output goes below it."""
        if text is None:
            if self._progress is not None:
                self._progress = None
                self._write("err", "\n")
            return
        width = self.err.width if self.err.is_terminal else 0
        if width > 1 and len(text) >= width:
            text = text[: width - 2] + "…"
        self._progress = text
        self._write("err", self._erase() + text)

    @contextlib.contextmanager
    def above_progress(self) -> Iterator[None]:
        """What is written on stderr meanwhile (a line, a Python warning) goes above the
        progress line standing there, which is drawn again after it."""
        standing = self._progress
        if standing is not None:
            self._write("err", self._erase())
        try:
            yield
        finally:
            if standing is not None:
                self._write("err", standing)

    def _erase(self) -> str:
        """What takes the cursor back over the progress line and clears it."""
        return "\r\x1b[2K" if self.err.is_terminal else "\r"

    def status(self, message: str) -> None:
        self._line("err", message)

    def error(self, message: str) -> None:
        from rich.text import Text

        with self.above_progress():
            self.err.print(Text(f"dse: error: {message}", style="bold red"))

    def warning(self, message: str) -> None:
        """``dse: warning: MESSAGE`` on stderr (above the progress line, if one stands)."""
        from rich.text import Text

        with self.above_progress():
            self.err.print(Text(f"dse: warning: {message}", style="bold yellow"))

    def result(self, text: str) -> None:
        self._line("out", text)

    @property
    def out_width(self) -> int:
        """The columns a table on stdout has: the terminal's (``COLUMNS`` when set, as Rich
        reads it), :data:`PIPED_WIDTH` off a terminal."""
        if "out" in self.__dict__ or sys.stdout.isatty():
            return int(self.out.width)
        return PIPED_WIDTH

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """A table on stdout: a column per name in *columns*, a row per item of *rows*."""
        text = None if "out" in self.__dict__ else plain_table(columns, rows)
        if text is not None:
            self._write("out", text)
            return
        from rich.table import Table

        table = Table(*columns)
        for row in rows:
            table.add_row(*row)
        self.out.print(table)

    def data(self, value: Any) -> None:
        self.write(json.dumps(value, indent=2, default=str) + "\n")

    def write(self, text: str) -> None:
        """*text* to stdout as it is (JSON, CSV): no Rich rendering, nothing wrapped."""
        self._write("out", text)

    def _line(self, name: str, text: str) -> None:
        """*text* and a newline, as the stream's Rich console prints it; written directly
        while that console is not made and Rich would print *text* unchanged. On stderr, a
        progress line standing there is cleared first and drawn again below *text*."""
        with self.above_progress() if name == "err" else contextlib.nullcontext():
            if name in self.__dict__ or not plain(text):
                getattr(self, name).print(text)
            else:
                self._write(name, text + "\n")

    def _write(self, name: str, text: str) -> None:
        made: RichConsole | None = self.__dict__.get(name)
        if name in self._gone or (made is not None and made.quiet):
            return
        stream = sys.stdout if name == "out" else sys.stderr
        try:
            stream.write(text)
            stream.flush()
        except BrokenPipeError:
            self._reader_gone(name, stream)
