"""A read-only workspace — an archive, a snapshot, a read-only mount — is read by
``dse status``, ``report``, ``show``, ``export`` and ``dse.load`` as it is, without a byte
written to it; ``dse run`` on it is one line (exit 3).

Real ``dse`` subprocesses on a record a real run wrote, made read-only two ways: ``chmod -R
a-w`` (the tests run as root here, who writes whatever the mode bits say: each command then
runs without the capabilities that let root past them, as any user would), and a read-only
bind mount where the machine lets a test make one.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import dse
from support.cli import dse_env, run_dse, write_plugin
from support.probe import probe_campaign

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

CAMPAIGN = probe_campaign()

LOAD = "import dse; r = dse.load('.dse'); print(r.campaign, len(r.trials), r.best.number)"

_PR_CAPBSET_DROP = 24
_ROOT_BYPASS = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


def _as_a_user() -> None:
    """In the child, before exec: root loses what lets it past the mode bits."""
    os.setsid()
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in _ROOT_BYPASS:
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def chmod_tree(root: Path, writable: bool) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~0o222)


@pytest.fixture(params=["chmod", "read-only mount"])
def read_only(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """A runner of ``python ARGS`` in a project made read-only (its root made by the test
    in ``project``, passed first)."""
    made: list[Path] = []

    def run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
        if request.param == "chmod":
            if not made:
                chmod_tree(project, writable=False)
                made.append(project)
            command = [sys.executable, *args]
        else:
            if shutil.which("unshare") is None:
                pytest.skip("no unshare(1) to make a read-only mount")
            mount = (f"mount --bind {project} {project} && mount -o remount,ro,bind {project}"
                     f" {project} && cd {project} && exec \"$@\"")
            command = ["unshare", "-m", "sh", "-c", mount, "sh", sys.executable, *args]
        proc = subprocess.run(command, cwd=project, env=dse_env(project), capture_output=True,
                              text=True, timeout=120, check=False,
                              preexec_fn=_as_a_user if request.param == "chmod" else None)
        if "mount" in request.param and "mount:" in proc.stderr:
            pytest.skip(f"cannot make a read-only mount here: {proc.stderr.strip()}")
        return proc

    yield run
    for root in made:
        chmod_tree(root, writable=True)


def recorded(project: Path) -> Path:
    write_plugin(project)
    (project / "campaign.toml").write_text(CAMPAIGN)
    proc = run_dse(project, "run", "campaign.toml", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return project / ".dse"


def digests(workspace: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in workspace.iterdir()
            if p.is_file()}


def reads(run: Callable[..., subprocess.CompletedProcess[str]], project: Path, best: int
          ) -> str:
    """Every reading command and dse.load on *project*: each must work (dse.load finding
    trial *best* the best); their stderr."""
    err = ""
    for args, expect in ((("status",), "demo"), (("report",), "best"),
                         (("show", "demo:2"), "trial demo-1-2"),
                         (("export", "demo"), "trial_id"), (("export", "demo", "--format",
                                                            "json"), '"campaign": "demo"')):
        proc = run(project, "-m", "dse", *args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert expect in proc.stdout, (args, proc.stdout)
        assert "error" not in proc.stderr, proc.stderr
        err += proc.stderr
    proc = run(project, "-W", "always", "-c", LOAD)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["demo", "3", str(best)], proc.stdout
    return err


def test_a_read_only_workspace_is_read_as_it_is_and_never_written(
    tmp_path: Path, read_only: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    workspace = recorded(tmp_path)
    before = digests(workspace)
    assert sorted(before) == ["dse.sqlite"]  # closed cleanly: no -wal, no -shm

    err = reads(read_only, tmp_path, 1)
    # SQLite cannot make the -wal and -shm a WAL record is read through: a snapshot, said.
    assert "read-only workspace: read as a snapshot" in err, err
    proc = read_only(tmp_path, "-m", "dse", "run", "campaign.toml")
    assert proc.returncode == 3, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dse: error:")]
    assert len(errors) == 1, proc.stderr
    assert "dse.sqlite: the record is read-only" in errors[0], proc.stderr
    assert digests(workspace) == before


def test_a_snapshot_taken_while_a_controller_wrote_is_read_with_its_wal(
    tmp_path: Path, read_only: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    (tmp_path / "live").mkdir()
    workspace = recorded(tmp_path / "live")
    # A pass in the -wal file, not yet in the database file, when the copy is taken.
    holder = sqlite3.connect(workspace / "dse.sqlite")  # open: the last to close checkpoints
    holder.execute("SELECT COUNT(*) FROM trials").fetchone()
    store = dse.Store(workspace / "dse.sqlite")
    store.invalidate("trial", "demo:1", "a throttled node", 0.0, trial_row=store.reads.find_trial(
        "demo:1")[1].id)
    store.close()
    shutil.copytree(tmp_path / "live", tmp_path / "snap")
    holder.close()
    snap = tmp_path / "snap"
    assert (snap / ".dse" / "dse.sqlite-wal").stat().st_size > 0
    before = digests(snap / ".dse")

    # Read through its -wal: nothing missed (trial 1, flagged there, is no longer the best).
    err = reads(read_only, snap, 3)
    assert "snapshot" not in err, err
    shown = read_only(snap, "-m", "dse", "show", "demo:1")
    assert "a throttled node" in shown.stdout, shown.stdout
    assert digests(snap / ".dse") == before
