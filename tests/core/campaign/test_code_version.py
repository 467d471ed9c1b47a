"""The code version of a workload: its git commit and a digest of its uncommitted changes."""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

import dse
from dse.campaign._code import detect_code_version

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_commit_and_uncommitted_changes_make_the_code_version(tmp_path: Path) -> None:
    repo = tmp_path / "work"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "train.py").write_text("print(1)\n")
    git(repo, "add", "train.py")
    git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "one")
    commit = git(repo, "rev-parse", "HEAD")
    workspace = repo / ".dse"
    workspace.mkdir()
    (workspace / "dse.sqlite").write_text("trials write here")

    clean = detect_code_version(repo, exclude=workspace)
    (repo / "train.py").write_text("print(2)\n")
    edited = detect_code_version(repo, exclude=workspace)
    (repo / "helper.py").write_text("x = 1\n")
    untracked = detect_code_version(repo, exclude=workspace)

    assert clean == f"git:{commit}"  # the workspace's own files are not changes
    assert edited is not None
    assert edited.startswith(f"git:{commit}+dirty:")
    assert untracked is not None
    assert untracked.startswith(f"git:{commit}+dirty:")
    assert len({clean, edited, untracked}) == 3
    assert detect_code_version(tmp_path) is None  # not a repository


def test_a_campaign_file_stamps_its_workloads_code_version(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "campaign.toml").write_text(
        '[campaign]\nname = "c"\n[[objectives]]\nmetric = "v"\n[space]\nx = [1, 2]\n'
    )
    git(tmp_path, "add", "campaign.toml")
    git(tmp_path, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "one")
    camp = dse.load_campaign(tmp_path / "campaign.toml")
    assert camp.environment.code_version == f"git:{git(tmp_path, 'rev-parse', 'HEAD')}"
    explicit = tmp_path / "explicit.toml"
    explicit.write_text((tmp_path / "campaign.toml").read_text()
                        + '[environment]\ncode_version = "v1.2"\n')
    assert dse.load_campaign(explicit).environment.code_version == "v1.2"
