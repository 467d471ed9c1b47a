"""What each `dse` command imports, read from a real `python -X importtime -m dse …` on a real
record: the commands that read the record (`status`, `report`, `show`, `export`) and `plugins`
never import the engine, numpy or scipy — `dse run` alone imports the engine — and each reads
only what it prints (docs/architecture.md, "The record")."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from support.cli import dse_env, run_dse, write_plugin
from support.probe import probe_campaign

if TYPE_CHECKING:
    from pathlib import Path

CAMPAIGN = probe_campaign(results=False)

ENGINE = frozenset({"dse.engine._engine", "dse.pool._pool", "dse.pool._scheduler",
                    "dse.launch._build", "dse.engine._dispatch", "dse.engine._collect",
                    "dse.engine._results", "dse.engine._resume", "dse.launch._console"})
"""The engine and its live view: `dse run`'s alone."""
NUMERIC = frozenset({"numpy", "scipy"})

READS = {
    "status": ("status", "--workspace", ".dse"),
    "status --json": ("status", "--workspace", ".dse", "--json"),
    "report": ("report", "campaign.toml"),
    "report --json": ("report", "--json"),
    "show": ("show", "demo:2"),
    "show --json": ("show", "demo:2", "--json"),
    "export": ("export", "demo", "--format", "jsonl"),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace holding one finished run of three trials."""
    project = write_plugin(tmp_path_factory.mktemp("imports"))
    (project / "campaign.toml").write_text(CAMPAIGN)
    proc = run_dse(project, "run", "campaign.toml")
    assert proc.returncode == 0, proc.stderr
    return project


def imported(project: Path, *args: str) -> set[str]:
    """Every module `python -X importtime -m dse ARGS` imported (top-level packages and
    submodules alike)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dse", *args], cwd=project,
        env=dse_env(project), capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    names = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
             if line.startswith("import time:")}
    assert "dse.cli._cli" in names, proc.stderr[-500:]
    return names


@pytest.mark.parametrize("command", [*READS, "plugins"])
def test_reading_the_record_imports_no_engine_and_no_numpy(project: Path, command: str) -> None:
    args = READS.get(command, ("plugins",))
    names = imported(project, *args)
    assert not names & ENGINE, sorted(names & ENGINE)
    assert not {n for n in names if n.split(".")[0] in NUMERIC}


@pytest.mark.parametrize("command", ["status", "status --json", "report", "report --json"])
def test_status_and_report_read_summaries_not_trial_records(project: Path, command: str) -> None:
    names = imported(project, *READS[command])
    assert not names & {"dse.report._show", "dse.report._export", "dse.plugins._environment",
                        "dse.record._lock"}


@pytest.mark.parametrize("command", [*READS, "plugins"])
def test_plain_output_is_printed_without_rich(project: Path, command: str) -> None:
    # Rich is for styled lines and tables on a terminal; off one (here, a pipe), the lines of
    # `dse report` and `dse show` and the tables of `dse status` and `dse plugins` are
    # written as Rich would print them, without it.
    names = imported(project, *READS.get(command, ("plugins",)))
    assert not {n for n in names if n.split(".")[0] == "rich"}


@pytest.mark.parametrize("command", ["show", "show --json"])
def test_show_reads_one_trial_not_the_summaries(project: Path, command: str) -> None:
    names = imported(project, *READS[command])
    assert not names & {"dse.report._report", "dse.report._export"}


@pytest.mark.parametrize("command", ["status", "status --json"])
def test_status_reads_the_three_numbers_not_the_report(project: Path, command: str) -> None:
    names = imported(project, *READS[command])
    assert "dse.report._summary" in names
    assert "dse.report._report" not in names


PLUGIN_VALUES = frozenset({"dse.model._types", "dse.model._budget", "dse.model._units",
                           "dse.campaign._campaign", "dse.plugins._plugins",
                           "dse.plugins._protocols", "dse.plugins._backend"})
"""The values crossing a plugin boundary (dataclasses built at import: about a millisecond
each), the budget's parsing and ledger, the campaign file's full loading, plugin discovery:
what `dse run` needs. The states and `Spend` the record's rows carry are `dse.model._states`' and
`dse.model._spend`'s."""


@pytest.mark.parametrize("command", [*READS])
def test_reading_the_record_imports_no_plugin_values_nor_plugins(project: Path,
                                                                 command: str) -> None:
    names = imported(project, *READS[command])
    assert {"dse.model._states", "dse.model._spend", "dse.record._records",
            "dse.record.sqlite._store"} <= names
    assert not names & PLUGIN_VALUES, sorted(names & PLUGIN_VALUES)
    assert not names & {"pluggy", "importlib.metadata"}


def test_run_imports_what_reading_the_record_leaves_out(tmp_path: Path) -> None:
    # The other side of the rule above: the modules it keeps out are real (a rename would
    # make it pass for nothing), and `dse run` does import them.
    project = write_plugin(tmp_path)
    (project / "campaign.toml").write_text(CAMPAIGN)
    names = imported(project, "run", "campaign.toml")
    assert names >= PLUGIN_VALUES, sorted(PLUGIN_VALUES - names)
    assert {"pluggy", "importlib.metadata"} <= names


def test_the_python_api_reads_without_the_engine() -> None:
    # dse.load reads a record: like the reading commands, it never imports the engine, the
    # pool or the launch (dse.run alone does, when it is called). Read from sys.modules: a
    # name dse loads on first use is imported by importlib, which -X importtime does not log.
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, dse; dse.load; dse.Results; print(*sys.modules)"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    names = set(proc.stdout.split())
    assert {"dse.api._api", "dse.report._readback"} <= names
    heavy = {n for n in names if n.split(".")[:2] in (["dse", "engine"], ["dse", "pool"],
                                                      ["dse", "launch"])}
    assert not heavy, sorted(heavy)
