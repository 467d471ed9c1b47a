"""All five distributions share one version, and in-repo dependencies are pinned to it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["core", "agents", "backend-local", "backend-slurm", "backend-ray"]


def _project(directory: str) -> dict[str, object]:
    data = tomllib.loads((ROOT / "packages" / directory / "pyproject.toml").read_text())
    project: dict[str, object] = data["project"]
    return project


def test_every_distribution_has_the_same_version() -> None:
    versions = {d: _project(d)["version"] for d in PACKAGES}
    assert len(set(versions.values())) == 1, versions


def test_in_repo_dependencies_are_pinned_to_that_version() -> None:
    version = _project("core")["version"]
    for directory in PACKAGES:
        deps = _project(directory).get("dependencies", [])
        assert isinstance(deps, list)
        for dep in deps:
            match = re.match(r"^(dse-[a-z-]+)\s*(.*)$", dep)
            if match:
                assert match.group(2) == f"=={version}", (directory, dep)


def test_the_version_in_code_matches_the_distribution() -> None:
    text = (ROOT / "packages/core/src/dse/_version.py").read_text()
    assert f'__version__ = "{_project("core")["version"]}"' in text
    for directory, module in [("backend-local", "dse_local"), ("backend-slurm", "dse_slurm"),
                              ("backend-ray", "dse_ray"), ("agents", "dse_agents")]:
        init = (ROOT / "packages" / directory / "src" / module / "__init__.py").read_text()
        assert f'__version__ = "{_project(directory)["version"]}"' in init, directory


def test_core_depends_only_on_pluggy_rich_and_typing_extensions() -> None:
    deps = _project("core")["dependencies"]
    assert isinstance(deps, list)
    names = sorted(re.split(r"[<>=!~ \[]", d, maxsplit=1)[0] for d in deps)
    assert names == ["pluggy", "rich", "typing-extensions"]
