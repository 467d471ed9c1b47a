"""The console every command prints through: a plain line is written as Rich would print it
(without importing Rich for it), and user strings are never turned into markup or emoji."""

from __future__ import annotations

import io

import pytest
from rich.console import Console as RichConsole

from dse._terminal import Console, plain

LINES = [
    "",
    "campaign scale run 1: completed (max_trials)",
    '  params        {"passes": 3, "x": 0.6617072923701356}',
    "  attempt 1     job probe-50000: succeeded; 2026-12-01T18:24:48+00:00 to 18:24:48",
    "an emoji code :smile: and :thumbs_up: stays text, [bold]markup[/bold] too",
    "trailing spaces   ",
    "   leading spaces",
    "wide 漢字 and combining é and an emoji 😀 in a line",
    "a long line " + "x" * 400,
    "two\nlines",
    "a\ttab",
    "a carriage\rreturn",
    "a bell\x07 and an escape \x1b[31m",
    "a non-breaking\u00a0space",
]


def rich_prints(text: str) -> str:
    """What the console's Rich stream prints for *text*, off a terminal."""
    out = io.StringIO()
    RichConsole(file=out, markup=False, highlight=False, emoji=False, soft_wrap=True,
                width=200).print(text)
    return out.getvalue()


@pytest.mark.parametrize("text", LINES)
def test_a_result_line_is_printed_as_rich_prints_it(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Console().result(text)
    assert capsys.readouterr().out == rich_prints(text)


@pytest.mark.parametrize("text", LINES)
def test_a_status_line_is_printed_as_rich_prints_it(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Console().status(text)
    assert capsys.readouterr().err == rich_prints(text)


def test_only_lines_rich_would_change_go_through_rich() -> None:
    assert plain("campaign demo: 2026-12-01T18:24:48+00:00 :smile:")
    assert plain("two\nlines")
    assert not plain("a\ttab")
    assert not plain("a carriage\rreturn")
    assert not plain("an escape \x1b[31m")


def test_user_strings_are_never_emoji(capsys: pytest.CaptureFixture[str]) -> None:
    console = Console()
    console.result(":fire:")
    console.out.print(":fire:")  # the Rich stream itself, as a table cell is printed
    assert capsys.readouterr().out == ":fire:\n:fire:\n"


def test_a_stream_whose_reader_is_gone_goes_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    console = Console()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", Gone())
        console.result("lost")  # no error: the console goes quiet on stdout for good
    console.result("not written")
    console.data({"not": "written"})
    console.status("still written")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "still written\n"
