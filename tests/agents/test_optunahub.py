"""``sampler = "hub:samplers/<package>"``: a sampler of the OptunaHub registry as the optuna
agent's, loaded by ``optunahub.load_module`` (git) or ``load_local_module`` (a registry on
this machine), passes the agent contract, runs the campaign docs/agents.md shows, and every
way it cannot load is one line.

This machine has no network: the registry the tests load from is one they write — a
directory, a git repository served by ``file://``, or the cache ``load_module`` reads before
it downloads."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import dse
from dse.testing.contracts import AgentContract

pytest.importorskip("optunahub")

from dse_agents._optuna import OptunaAgent
from support.tiles import KERNEL

if TYPE_CHECKING:
    from collections.abc import Callable

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"

HEADER = '''\
from __future__ import annotations

import optunahub
from optuna.samplers import RandomSampler
'''

SAMPLER = '''

class {name}(optunahub.samplers.SimpleBaseSampler):
    """Seeded uniform draws, the way a registry package writes a sampler."""

    def __init__(self, search_space=None, seed=None, **options):
        super().__init__(search_space, seed)
        self.options = options
        self._random = RandomSampler(seed=seed)

    def sample_relative(self, study, trial, search_space):
        return {{name: self._random.sample_independent(study, trial, name, dist)
                 for name, dist in search_space.items()}}
'''


def write_package(root: Path, package: str, classes: tuple[str, ...] = ("UniformSampler",),
                  needs: str = "") -> Path:
    """A registry package at *root*/*package* exporting sampler *classes*; *needs*: a module
    it imports first."""
    where = root / package
    where.mkdir(parents=True)
    (where / "sampler.py").write_text(HEADER + (f"import {needs}\n" if needs else "")
                                      + "".join(SAMPLER.format(name=c) for c in classes))
    (where / "__init__.py").write_text(
        f"from .sampler import {', '.join(classes)}\n\n__all__ = {list(classes)!r}\n")
    (where / "README.md").write_text("A sampler of the tests.\n")
    return root


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    """A registry on this machine with ``samplers/uniform`` (one class) and
    ``samplers/two`` (two)."""
    root = write_package(tmp_path / "registry" / "package", "samplers/uniform")
    return write_package(root, "samplers/two", ("FirstSampler", "SecondSampler"))


class TestHubSampler(AgentContract):
    @pytest.fixture
    def agent_factory(self, registry: Path) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: OptunaAgent(space, seed=seed, sampler="hub:samplers/uniform",
                                               hub={"registry_root": str(registry)})


def _space() -> dse.Space:
    return dse.Space.from_dict({"x": {"type": "float", "low": 0, "high": 1}})


def test_the_package_s_class_takes_the_options_and_the_campaign_s_seed(registry: Path) -> None:
    agent = OptunaAgent(_space(), seed=3, sampler="hub:samplers/two:SecondSampler",
                        options={"population_size": 8}, hub={"registry_root": str(registry)})
    sampler = agent.study.sampler
    assert type(sampler).__name__ == "SecondSampler"
    assert type(sampler).__module__ == "optunahub_registry.package.samplers.two.sampler"
    assert sampler.options == {"population_size": 8}
    assert sampler._seed == 3  # SimpleBaseSampler keeps it there


def test_load_module_fetches_the_package_with_git_and_then_reads_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    remote = tmp_path / "remote" / "optuna" / "optunahub-registry"
    write_package(remote / "package", "samplers/uniform")
    git = ["git", "-C", str(remote), "-c", "user.email=t@example.com", "-c", "user.name=t",
           "-c", "commit.gpgsign=false"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "registry"]):
        subprocess.run([*git, *args], check=True)
    monkeypatch.setenv("OPTUNAHUB_CACHE_HOME", str(tmp_path / "cache"))
    hub = {"base_url": f"file://localhost{tmp_path / 'remote'}"}
    agent = OptunaAgent(_space(), seed=1, sampler="hub:samplers/uniform", hub=hub)
    assert type(agent.study.sampler).__name__ == "UniformSampler"
    cached = tmp_path / "cache" / "localhost" / "optuna" / "optunahub-registry" / "main"
    assert (cached / "package" / "samplers" / "uniform" / "__init__.py").is_file()
    shutil.rmtree(remote / "package" / "samplers" / "uniform")  # read from the cache now
    again = OptunaAgent(_space(), seed=1, sampler="hub:samplers/uniform", hub=hub)
    assert again.propose(3, []) == agent.propose(3, [])
    with pytest.raises(dse.ConfigError, match=re.escape(
            "agent.optuna.sampler: hub:samplers/nope: no such package in the registry"
            f" {hub['base_url']}/optuna/optunahub-registry@main")):
        OptunaAgent(_space(), sampler="hub:samplers/nope", hub=hub)
    elsewhere = {"base_url": f"file://localhost{tmp_path / 'nowhere'}", "force_reload": True}
    with pytest.raises(dse.ConfigError, match="could not be loaded from file://localhost.*"
                       r"\(GitCommandError: .*does not appear to be a git repository"):
        OptunaAgent(_space(), sampler="hub:samplers/uniform", hub=elsewhere)


@pytest.mark.parametrize(("sampler", "hub", "message"), [
    ("hub:samplers/two", {"registry_root": "{root}"}, "agent.optuna.sampler:"
     " hub:samplers/two: the package exports ['FirstSampler', 'SecondSampler']; name one as"
     " 'hub:samplers/two:<Class>'"),
    ("hub:samplers/two:ThirdSampler", {"registry_root": "{root}"}, "agent.optuna.sampler:"
     " hub:samplers/two:ThirdSampler: the package has no class 'ThirdSampler' (it exports"
     " ['FirstSampler', 'SecondSampler'])"),
    ("hub:samplers/uniform", {"registry_root": "{root}", "ref": "main"}, "agent.optuna.hub:"
     " registry_root (a registry on this machine) takes none of ['ref', 'repo_owner',"
     " 'repo_name', 'base_url', 'force_reload'] (a registry to download from)"),
    ("hub:samplers/uniform", {"rev": "main"}, "agent.optuna.hub: unknown key(s) ['rev'];"
     " known: ['base_url', 'force_reload', 'ref', 'registry_root', 'repo_name', 'repo_owner']"),
    ("TPESampler", {}, "agent.optuna.hub: only for a sampler of OptunaHub ('hub:...'), not"
     " 'TPESampler'"),
    ("hub:", {}, "agent.optuna.sampler: hub:: expected 'hub:samplers/<package>'"),
])
def test_a_package_or_hub_it_cannot_use_is_a_config_error(
    registry: Path, sampler: str, hub: dict[str, str], message: str,
) -> None:
    table = {k: v.replace("{root}", str(registry)) for k, v in hub.items()}
    with pytest.raises(dse.ConfigError, match=re.escape(message)):
        OptunaAgent(_space(), sampler=sampler, hub=table)


def test_a_package_needing_a_module_not_installed_says_which(registry: Path) -> None:
    write_package(registry, "samplers/needy", needs="cmaes_not_installed")
    with pytest.raises(dse.ConfigError, match=re.escape(
            "agent.optuna.sampler: hub:samplers/needy: the package needs"
            " 'cmaes_not_installed', which is not installed")):
        OptunaAgent(_space(), sampler="hub:samplers/needy",
                    hub={"registry_root": str(registry)})


def _doc_campaign() -> str:
    """The OptunaHub campaign of docs/agents.md, completed as its comment says with the
    backend, environment, objectives and space of the `ax` example."""
    text = DOC.read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text[text.index("### OptunaHub's samplers"):],
                        flags=re.DOTALL)
    hub, ax = blocks[0], blocks[1]
    return (hub.replace("[agent.optuna]", 'backend = "local"\n\n[agent.optuna]')
            + ax[ax.index("[environment]"):])


def test_the_example_of_the_docs_runs_and_an_unknown_package_stops_it_in_one_line(
    tmp_path: Path,
) -> None:
    campaign = _doc_campaign()
    ref = re.search(r'ref = "(\w+)"', campaign)
    assert ref is not None
    # What load_module keeps after it downloads the registry at that commit; here, a package
    # of the tests standing in for the registry's (the class its README names, seeded draws).
    cache = tmp_path / "cache"
    write_package(cache / "github.com" / "optuna" / "optunahub-registry" / ref[1] / "package",
                  "samplers/differential_evolution", ("DESampler",))
    env = {"OPTUNAHUB_CACHE_HOME": str(cache)}
    project = tmp_path / "project"
    project.mkdir()
    (project / "campaign.toml").write_text(campaign)
    (project / "kernel.py").write_text(KERNEL)
    done = _dse_run(project, env)
    assert done.returncode == 0, done.stderr
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        rows = db.execute("SELECT params, status FROM trials").fetchall()
    finally:
        db.close()
    assert [status for _, status in rows] == ["completed"] * 24
    assert len({params for params, _ in rows}) == 24

    registry = cache / "github.com" / "optuna" / "optunahub-registry" / ref[1] / "package"
    local = f'hub = {{ registry_root = "{registry}" }}'
    unknown = re.sub(r"hub = \{.*\}", local, campaign).replace("differential_evolution", "nope")
    (project / "campaign.toml").write_text(unknown)
    refused = _dse_run(project, env)
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert ("agent.optuna.sampler: hub:samplers/nope: no OptunaHub package 'samplers/nope'"
            f" under {registry}") in line


def _dse_run(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "dse", "run", "campaign.toml"], cwd=project,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
