"""The agent contract catches the mistakes that break real runs: each broken agent below
passes the rest of the suite and fails the test named for its mistake, with a message that
says what went wrong (the suite run as a plugin author runs it, in a pytest process)."""

from __future__ import annotations

import pytest

from support.contracts import failed, run_suite

_AGENTS = '''
import random
from typing import Any

import pytest

from dse.testing.contracts import AgentContract


class _Base:
    name = "broken"
    version = "0"

    def __init__(self, space, seed=0):
        self.space, self.seed = space, seed
        self.observed = []
        self.rng = random.Random(seed)

    @property
    def exhausted(self):
        size = self.space.cardinality
        return size is not None and len(self.observed) >= size

    def observe(self, observations):
        self.observed += [dict(o.params) for o in observations if o.status is not None]

    def snapshot(self):
        return None

    def restore(self, state):
        pass


class InFlightBlind(_Base):
    """Proposes the points not observed yet, forgetting those it proposed and that are
    still running."""

    def propose(self, n, in_flight=()):
        out = []
        while len(out) < n and not self.exhausted:
            rng = random.Random(len(self.observed) * 1000 + len(out))
            for _ in range(1000):
                p = self.space.coerce(self.space.sample(rng))
                if p not in self.observed and p not in out:
                    break
            else:
                break
            out.append(p)
        return out


class Repeater(_Base):
    """Proposes new points, and every third time the point of the first trial it was told
    of."""

    def propose(self, n, in_flight=()):
        out = []
        for _ in range(n):
            if self.exhausted:
                break
            if self.observed and len(self.observed) % 3 == 2 and not out:
                out.append(self.first[1])
            else:
                out.append(self.space.sample(self.rng))
        return out

    def observe(self, observations):
        super().observe(observations)
        for o in observations:
            if o.status is not None and o.trial_number is not None:
                first = getattr(self, "first", None)
                if first is None or o.trial_number < first[0]:
                    self.first = (o.trial_number, dict(o.params))


class HashSeeded(_Base):
    """Seeds its generator with the hash of a string (different in every process); never
    proposes a point twice."""

    def __init__(self, space, seed=0):
        super().__init__(space, seed)
        self.rng = random.Random(hash(f"broken-{seed}"))
        self.proposed = []

    def propose(self, n, in_flight=()):
        out = []
        size = self.space.cardinality
        while len(out) < n and (size is None or len(self.proposed) < size):
            p = self.space.coerce(self.space.sample(self.rng))
            if p not in self.proposed:
                self.proposed.append(p)
                out.append(p)
        return out

    @property
    def exhausted(self):
        size = self.space.cardinality
        return size is not None and len(self.proposed) >= size


class TellOrderSensitive(HashSeeded):
    """Draws from a generator reseeded by the trial it was told of last: told a batch's
    results in another order, it proposes other points."""

    def __init__(self, space, seed=0):
        super().__init__(space, seed)
        self.last = 0

    def observe(self, observations):
        super().observe(observations)
        for o in observations:
            if o.trial_number is not None:
                self.last = o.trial_number

    def propose(self, n, in_flight=()):
        self.rng = random.Random(self.seed * 1_000_003 + self.last * 1_009
                                 + len(self.proposed))
        flying = [self.space.coerce(p) for p in in_flight]
        out = []
        size = self.space.cardinality
        for _ in range(10_000):
            if len(out) >= n or (size is not None and len(self.proposed) >= size):
                break
            p = self.space.coerce(self.space.sample(self.rng))
            if p not in self.proposed and p not in flying:
                self.proposed.append(p)
                out.append(p)
        return out


class NoVersion(HashSeeded):
    """Well behaved but for an empty version string."""

    version = ""

    def __init__(self, space, seed=0):
        super().__init__(space, seed)
        self.rng = random.Random(seed)


class TestInFlightBlind(AgentContract):
    @pytest.fixture
    def agent_factory(self):
        return InFlightBlind


class TestRepeater(AgentContract):
    @pytest.fixture
    def agent_factory(self):
        return Repeater


class TestHashSeeded(AgentContract):
    @pytest.fixture
    def agent_factory(self):
        return HashSeeded


class TestTellOrderSensitive(AgentContract):
    @pytest.fixture
    def agent_factory(self):
        return TellOrderSensitive


class TestNoVersion(AgentContract):
    @pytest.fixture
    def agent_factory(self):
        return NoVersion
'''


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_suite(tmp_path_factory.mktemp("broken_agents"), "test_broken_agents", _AGENTS)


@pytest.mark.parametrize(("agent", "test", "says"), [
    ("TestInFlightBlind", "test_never_proposes_a_point_in_flight", "while it was in flight"),
    ("TestRepeater", "test_never_proposes_an_observed_point_again", "already observed"),
    ("TestHashSeeded", "test_proposals_do_not_depend_on_the_hash_seed",
     "PYTHONHASHSEED=1 and 2"),
    ("TestTellOrderSensitive", "test_proposals_do_not_depend_on_the_order_results_are_told_in",
     "told the same results in another order, the agent proposed differently"),
])
def test_each_broken_agent_fails_the_test_of_its_mistake(
    outcome: str, agent: str, test: str, says: str
) -> None:
    assert f"{agent}::{test}" in failed(outcome), outcome[-3000:]
    assert says in outcome


def test_the_broken_agents_fail_nothing_else(outcome: str) -> None:
    # Each mistake is caught by its own test: the rest of the suite passes them, so a
    # failure names the mistake rather than a side effect of it.
    allowed = {
        "TestInFlightBlind::test_never_proposes_a_point_in_flight",
        "TestRepeater::test_never_proposes_an_observed_point_again",
        "TestRepeater::test_never_proposes_a_point_in_flight",
        "TestHashSeeded::test_proposals_do_not_depend_on_the_hash_seed",
        "TestTellOrderSensitive::test_proposals_do_not_depend_on_the_order_results_are_told_in",
        "TestNoVersion::test_name_and_version_are_non_empty_strings",
    }
    assert failed(outcome) <= allowed, outcome[-3000:]


def test_a_failing_contract_assertion_shows_its_values(outcome: str) -> None:
    # dse.testing is registered for pytest's assertion rewriting (the pytest11 entry
    # point): `assert cls.version` shows the value and where it came from, not a bare
    # AssertionError.
    assert "TestNoVersion::test_name_and_version_are_non_empty_strings" in failed(outcome)
    assert "where '' = <class 'test_broken_agents.NoVersion'>.version" in outcome, (
        outcome[-3000:])
