"""The ``dse`` command: its arguments, and the dispatch to a subcommand's handler
(:mod:`dse.cli._commands`); what each prints is :mod:`dse.report._render`'s."""

from __future__ import annotations

import argparse
import errno
import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dse._version import __version__
from dse.cli._argparse import DseParser
from dse.cli._commands import COMMANDS
from dse.model._errors import DamagedRecordError, DseError, ExitCode, StorageError, did_you_mean
from dse.report._listings import FORMATS
from dse.report._render import REPORT_KEYS, WATCH_EVERY, WATCH_MOST
from dse.report._terminal import Console

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def _parse(parser: DseParser, argv: Sequence[str]) -> argparse.Namespace:
    """*argv* parsed; an unknown option is one line with the closest known one."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        flags = [e.partition("=")[0] for e in extras if e.startswith("-")]
        parser.error(f"unrecognized arguments: {' '.join(extras)}"
                     + did_you_mean(flags, parser.options(getattr(args, "command", None))))
    return args


def _parser(only: str | None = None) -> DseParser:
    """The ``dse`` parser; with *only*, the one subcommand of that name (what ``dse status``
    parses with: each subparser made costs its construction, and ``--help`` needs them all)."""
    parser = DseParser(
        prog="dse", description="Run design-space-exploration campaigns."
    )
    parser.add_argument("--version", action="version", version=f"dse {__version__}")
    add = parser.subcommands(dest="command", required=True, metavar="COMMAND")
    for name, add_arguments in _SUBCOMMANDS.items():
        if only is None or name == only:
            add_arguments(add)
    return parser


def _run_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    run = add(
        "run", help="run a campaign file (or several sharing one pool)",
        description="Run a campaign. Several campaign files, or a pool file ([pool] capacity\n"
        "and [[campaign]] tables with a file and a weight each), run in one controller and\n"
        "share its resources: fair share by weight, reservations for trials that cannot\n"
        "start yet, short trials backfilled into the gaps (docs/scheduling.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("campaign", type=Path, nargs="+", metavar="CAMPAIGN.toml",
                     help="campaign files, or one pool file")
    run.add_argument("--workspace", type=Path, help="record directory (default: .dse beside"
                     " the campaign file)")
    run.add_argument("--record", metavar="URL",
                     help="the record: a postgresql:// URL (default: $DSE_RECORD, else the"
                          " workspace's dse.sqlite)")
    run.add_argument("--json", action="store_true", help="print the outcome as JSON")
    run.add_argument("--fresh", action="store_true",
                     help="start a new run (even if the last one did not finish) that reuses"
                          " no result recorded before it")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     dest="overrides",
                     help="override a key of the campaign file (repeatable; recorded in the"
                          " run): max_parallelism=4 (a [campaign] key), environment.time_limit"
                          "=10m, agent.bayesian.initial=8, budget.trials=20; VALUE is TOML,"
                          " else the string as typed")


def _init_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    init = add(
        "init", help="write a commented starter campaign and its trial script",
        description="Write a starter campaign file that runs as written (a toy objective in\n"
        "trial.py beside it, on local processes) with the tables you are likely to want\n"
        "next commented out: budget, data, early stopping, a second objective, Slurm.\n"
        "Then: dse run CAMPAIGN.toml (docs/campaign.md lists every key).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    init.add_argument("campaign", type=Path, nargs="?", default=Path("campaign.toml"),
                      metavar="CAMPAIGN.toml",
                      help="the file to write (default: campaign.toml); trial.py goes beside it")
    init.add_argument("--name", help="the campaign's name (default: the file's stem)")
    init.add_argument("--agent", default="random",
                      help="the agent to start with (default: random; grid, bayesian...)")
    init.add_argument("--backend", default="local",
                      help="where its trials run (default: local; slurm...)")
    init.add_argument("--force", action="store_true",
                      help="replace files that exist (else nothing is written over one)")


def _status_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    status = add("status", help="list the campaign runs of a workspace")
    status.add_argument("target", nargs="?",
                        help="a campaign file, name or run id (default: every run)")
    status.add_argument("--workspace", type=Path,
                        help="record directory (default: .dse, or the campaign file's)")
    status.add_argument("--record", metavar="URL",
                     help="the record: a postgresql:// URL (default: $DSE_RECORD, else the"
                          " workspace's dse.sqlite)")
    status.add_argument("--json", action="store_true", help="print one JSON list of runs")


def _report_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    report = add(
        "report", help="what each run spent and delivered: the three numbers, per objective",
        description="Report each run of a campaign (or of every campaign in the workspace):\n"
        "how it ended, the best result, trials by outcome and failure class, spend against\n"
        "each ceiling of its budget, the three numbers, and a rollup per objective label\n"
        "across every run of the workspace that serves it.",
        epilog=REPORT_KEYS, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("target", nargs="?",
                        help="a campaign file, name or run id (default: every campaign)")
    report.add_argument("--workspace", type=Path,
                        help="record directory (default: .dse, or the campaign file's)")
    report.add_argument("--record", metavar="URL",
                     help="the record: a postgresql:// URL (default: $DSE_RECORD, else the"
                          " workspace's dse.sqlite)")
    report.add_argument("--json", action="store_true",
                        help="print one JSON object (keys below)")
    report.add_argument("--html", type=Path, metavar="OUT.html",
                        help="also write a self-contained HTML report with plots of the run"
                        " (the latest run of the campaign named; needs dse-core[report])")

    def seconds(text: str) -> float:
        value = float(text)
        if not 1 <= value <= WATCH_MOST:  # NaN and the infinities included
            raise argparse.ArgumentTypeError(
                f"{text!r}: seconds between pages, from 1 to {WATCH_MOST:g}")
        return value

    report.add_argument("--watch", nargs="?", type=seconds, const=WATCH_EVERY,
                        metavar="SECONDS",
                        help="with --html, while the run is running: rewrite the page every"
                        f" SECONDS (default {WATCH_EVERY:g}), the page refreshing itself as"
                        " often in a browser; once the run ends, write it once more without"
                        " the refresh and exit 0 (Ctrl+C stops watching)")


def _plugins_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    plugins = add("plugins", help="list installed plugins: backends, agents, scorers, stopping"
                  " rules")
    plugins.add_argument("--json", action="store_true", help="print one JSON list")


def _show_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    show = add(
        "show", help="the run record of one trial: the five answers",
        description="Print what exactly a trial ran, against what data, how it ended, what it\n"
        "cost, and what was concluded and by which scorer.",
        epilog="TRIAL: a trial id (<campaign>-<run>-<number>), <campaign>:<number> (the latest\n"
        "run of the campaign) or <run>:<number>. --json keys: docs/record.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("trial", metavar="TRIAL", help="the trial (forms below)")
    show.add_argument("--workspace", type=Path, help="record directory (default: .dse)")
    show.add_argument("--record", metavar="URL",
                     help="the record: a postgresql:// URL (default: $DSE_RECORD, else the"
                          " workspace's dse.sqlite)")
    show.add_argument("--json", action="store_true", help="print the record as one JSON object")


def _dashboard_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    dashboard = add(
        "dashboard", help="a live web view of the record: runs, trials, figures",
        description="Serve a local web page over the record (read only): every run with its\n"
        "numbers and budgets, a trial table to sort and filter, each trial's record, and\n"
        "interactive figures, updated as the record changes. Stop it with Ctrl-C.",
        epilog="TARGET: a workspace (default: .dse) or a postgresql:// URL. Bound to an address\n"
        "beyond loopback, the page asks the token printed with its address.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dashboard.add_argument("target", metavar="TARGET", nargs="?",
                           help="the workspace or a record URL (default: .dse)")
    dashboard.add_argument("--record", metavar="URL",
                           help="the record: a postgresql:// URL (default: $DSE_RECORD, else"
                                " the workspace's dse.sqlite)")
    dashboard.add_argument("--host", default="127.0.0.1",
                           help="address to bind (default: 127.0.0.1, this machine only)")
    dashboard.add_argument("--port", type=int, default=8765,
                           help="port (default: 8765; 0: any free port)")
    dashboard.add_argument("--token", help="the token the page asks (default: a new one, only"
                                           " when bound beyond loopback)")


def _invalidate_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    invalidate = add(
        "invalidate", help="flag results invalid (and every comparison that used them)",
        description="Mark results invalid without deleting anything: the trials (or scores)\n"
        "named, the cache hits reusing them, and every score compared against them as a\n"
        "baseline. Reports flag them; the agent is never fed them; a campaign that proposes\n"
        "the same configuration again runs a new trial linked to the one it replaces.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = invalidate.add_mutually_exclusive_group()
    which.add_argument("--trial", metavar="TRIAL",
                       help="one trial: <campaign>-<run>-<number>, <campaign>:<n> or <run>:<n>")
    which.add_argument("--data-version", metavar="V",
                       help="every trial that ran against, or read, data version V")
    which.add_argument("--scorer-version", metavar="S",
                       help="every score given by scorer version S (or NAME==S)")
    which.add_argument("--failed", metavar="CLASS", nargs="?", const="",
                       help="every failed trial, or those of failure class CLASS (with --run"
                            " or --campaign: of that run or campaign only)")
    invalidate.add_argument("--run", metavar="N", type=int,
                            help="the trials of run N (with --failed: its failed ones)")
    invalidate.add_argument("--campaign", metavar="NAME",
                            help="the trials of every run of campaign NAME")
    invalidate.add_argument("--dry-run", action="store_true",
                            help="say how many trials and scores it would flag; flag nothing")
    invalidate.add_argument("--reason", help="why (kept with the flag; required unless"
                                             " --dry-run)")
    invalidate.add_argument("--workspace", type=Path, help="record directory (default: .dse)")
    invalidate.add_argument("--record", metavar="URL",
                     help="the record: a postgresql:// URL (default: $DSE_RECORD, else the"
                          " workspace's dse.sqlite)")
    invalidate.add_argument("--json", action="store_true",
                            help="print what was flagged as one JSON object")


def _export_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    export = add(
        "export", help="export a campaign run's trials (CSV, JSON, JSON lines)",
        description="Write a campaign run's trials, read from the record a page at a time.\n"
        "csv: one row per trial, one column per param (param.NAME) and metric\n"
        "(metric.NAME), with status, failure_class, valid, score, attempts, interruptions,\n"
        "started_at, ended_at, duration_s, spend, node and data version (docs/record.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument("target", help="a campaign file, name or run id")
    export.add_argument("--format", choices=FORMATS, default="csv",
                        help="csv (a row per trial, a column per param and metric; the"
                             " default), json (one document: trajectory and every record),"
                             " jsonl (a line per trial), trajectory (CSV of CloudAI's"
                             " trajectory columns)")
    export.add_argument("--workspace", type=Path,
                        help="record directory (default: .dse, or the campaign file's)")
    export.add_argument("--record", metavar="URL",
                     help="the record: a postgresql:// URL (default: $DSE_RECORD, else the"
                          " workspace's dse.sqlite)")
    export.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")


def _doctor_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    doctor = add(
        "doctor", help="check the record for damage; save what still reads into a new one",
        description="Check a workspace's record (SQLite's integrity_check: every page and\n"
        "index) and say what is damaged and what still reads, table by table: how many\n"
        "trials a salvage keeps. With --salvage, write a new record of what reads (the\n"
        "damaged file is left as it is). Exit 0: sound (or salvaged), 5: damaged.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_argument("--workspace", type=Path, help="record directory (default: .dse)")
    doctor.add_argument("--salvage", type=Path, metavar="NEW.sqlite",
                        help="write a new record of what reads to NEW.sqlite (a new file)")
    doctor.add_argument("--json", action="store_true", help="print what was found as JSON")


def _record_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    record = add(
        "record", help="copy a record: a workspace's SQLite file into PostgreSQL, or back",
        description="dse record copy SRC DST: copy the record SRC (a workspace, a .sqlite\n"
        "file or a postgresql:// URL) into DST (a new record, or a copy of SRC stopped part\n"
        "way: it goes on), then check both, table by table (rows counted, every row\n"
        "digested). Exit 0: identical; 2: refused or different.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    record.add_argument("action", choices=["copy"], help="what to do: copy")
    record.add_argument("source", metavar="SRC", help="the record to copy")
    record.add_argument("target", metavar="DST", help="where to copy it")


def _sync_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    sync = add(
        "sync", help="write a campaign's trials to its [integrations] (MLflow, W&B...)",
        description="Write every ended trial of the campaign's runs that its integrations\n"
        "(the [integrations.<name>] tables: mlflow, tensorboard, wandb...) do not hold yet;\n"
        "`dse run` writes them as they end, this catches up after a failure. Nothing\n"
        "already written is written again.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sync.add_argument("campaign", type=Path, metavar="CAMPAIGN.toml", help="the campaign file")
    sync.add_argument("--workspace", type=Path, help="record directory (default: .dse beside"
                      " the campaign file)")
    sync.add_argument("--record", metavar="URL",
                      help="the record: a postgresql:// URL (default: $DSE_RECORD, else the"
                           " workspace's dse.sqlite)")
    sync.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      dest="overrides", help="override a key of the campaign file, as dse run"
                      " --set (integrations.mlflow.tracking_uri=...)")


def _enqueue_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    enqueue = add(
        "enqueue", help="add configurations a campaign runs before its agent's proposals",
        description="Put configurations in the campaign's queue in the record: its running\n"
        "controller takes them within a second (else its next `dse run`), each run before\n"
        "the agent's proposals, deduplicated and within the budget like any proposal; the\n"
        "agent is told their results. Each is checked against the space and the\n"
        "constraints first: a bad one enqueues nothing.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    enqueue.add_argument("campaign", type=Path, metavar="CAMPAIGN.toml",
                         help="the campaign file")
    enqueue.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE",
                         dest="params", help="a parameter's value (repeat for each parameter)")
    enqueue.add_argument("--json", dest="configs", metavar="JSON",
                         help='configurations as JSON: an object, or a list of them'
                              ' (\'[{"x": 1}, {"x": 2}]\')')
    enqueue.add_argument("--workspace", type=Path, help="record directory (default: .dse"
                         " beside the campaign file)")
    enqueue.add_argument("--record", metavar="URL",
                         help="the record: a postgresql:// URL (default: $DSE_RECORD, else the"
                              " workspace's dse.sqlite)")


def _completion_arguments(add: Callable[..., argparse.ArgumentParser]) -> None:
    from dse.cli._completion import SHELLS

    completion = add(
        "completion", help="print a shell completion script (bash, zsh, fish)",
        description="Print the completion script of a shell: subcommands, options, choices\n"
        "and campaign files complete with Tab. Install it once:\n"
        '  bash: add  eval "$(dse completion bash)"  to ~/.bashrc\n'
        '  zsh:  add  eval "$(dse completion zsh)"   to ~/.zshrc\n'
        "  fish: dse completion fish > ~/.config/fish/completions/dse.fish",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    completion.add_argument("shell", choices=SHELLS, help="the shell: bash, zsh or fish")


_SUBCOMMANDS: dict[str, Callable[[Callable[..., argparse.ArgumentParser]], None]] = {
    "init": _init_arguments, "run": _run_arguments, "status": _status_arguments,
    "report": _report_arguments,
    "plugins": _plugins_arguments, "show": _show_arguments,
    "dashboard": _dashboard_arguments, "sync": _sync_arguments,
    "enqueue": _enqueue_arguments,
    "invalidate": _invalidate_arguments, "export": _export_arguments,
    "doctor": _doctor_arguments, "record": _record_arguments,
    "completion": _completion_arguments,
}
"""Each subcommand's arguments, in the order ``dse --help`` lists them."""


_REFUSED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
"""What the machine answers a write it refuses: a full disk or quota, a file grown past the
limit, a read-only file system."""
_REFUSED_FILE = frozenset({errno.EACCES, errno.EPERM})
"""What it answers about a file it will not let dse open (only with the file named)."""


def _refused(exc: OSError) -> bool:
    return exc.errno in _REFUSED or (exc.errno in _REFUSED_FILE and exc.filename is not None)


def _refusal(exc: OSError) -> str:
    """One line about what the machine refused: what, and where."""
    where = f"{exc.filename}: " if exc.filename is not None else ""
    return f"{where}{exc.strerror or exc} (nothing already recorded is lost)"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dse`` command; returns the exit code."""
    if argv is None:
        # The process's entry (the console script, `python -m dse`): what it imported lives
        # until it exits, so no collection walks it again, nor the one at exit (about 5% of
        # the instructions of `dse status`).
        gc.freeze()
        argv = sys.argv[1:]
    # `dse status ...` makes its own subparser alone; anything else (`dse --help`, an unknown
    # command) the whole parser, whose help and errors name every subcommand.
    only = argv[0] if argv and argv[0] in _SUBCOMMANDS and argv[0] != "completion" else None
    parser = _parser(only)
    args = _parse(parser, argv)
    console = Console(json_output=getattr(args, "json", False))
    if args.command == "completion":
        from dse.cli._completion import completion_script

        console.write(completion_script(parser, args.shell))
        return ExitCode.OK
    try:
        return COMMANDS[args.command](args, console)
    except StorageError as exc:
        console.error(str(exc))
        return ExitCode.ENVIRONMENT_ERROR
    except DamagedRecordError as exc:
        console.error(str(exc))
        return ExitCode.DAMAGED_RECORD
    except OSError as exc:
        if not _refused(exc) or os.environ.get("DSE_DEBUG"):
            return _internal(exc, console)
        console.error(_refusal(exc))
        return ExitCode.ENVIRONMENT_ERROR
    except DseError as exc:
        console.error(str(exc))
        return ExitCode.USAGE_ERROR
    except KeyboardInterrupt:
        console.error("interrupted")
        return ExitCode.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - anything else is a bug: one line, or DSE_DEBUG's traceback
        return _internal(exc, console)


def _internal(exc: Exception, console: Console) -> int:
    if os.environ.get("DSE_DEBUG"):
        raise exc
    console.error(
        f"internal error: {type(exc).__name__}: {exc} (set DSE_DEBUG=1 for a traceback)"
    )
    return ExitCode.INTERNAL_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
