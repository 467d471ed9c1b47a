"""`dse SUBCOMMAND ...` parses with that subcommand's subparser alone (the others cost their
construction at every start); what it prints — help, usage, errors — is what the whole
parser prints for the same arguments. And what the process entry does before parsing."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import subprocess
import sys
import textwrap

import pytest

from dse.cli._cli import _parser, main
from dse.cli._commands import COMMANDS

BAD = {
    "init": ["--nope"], "run": ["--nope"], "status": ["a", "b"], "report": ["--html"],
    "plugins": ["x"],
    "show": [], "invalidate": ["--trial", "x", "--failed"], "export": ["x", "--format", "y"],
    "doctor": ["--salvage"], "record": ["move", "a", "b"], "dashboard": ["--port", "x"],
    "sync": [], "enqueue": [],
}
"""Arguments each subcommand refuses."""


def parsed(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[object, str, str]:
    """What parsing *argv* with *parser* gives: the namespace (or the exit code), stdout,
    stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result: object = vars(parser.parse_args(argv))
        except SystemExit as exc:
            result = exc.code
    return result, out.getvalue(), err.getvalue()


def test_every_command_has_arguments_and_a_handler() -> None:
    full = parsed(_parser(), ["--help"])[1]
    for name in COMMANDS:
        assert re.search(rf"^    {name}\s", full, re.MULTILINE), full
        assert parsed(_parser(name), [name, "--help"])[0] == 0


@pytest.mark.parametrize("name", sorted(COMMANDS))
@pytest.mark.parametrize("kind", ["help", "refused", "ok"])
def test_one_subparser_parses_as_the_whole_parser(name: str, kind: str) -> None:
    argv = {"help": [name, "--help"], "refused": [name, *BAD[name]],
            "ok": [name, *{"run": ["c.toml"], "show": ["demo:1"], "export": ["demo"],
                           "sync": ["c.toml"], "enqueue": ["c.toml"],
                           "record": ["copy", ".dse", "postgresql://db/dse"]}.get(name, [])]
            }[kind]
    alone = parsed(_parser(name), argv)
    assert alone == parsed(_parser(), argv)
    assert alone[0] == {"help": 0, "refused": 2}.get(kind, alone[0])
    assert kind != "ok" or isinstance(alone[0], dict)


def test_an_unknown_command_is_refused_naming_every_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert all(repr(name) in err for name in COMMANDS), err


def test_the_process_entry_freezes_what_it_imported_and_a_call_does_not() -> None:
    # `dse` as a process (no argv given: the console script, `python -m dse`) moves what it
    # imported out of every later collection; a caller in the same process (a test) keeps
    # its collections as they were.
    code = textwrap.dedent("""
        import gc, sys
        from dse.cli._cli import main
        main(["plugins", "--json"])
        called = gc.get_freeze_count()
        sys.argv = ["dse", "plugins", "--json"]
        main()
        print(called, gc.get_freeze_count(), file=sys.stderr)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    called, entered = map(int, proc.stderr.split())
    assert called == 0
    assert entered > 1000
