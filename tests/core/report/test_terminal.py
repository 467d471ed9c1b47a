"""The console every command prints through: a plain line, and a table of plain cells off a
terminal, are written as Rich would print them (without importing Rich for them), and user
strings are never turned into markup or emoji."""

from __future__ import annotations

import io
import random
import string

import pytest
from rich.console import Console as RichConsole
from rich.table import Table

from dse.report._terminal import PIPED_WIDTH, Console, plain, plain_table

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


def rich_table(columns: list[str], rows: list[list[str]]) -> str:
    """What the console's Rich stream prints for a default table, off a terminal."""
    out = io.StringIO()
    table = Table(*columns)
    for row in rows:
        table.add_row(*row)
    RichConsole(file=out, markup=False, highlight=False, emoji=False, soft_wrap=True,
                width=PIPED_WIDTH).print(table)
    return out.getvalue()


def random_tables(seed: int, count: int) -> list[tuple[list[str], list[list[str]]]]:
    """Tables of 1-14 columns and 0-4 rows of printable ASCII cells (spaces at either end,
    empty cells and punctuation among them), from narrow ones to past the width."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + string.punctuation + " "

    def cell() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, rng.choice([8, 30]))))

    tables = []
    for _ in range(count):
        n = rng.randint(1, 14)
        tables.append(([cell() for _ in range(n)],
                       [[cell() for _ in range(n)] for _ in range(rng.randint(0, 4))]))
    return tables


def test_a_table_of_plain_cells_is_laid_out_as_rich_lays_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    written = wider = 0
    for columns, rows in random_tables(seed=19, count=400):
        text = plain_table(columns, rows)
        if text is None:  # wider than the console: Rich wraps cells
            wider += 1
            widths = [max(len(c) for c in col) for col in zip(columns, *rows, strict=True)]
            assert sum(widths) + 3 * len(widths) + 1 > PIPED_WIDTH
            continue
        written += 1
        assert text == rich_table(columns, rows), (columns, rows)
    assert written > 250
    assert wider > 50


def test_a_table_at_the_width_is_written_and_past_it_left_to_rich() -> None:
    assert plain_table(["a" * 97, "b" * 96], []) == rich_table(["a" * 97, "b" * 96], [])
    assert plain_table(["a" * 97, "b" * 97], []) is None


@pytest.mark.parametrize("cell", ["漢字", "é", "a\ttab", "😀"])
def test_a_cell_not_printable_ascii_is_left_to_rich(
    cell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plain_table(["name"], [[cell]]) is None
    Console().table(["name"], [[cell]])
    assert capsys.readouterr().out == rich_table(["name"], [[cell]])


@pytest.mark.parametrize("variable", ["FORCE_COLOR", "TTY_COMPATIBLE"])
def test_a_table_rich_is_told_to_style_is_left_to_rich(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "1")
    assert plain_table(["name"], [["x"]]) is None
