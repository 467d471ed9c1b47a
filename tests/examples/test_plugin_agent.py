"""The third-party agent in ``examples/plugin-agent`` works as its users would install it, and
dse's ``AgentContract`` catches each mistake a copy of it makes on purpose.

A fresh virtual environment gets dse-core and the example (``dse-agent-local-search``) from
their sources with pip, as wheels, nothing editable and nothing from this repository's own
environment: dse must find the agent through its entry point alone, and the example's own
tests (the contract among them) must pass there.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from support.contracts import failed, run_suite
from support.venv import REPO, clean_env, install_example, run, run_example_tests

if TYPE_CHECKING:
    from pathlib import Path

EXAMPLE = REPO / "examples" / "plugin-agent"

pytestmark = [
    pytest.mark.slow,
    # The tests share one environment: keep them on one worker under `--dist loadgroup`.
    pytest.mark.xdist_group("plugin-agent"),
]

_BROKEN = '''
import json
import random

import pytest

from dse.testing.contracts import AgentContract
from dse_local_search import LocalSearchAgent
from dse_local_search._agent import _key


class ForgetsInFlight(LocalSearchAgent):
    """Remembers what it proposed only once it is told of it."""

    def propose(self, n, in_flight=()):
        before = set(self._seen)
        out = super().propose(n, ())
        self._seen = before
        return out


class RepeatsTheBest(LocalSearchAgent):
    """Forgets that it has seen the best point (so its neighbours may be that point)."""

    def observe(self, observations):
        super().observe(observations)
        if self._best is not None:
            self._seen.discard(_key(self._best[1]))


class HashSeeded(LocalSearchAgent):
    """Seeds its generator with the hash of a string: different in every process."""

    def __init__(self, space, *, seed=0, **options):
        super().__init__(space, seed=seed, **options)
        self._rng = random.Random(hash(("local-search", seed)))


class TestForgetsInFlight(AgentContract):
    @pytest.fixture
    def agent_factory(self):
        return lambda space, seed: ForgetsInFlight(space, seed=seed, initial=2)


class TestRepeatsTheBest(AgentContract):
    @pytest.fixture
    def agent_factory(self):
        return lambda space, seed: RepeatsTheBest(space, seed=seed, initial=2)


class TestHashSeeded(AgentContract):
    @pytest.fixture
    def agent_factory(self):
        return lambda space, seed: HashSeeded(space, seed=seed)
'''

_CAUGHT_BY = {
    "TestForgetsInFlight": "test_never_proposes_a_point_in_flight",
    "TestRepeatsTheBest": "test_never_proposes_an_observed_point_again",
    "TestHashSeeded": "test_proposals_do_not_depend_on_the_hash_seed",
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh venv, a copy of the example) with dse-core and the example installed."""
    return install_example(EXAMPLE, tmp_path_factory.mktemp("plugin-agent"))


def test_dse_plugins_lists_the_agent_found_through_its_entry_point(
    installed: tuple[Path, Path],
) -> None:
    venv, _ = installed
    rows = json.loads(run([str(venv / "bin" / "dse"), "plugins", "--json"], timeout=120))
    agents = {row["name"]: row for row in rows if row["kind"] == "agent"}
    assert sorted(agents) == ["local-search"]  # dse-core has none: nothing else leaked in
    assert agents["local-search"]["distribution"] == "dse-agent-local-search"
    assert agents["local-search"]["distribution_version"] == "0.1.0"


def test_the_examples_own_tests_pass_in_that_environment(
    installed: tuple[Path, Path],
) -> None:
    venv, example = installed
    run_example_tests(venv, example)


def test_each_broken_copy_fails_the_test_of_its_mistake(installed: tuple[Path, Path]) -> None:
    venv, example = installed
    (example / "broken").mkdir()
    out = run_suite(example / "broken", "test_broken", _BROKEN,
                    python=venv / "bin" / "python", env=clean_env())
    caught = failed(out)
    for copy, test in _CAUGHT_BY.items():
        assert f"{copy}::{test}" in caught, out[-3000:]
    # Nothing else fails, but what a mistake also breaks (a point repeated while in flight).
    assert caught <= {*(f"{c}::{t}" for c, t in _CAUGHT_BY.items()),
                      "TestRepeatsTheBest::test_never_proposes_a_point_in_flight"}, caught
