"""The contract every agent honours, as a pytest suite a plugin author subclasses.

Usage, in the plugin's own tests::

    from dse.testing.contracts import AgentContract

    class TestMyAgent(AgentContract):
        @pytest.fixture
        def agent_factory(self):
            return lambda space, seed: MyAgent(space, seed=seed)

The suite drives the agent the way the engine does (ask for up to *n*, show what is in
flight, report every kind of observation) and checks only what any agent must do, so an
adaptive agent that waits for feedback passes it as well as a grid.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

import pytest

from dse.model._hashing import canonical_json
from dse.model._space import Categorical, FloatRange, IntRange, Space
from dse.model._types import FailureClass, Observation, TrialStatus
from dse.plugins._protocols import Agent

AgentFactory: TypeAlias = Callable[[Space, int], Agent]
"""Builds the agent under test for a space and a seed."""

_ROUNDS = 100
_CHILD = "DSE_CONTRACT_PROPOSALS"
"""Set in the processes a test starts (:func:`_in_processes`): the file their proposals go
to."""
_SHUFFLED = "DSE_CONTRACT_SHUFFLED"
"""Set in the process of the tell-order test that tells results shuffled: the shuffle's seed."""
_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""What sets the number of BLAS threads."""


def _key(params: Mapping[str, Any]) -> str:
    """A point's identity: the canonical JSON the engine's configuration hash is made of."""
    return canonical_json(dict(params))


def _score(params: Mapping[str, Any]) -> float:
    """A deterministic objective for any point: numbers summed, strings by length."""
    total = 0.0
    for value in params.values():
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, int | float):
            total += math.log1p(abs(float(value)))
    return total


def _completed(params: Mapping[str, Any], number: int) -> Observation:
    score = _score(params)
    return Observation(
        params=params,
        status=TrialStatus.COMPLETED,
        metrics={"loss": score},
        score=score,
        trial_number=number,
        proposal=number,
    )


def _told(params: Mapping[str, Any], number: int) -> Observation:
    """Proposal *number*'s result: completed, but every third a failure."""
    if number % 3:
        return _completed(params, number)
    return Observation(params=params, status=TrialStatus.FAILED, trial_number=number,
                       failure=FailureClass.NONZERO_EXIT, proposal=number)


def _child(proposals: Callable[[], list[dict[str, Any]]]) -> bool:
    """In a process :func:`_in_processes` started: write the keys of *proposals()* where it
    asked, and say so (the test then stops); elsewhere ``False``."""
    out = os.environ.get(_CHILD)
    if not out:
        return False
    Path(out).write_text(json.dumps([_key(p) for p in proposals()]))
    return True


def _in_processes(
    request: pytest.FixtureRequest, tmp_path: Path, runs: list[tuple[str, dict[str, str]]]
) -> list[list[str]]:
    """Run the current test again in a pytest process per run (its name, and what it adds
    to the environment); the proposals each wrote (keys, in order)."""
    out = []
    for index, (name, extra) in enumerate(runs):
        path = tmp_path / f"proposals-{index}.json"
        env = {k: v for k, v in os.environ.items() if k not in (_CHILD, _SHUFFLED)}
        env.update(extra)
        env[_CHILD] = str(path)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-o", "addopts=", request.node.nodeid],
            cwd=request.config.rootpath, env=env, capture_output=True, text=True,
            timeout=300, check=False,
        )
        assert done.returncode == 0, (
            f"the agent's run ({name}) failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        assert path.exists(), f"the agent's run ({name}) wrote no proposals"
        out.append(json.loads(path.read_text()))
    return out


def _first_difference(first: list[str], second: list[str]) -> str:
    """Where two runs' proposals part: the first differing proposal of each."""
    where = next((i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
                 min(len(first), len(second)))
    return (f"from proposal {where + 1}: {first[where:where + 1]} vs"
            f" {second[where:where + 1]}")


class AgentContract:
    """Behaviour every :class:`dse.Agent` must show; subclass it and override
    :meth:`agent_factory`.

    The spaces the suite uses are fixtures too (:meth:`mixed_space`, :meth:`small_space`), so
    an agent that supports only some parameter kinds can narrow them, saying why.
    """

    @pytest.fixture
    def agent_factory(self) -> AgentFactory:
        """Return a callable ``(space, seed) -> agent``; every subclass overrides this."""
        pytest.fail(f"{type(self).__name__} must override the agent_factory fixture")

    @pytest.fixture
    def mixed_space(self) -> Space:
        """One parameter of each kind: categorical, int, log int, float and log float."""
        return Space(
            (
                Categorical("optimizer", ("sgd", "adam", "lamb")),
                IntRange("layers", 1, 8),
                IntRange("batch", 8, 512, log=True),
                FloatRange("dropout", 0.0, 0.5),
                FloatRange("lr", 1e-5, 1e-1, log=True),
            )
        )

    @pytest.fixture
    def small_space(self) -> Space:
        """A finite space of exactly 6 points."""
        return Space((Categorical("kind", ("a", "b", "c")), IntRange("n", 1, 2)))

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def drive(agent: Agent, space: Space, *, rounds: int, n: int = 1) -> list[dict[str, Any]]:
        """Run *agent* like the engine in waves of up to *n*, reporting each proposal as
        completed, and return the coerced proposals in order.

        Stops early when the agent proposes nothing.
        """
        proposals: list[dict[str, Any]] = []
        for _ in range(rounds):
            batch = list(agent.propose(n, []))
            assert len(batch) <= n, f"asked for {n}, got {len(batch)}"
            if not batch:
                break
            coerced = [space.coerce(p) for p in batch]
            agent.observe([_completed(p, len(proposals) + i + 1) for i, p in enumerate(coerced)])
            proposals.extend(coerced)
        return proposals

    @staticmethod
    def drive_shuffled(
        agent: Agent, space: Space, *, rounds: int, n: int, shuffle: random.Random | None
    ) -> list[dict[str, Any]]:
        """Like :meth:`drive`, every third proposal failing; with *shuffle*, each wave's
        results are told one or two at a time in an order it draws (as trials finish, or as
        the record answers them), else all at once in proposal order."""
        proposals: list[dict[str, Any]] = []
        for _ in range(rounds):
            batch = [space.coerce(p) for p in agent.propose(n, [])]
            if not batch:
                break
            told = [_told(p, len(proposals) + i + 1) for i, p in enumerate(batch)]
            if shuffle is None:
                agent.observe(told)
            else:
                shuffle.shuffle(told)
                while told:
                    some = shuffle.randint(1, 2)
                    agent.observe(told[:some])
                    told = told[some:]
            proposals.extend(batch)
        return proposals

    # -- identity -------------------------------------------------------------------------

    def test_name_and_version_are_non_empty_strings(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """The class's ``name`` and ``version`` are non-empty strings (the record stamps them)."""
        agent = agent_factory(mixed_space, 0)
        cls = type(agent)
        assert isinstance(cls.name, str)
        assert cls.name
        assert isinstance(cls.version, str)
        assert cls.version

    def test_satisfies_the_agent_protocol(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """The agent satisfies :class:`dse.Agent`, and ``exhausted`` is a bool."""
        agent = agent_factory(mixed_space, 0)
        assert isinstance(agent, Agent)
        assert isinstance(agent.exhausted, bool)

    def test_fresh_agent_on_a_finite_space_is_not_exhausted(
        self, agent_factory: AgentFactory, small_space: Space
    ) -> None:
        """A new agent on a finite space has something to propose."""
        assert agent_factory(small_space, 0).exhausted is False

    # -- propose --------------------------------------------------------------------------

    @pytest.mark.parametrize("n", [1, 3, 7])
    def test_propose_never_returns_more_than_n(
        self, agent_factory: AgentFactory, mixed_space: Space, n: int
    ) -> None:
        """``propose(n, ...)`` answers at most *n* proposals, wave after wave."""
        agent = agent_factory(mixed_space, 0)
        proposals = self.drive(agent, mixed_space, rounds=5, n=n)
        assert len(proposals) <= 5 * n

    def test_propose_one_repeatedly(self, agent_factory: AgentFactory, mixed_space: Space) -> None:
        """Asked for one at a time, it answers at most one mapping each time."""
        agent = agent_factory(mixed_space, 0)
        for number in range(1, 16):
            batch = list(agent.propose(1, []))
            assert len(batch) <= 1
            for params in batch:
                assert isinstance(params, Mapping)
                agent.observe([_completed(mixed_space.coerce(params), number)])

    def test_every_proposal_coerces_into_the_space(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """Every proposal names every parameter and coerces into the space."""
        agent = agent_factory(mixed_space, 3)
        proposals = self.drive(agent, mixed_space, rounds=10, n=4)
        # drive() coerces every proposal and would raise ParamError for one outside the space.
        for params in proposals:
            assert set(params) == set(mixed_space.names)

    def test_same_seed_gives_the_same_proposals(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """Two agents of the same seed, told the same, propose the same."""
        first = self.drive(agent_factory(mixed_space, 7), mixed_space, rounds=20)
        second = self.drive(agent_factory(mixed_space, 7), mixed_space, rounds=20)
        assert first == second

    def test_in_flight_proposals_are_accepted(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """``propose`` takes the params in flight and still answers inside the space."""
        agent = agent_factory(mixed_space, 0)
        first = list(agent.propose(1, []))
        assert len(first) <= 1
        in_flight: list[Mapping[str, Any]] = first or [mixed_space.sample(_rng())]
        second = list(agent.propose(2, in_flight))
        assert len(second) <= 2
        for params in second:
            mixed_space.coerce(params)

    def test_never_proposes_a_point_in_flight(
        self, agent_factory: AgentFactory, small_space: Space, mixed_space: Space
    ) -> None:
        """No proposal repeats a point in flight, nor one of the same batch."""
        # The engine passes what it dispatched and has not told yet; a point proposed again
        # while in flight is a cache hit of its own trial: a step spent, nothing learnt.
        for space in (small_space, mixed_space):
            agent = agent_factory(space, 0)
            flying: list[dict[str, Any]] = []
            number = 0
            for _ in range(4):
                batch = [space.coerce(p) for p in agent.propose(2, flying)]
                keys = [_key(p) for p in batch]
                assert len(set(keys)) == len(keys), f"one batch proposed a point twice: {batch}"
                again = [p for p in batch if _key(p) in {_key(f) for f in flying}]
                assert not again, (f"proposed {again} while it was in flight (in_flight="
                                   f"{flying}): the engine would count a cache hit")
                flying.extend(batch)
                if len(flying) > 2:  # the oldest end; the rest stay in flight
                    number += 1
                    agent.observe([_completed(flying.pop(0), number)])
                if agent.exhausted:
                    break

    def test_never_proposes_an_observed_point_again(
        self, agent_factory: AgentFactory, small_space: Space, mixed_space: Space
    ) -> None:
        """No proposal repeats a point already observed."""
        # A point already told is a cache hit: the step is spent and the agent learns nothing.
        for space, n in ((small_space, 1), (small_space, 4), (mixed_space, 3)):
            proposals = self.drive(agent_factory(space, 1), space, rounds=12, n=n)
            seen: dict[str, int] = {}
            for number, params in enumerate(proposals, start=1):
                first = seen.setdefault(_key(params), number)
                assert first == number, (
                    f"proposal {number} {params} repeats proposal {first}, already observed")

    def test_proposals_do_not_depend_on_the_hash_seed(
        self, agent_factory: AgentFactory, mixed_space: Space, request: pytest.FixtureRequest,
        tmp_path: Path,
    ) -> None:
        """The proposals are the same under ``PYTHONHASHSEED`` 1 and 2 (two pytest runs)."""
        # A replay (resume, `dse replay`) runs the agent in another process: proposals that
        # follow the order of a set of strings (hash-seeded per process) diverge there.
        if _child(lambda: self.drive(agent_factory(mixed_space, 11), mixed_space, rounds=12,
                                     n=2)):
            return
        first, second = _in_processes(request, tmp_path, [
            ("PYTHONHASHSEED=1", {"PYTHONHASHSEED": "1"}),
            ("PYTHONHASHSEED=2", {"PYTHONHASHSEED": "2"}),
        ])
        assert first == second, (
            "the same seed proposed differently under PYTHONHASHSEED=1 and 2"
            f" ({_first_difference(first, second)}): iterate over sorted values, not sets or"
            " dicts built from hashed strings")

    def test_proposals_do_not_depend_on_the_order_results_are_told_in(
        self, agent_factory: AgentFactory, mixed_space: Space, request: pytest.FixtureRequest,
        tmp_path: Path,
    ) -> None:
        """Told each batch's results all at once in proposal order, or one or two at a time
        in a shuffled order (as trials finish, or as the record answers them), under another
        BLAS thread count, in another process: the same proposals."""
        # dse tells a wave's results once the wave ended, in proposal order; a cache hit's
        # result is known at once, a trial's when it finishes. A rerun of a campaign answers
        # every configuration from the record only if an agent told the same results
        # proposes the same, however they came in.
        shuffled = os.environ.get(_SHUFFLED)
        if _child(lambda: self.drive_shuffled(
                agent_factory(mixed_space, 13), mixed_space, rounds=8, n=3,
                shuffle=None if shuffled is None else random.Random(int(shuffled)))):
            return
        in_order, shuffled_runs = _in_processes(request, tmp_path, [
            ("each batch told at once in proposal order, 1 BLAS thread",
             {"PYTHONHASHSEED": "0", **dict.fromkeys(_THREADS, "1")}),
            ("each batch told in a shuffled order, 2 BLAS threads",
             {"PYTHONHASHSEED": "0", _SHUFFLED: "5", **dict.fromkeys(_THREADS, "2")}),
        ])
        assert in_order == shuffled_runs, (
            f"told the same results in another order, the agent proposed differently"
            f" ({_first_difference(in_order, shuffled_runs)}): learn from a batch's results in"
            " an order of their own (their proposal or trial numbers), not in the order they"
            " were told in (or the proposals depend on the BLAS thread count)")

    def test_a_longer_run_begins_with_the_shorter_one(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """Run for 10 proposals, then afresh for 15, in batches of up to 4 told the same
        results: the longer run's first 10 proposals are the shorter run's."""
        # A rerun with a larger max_trials asks for the last wave of the first run in full
        # (4 where the first asked for 2): it reuses every configuration of the first run
        # only if the first picks of a batch do not depend on its size.
        def run(total: int) -> list[str]:
            agent = agent_factory(mixed_space, 17)
            proposals: list[str] = []
            while len(proposals) < total:
                batch = [mixed_space.coerce(p)
                         for p in agent.propose(min(4, total - len(proposals)), [])]
                if not batch:
                    break
                agent.observe([_told(p, len(proposals) + i + 1) for i, p in enumerate(batch)])
                proposals.extend(_key(p) for p in batch)
            return proposals

        short, longer = run(10), run(15)
        assert longer[: len(short)] == short, (
            f"a run of 15 did not begin with the run of 10 ({_first_difference(short, longer)}):"
            " the first picks of a batch must not depend on how many are asked for")

    # -- observe --------------------------------------------------------------------------

    def test_observe_accepts_every_kind_of_observation(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """``observe`` takes completed, failed, cached and rejected observations, and none."""
        agent = agent_factory(mixed_space, 0)
        proposed = [mixed_space.coerce(p) for p in agent.propose(4, [])]
        rng = _rng()
        while len(proposed) < 4:
            proposed.append(mixed_space.sample(rng))
        done, failed, cached, rejected = proposed
        score = _score(done)
        agent.observe(
            [
                _completed(done, 1),
                Observation(
                    params=failed,
                    status=TrialStatus.FAILED,
                    trial_number=2,
                    failure=FailureClass.NONZERO_EXIT,
                    proposal=2,
                ),
                Observation(
                    params=cached,
                    status=TrialStatus.CACHED,
                    metrics={"loss": score},
                    score=score,
                    trial_number=3,
                    proposal=3,
                ),
                Observation(params=rejected, status=None, rejected="constraint 'fits' is false",
                            proposal=4),
            ]
        )
        agent.observe([])
        batch = list(agent.propose(2, []))
        assert len(batch) <= 2
        for params in batch:
            mixed_space.coerce(params)

    def test_observe_accepts_a_trial_stopped_early_then_told_again(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """``observe`` takes a trial stopped early, then the same trial told again."""
        # A trial stopped at a rung is told with its step; promoted later, the same trial is
        # told again (a higher step, or its full result) when it ends.
        agent = agent_factory(mixed_space, 0)
        batch: list[Mapping[str, Any]] = [mixed_space.coerce(p) for p in agent.propose(2, [])]
        rng = _rng()
        while len(batch) < 2:
            batch.append(mixed_space.sample(rng))
        for number, params in enumerate(batch, start=1):
            score = _score(params)
            agent.observe([Observation(params=params, status=TrialStatus.STOPPED,
                                       metrics={"loss": score + 1}, score=score + 1,
                                       trial_number=number, step=3, max_step=27,
                                       proposal=number)])
        agent.observe([_completed(batch[0], 1)])
        later = list(agent.propose(2, batch[1:]))
        assert len(later) <= 2
        for params in later:
            mixed_space.coerce(params)

    def test_observe_accepts_partial_batches_out_of_order(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """``observe`` takes what finished one at a time, in any order (rolling mode)."""
        # Rolling mode reports what finished in each polling pass, in any order.
        agent = agent_factory(mixed_space, 0)
        batch = [mixed_space.coerce(p) for p in agent.propose(3, [])]
        for number, params in reversed(list(enumerate(batch, start=1))):
            agent.observe([_completed(params, number)])
            later = list(agent.propose(1, batch[: number - 1]))
            assert len(later) <= 1
            for proposal in later:
                mixed_space.coerce(proposal)

    def test_observe_accepts_results_of_proposals_it_did_not_make(
        self, agent_factory: AgentFactory, mixed_space: Space
    ) -> None:
        """``observe`` takes results it never proposed: a warm start's before its first
        ``propose`` (``proposal`` and ``trial_number`` ``None``) and an enqueued
        configuration's (numbered like its own proposals, between them)."""
        agent = agent_factory(mixed_space, 0)
        rng = _rng()
        warm = [mixed_space.sample(rng) for _ in range(12)]
        agent.observe([Observation(params=p, status=TrialStatus.COMPLETED,
                                   metrics={"loss": _score(p)}, score=_score(p))
                       for p in warm])
        agent.observe([Observation(params=warm[0], status=TrialStatus.FAILED,
                                   failure=FailureClass.NONZERO_EXIT)])
        enqueued = mixed_space.sample(rng)
        agent.observe([_completed(enqueued, 1)])  # proposal 1: the queue's, not the agent's
        batch = [mixed_space.coerce(p) for p in agent.propose(3, [])]
        assert len(batch) <= 3
        agent.observe([_completed(p, 2 + i) for i, p in enumerate(batch)])
        for params in agent.propose(2, []):
            mixed_space.coerce(params)

    # -- the end --------------------------------------------------------------------------

    def test_finite_space_is_driven_to_the_end_inside_the_space(
        self, agent_factory: AgentFactory, small_space: Space
    ) -> None:
        """On a finite space it stays inside it and, once exhausted, proposes nothing."""
        agent = agent_factory(small_space, 0)
        for number in range(1, _ROUNDS + 1):
            batch = list(agent.propose(1, []))
            assert len(batch) <= 1
            if not batch:
                break
            params = small_space.coerce(batch[0])
            agent.observe([_completed(params, number)])
            if agent.exhausted:
                break
        if agent.exhausted:
            assert len(agent.propose(1, [])) == 0
            assert len(agent.propose(3, [])) == 0
            assert agent.exhausted is True

    def test_exhausted_agent_proposes_nothing(
        self, agent_factory: AgentFactory, small_space: Space
    ) -> None:
        """Batches larger than what is left are cut short; exhausted, it proposes nothing."""
        # Batches larger than what is left: the last one must be cut short, not overfilled.
        agent = agent_factory(small_space, 1)
        seen: list[dict[str, Any]] = []
        for _ in range(_ROUNDS // 4):
            batch = self.drive(agent, small_space, rounds=1, n=4)
            seen.extend(batch)
            if agent.exhausted or not batch:
                break
        if agent.exhausted:
            assert seen, "exhausted before proposing a single point of a non-empty space"
            assert list(agent.propose(4, [])) == []


def _rng() -> random.Random:
    return random.Random(12345)


__all__ = ["AgentContract", "AgentFactory"]
