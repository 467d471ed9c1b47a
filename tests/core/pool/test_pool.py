"""The pool scheduler inside the engine, on the probe in virtual time: exact schedules.

Each trial's params say how long it runs (``seconds``), its time limit (``limit``, through
``environment.time_limit = "{limit}"``: what the scheduler expects before any history) and how
many GPUs it holds (``gpus``, through ``environment.gpus = "{gpus}"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.campaign._model import EnvironmentConfig
from dse.model._types import AttemptState
from dse.pool._pool import Pool, drive, run_pool
from dse.pool._poolfile import PoolConfig, load_pool
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent
from support.cli import run_dse, write_plugin

if TYPE_CHECKING:
    from dse.record._records import Attempt, Trial

SPACE = dse.Space.from_dict({
    "name": {"type": "categorical", "choices": ["t1", "t2", "t3", "t4", "a", "b"]},
    "n": {"type": "int", "low": 0, "high": 1000},
    "seconds": {"type": "float", "low": 1, "high": 1000},
    "limit": {"type": "float", "low": 1, "high": 1000},
    "gpus": {"type": "int", "low": 1, "high": 8},
    "nodes": {"type": "int", "low": 1, "high": 4},
})


def script(params: Mapping[str, Any]) -> ProbeScript:
    return ProbeScript(seconds=float(params["seconds"]), metrics={"value": 1.0})


def engine(
    tmp_path: Path, name: str, trials: Sequence[Mapping[str, Any]], backend: ProbeBackend,
    clock: FakeClock, *, parallelism: int, lookahead: int = 0, sized: str = "gpus",
) -> dse.Engine:
    """A campaign of *trials* whose GPUs (or nodes: *sized*) and limits come from params."""
    largest = dse.Resources(cpus=1, gpus=8) if sized == "gpus" else dse.Resources(nodes=4)
    env = EnvironmentConfig(resource_params={sized: sized}, time_limit_param="limit",
                            resources=largest, time_limit=1000.0)
    campaign = dse.Campaign(
        name=name, space=SPACE, objectives=(dse.Objective("value"),), mode="rolling",
        max_parallelism=parallelism, lookahead=lookahead, max_trials=len(trials),
        environment=env, workspace=tmp_path / ".dse",
    )
    store = dse.Store(tmp_path / ".dse" / "dse.sqlite")
    return dse.Engine(
        campaign, agent=ScriptedAgent(trials), backend=backend, store=store, clock=clock)


def trial(name: str, gpus: int, seconds: float, n: int = 0) -> dict[str, Any]:
    """A trial holding *gpus* GPUs, or as many nodes in a campaign sized by nodes."""
    return {"name": name, "n": n, "seconds": seconds, "limit": seconds, "gpus": gpus,
            "nodes": min(gpus, 4)}


def schedule(e: dse.Engine) -> dict[str, tuple[float, float]]:
    """Trial name (with its number when names repeat) -> (start, end) of its attempt, on the
    fake clock's scale (relative to the start)."""
    out = {}
    for trial, attempt in attempts(e.store, e.campaign_id):
        name = trial.params["name"]
        key = name if name.startswith("t") else f"{name}{trial.number}"
        assert attempt.started_at is not None
        assert attempt.ended_at is not None
        out[key] = (attempt.started_at - START, attempt.ended_at - START)
    return out


def attempts(store: dse.Store, run: int) -> list[tuple[Trial, Attempt]]:
    """Each attempt of run *run* with its trial, by trial number then attempt."""
    trials = {t.id: t for t in store.reads.trials(run)}
    return [(trials[a.trial_id], a) for a in store.reads.attempts(run)]


START = 1_000_000.0


def test_a_reservation_is_honoured_a_short_trial_backfills_and_a_long_one_may_not(tmp_path):
    clock = FakeClock(START)
    backend = ProbeBackend(script, clock=clock)
    e = engine(tmp_path, "easy", [
        trial("t1", 4, 100.0),   # starts at once
        trial("t2", 8, 50.0),    # the head that cannot start: reserved for t1's end, 100 s
        trial("t3", 2, 200.0),   # fits now, but would still hold 2 GPUs at 100 s: refused
        trial("t4", 2, 60.0),    # fits and ends before 100 s: backfilled
    ], backend, clock, parallelism=4)
    [result] = run_pool([e], PoolConfig({"gpus": 8}))

    assert result.status == "completed"
    assert schedule(e) == {
        "t1": (0.0, 100.0),
        "t4": (0.0, 60.0),
        "t2": (100.0, 150.0),  # exactly at the reserved start
        "t3": (150.0, 350.0),  # greedy packing would have started it at 0 and t2 at 200
    }
    expected = [a.expected_s for _, a in attempts(e.store, e.campaign_id)]
    # The time limits while fewer than three trials had ended; t3 started after three had:
    # the mean of its nearest (here: all three) ended trials, 70 s, under its limit.
    assert expected == [100.0, 50.0, 70.0, 60.0]


def test_two_campaigns_weighted_2_to_1_share_the_pool_2_to_1(tmp_path):
    clock = FakeClock(START)
    backend = ProbeBackend(script, clock=clock)
    a = engine(tmp_path / "a", "a", [trial("a", 1, 10.0, n) for n in range(30)], backend,
               clock, parallelism=3)
    b = engine(tmp_path / "b", "b", [trial("b", 1, 10.0, n) for n in range(30)], backend,
               clock, parallelism=3)
    results = run_pool([a, b], PoolConfig({"slots": 3}, weights={"a": 2.0, "b": 1.0}))

    assert [r.status for r in results] == ["completed", "completed"]
    starts = {name: sorted(s for s, _ in schedule(e).values()) for name, e in (("a", a),
                                                                                ("b", b))}
    # Every 10 s round starts two trials of a and one of b, until a has run its 30...
    for k in range(15):
        assert starts["a"][2 * k: 2 * k + 2] == [10.0 * k] * 2
        assert starts["b"][k] == 10.0 * k
    # ...then b has the pool to itself.
    assert starts["b"][15:] == [150.0 + 10.0 * (k // 3) for k in range(15)]
    assert a.pool is not None
    shares = a.pool.shares(clock.time())
    # While both ran (the first 150 s), a held two thirds of the pool: its target.
    assert shares == {"a": (pytest.approx(2 / 3), pytest.approx(2 / 3)),
                      "b": (pytest.approx(1 / 3), pytest.approx(1 / 3))}
    # One poll per pass serves both campaigns: b saw all 20 rounds, a the 15 it ran in.
    assert (backend.cluster.passes, b.stats.passes, a.stats.passes) == (20, 20, 15)


def test_lookahead_starts_the_longest_expected_first(tmp_path):
    clock = FakeClock(START)
    backend = ProbeBackend(script, clock=clock)
    durations = [10.0, 10.0, 10.0, 10.0, 40.0]
    e = engine(tmp_path, "lpt", [trial("a", 1, d, n) for n, d in enumerate(durations)],
               backend, clock, parallelism=2, lookahead=3)
    run_pool([e], PoolConfig({"slots": 2}))
    # All five are queued at once (two slots plus three ahead) and expect their time limits:
    # the longest starts first and the short ones run beside it, ending together at 40 s,
    # where first come first served starts it last and ends at 10 + 10 + 40 = 60 s.
    got = schedule(e)
    assert got["a5"] == (0.0, 40.0)
    assert sorted(got[f"a{n}"] for n in range(1, 5)) == [
        (0.0, 10.0), (10.0, 20.0), (20.0, 30.0), (30.0, 40.0)]


def test_lookahead_starts_the_trial_spanning_the_pool_first_and_1_node_ones_after(tmp_path):
    clock = FakeClock(START)
    backend = ProbeBackend(script, clock=clock)
    # Four 1-node trials of 100 s and, proposed last, a 4-node one of 60 s on a 4-node pool.
    e = engine(tmp_path, "nodes", [*(trial("a", 1, 100.0, n) for n in range(4)),
                                   trial("t1", 4, 60.0)],
               backend, clock, parallelism=4, lookahead=4, sized="nodes")
    run_pool([e], PoolConfig({"nodes": 4}))
    # It holds the pool for 60 s, each small one a quarter of it for 100 s: it starts first.
    # Longest first would start the small ones and keep it waiting 100 s for all four.
    got = schedule(e)
    assert got["t1"] == (0.0, 60.0)
    assert sorted(got[f"a{n}"] for n in range(1, 5)) == [(60.0, 160.0)] * 4
    assert backend.cluster.running_peak == 4


def test_a_wide_trial_is_reserved_its_nodes_while_another_campaign_streams_1_node_trials(
    tmp_path,
):
    clock = FakeClock(START)
    backend = ProbeBackend(script, clock=clock)
    # A stream of 1-node trials of 20 to 35 s keeps the 4-node pool busy, ending one at a
    # time; the other campaign's second trial spans all 4 nodes and queues at 10 s.
    stream = engine(tmp_path / "s", "stream",
                    [trial("a", 1, 20.0 + 5.0 * (n % 4), n) for n in range(40)],
                    backend, clock, parallelism=4, sized="nodes")
    wide = engine(tmp_path / "w", "wide", [trial("t1", 1, 10.0), trial("t2", 4, 60.0)],
                  backend, clock, parallelism=1, sized="nodes")
    results = run_pool([stream, wide], PoolConfig({"nodes": 4}))

    assert [r.status for r in results] == ["completed", "completed"]
    got = schedule(wide)
    assert got["t1"] == (0.0, 10.0)
    running_at_10 = [(s, end) for s, end in schedule(stream).values() if s <= 10.0 < end]
    # It starts when what ran at 10 s has ended (nothing started after it may delay it)...
    assert got["t2"][0] == max(end for _, end in running_at_10)
    assert got["t2"][0] - 10.0 <= 2 * 60.0
    # ...and no trial of the stream holds a node while it runs.
    assert not [span for span in schedule(stream).values()
                if span[0] < got["t2"][1] and span[1] > got["t2"][0]]


def test_a_trial_still_queued_when_the_controller_dies_waits_again_as_the_same_attempt(
    tmp_path,
):
    clock = FakeClock(START)
    cluster = ProbeBackend(script, clock=clock).cluster
    # t4 and t1 start at once; t2 waits for all 8 GPUs. The controller dies after the first
    # pass (t4 ended at 10 s), with t2 still queued.
    trials = [trial("t4", 4, 10.0), trial("t1", 4, 100.0), trial("t2", 8, 50.0)]

    class Die(dse.EngineListener):
        def on_pass(self, engine: dse.Engine) -> None:
            raise KeyboardInterrupt  # asked twice to stop: no waiting, no cancelling t2

    first = engine(tmp_path, "easy", trials, ProbeBackend(script, clock=clock, cluster=cluster),
                   clock, parallelism=3)
    first.listener = Die()
    with pytest.raises(KeyboardInterrupt):  # recorded, then raised again to the caller
        run_pool([first], PoolConfig({"gpus": 8}))
    result = first.finished
    assert result is not None
    assert result.status == "cancelled"
    states = {t.number: a.state for t, a in attempts(first.store, result.campaign_id)}
    assert states[3] is AttemptState.QUEUED  # t2 waited for t1's GPUs: never submitted

    second = engine(tmp_path, "easy", trials,
                    ProbeBackend(script, clock=clock, cluster=cluster), clock, parallelism=3)
    [resumed] = run_pool([second], PoolConfig({"gpus": 8}), resume={"easy": result.campaign_id})

    assert resumed.status == "completed"
    third = [(a.attempt, a.state) for t, a in attempts(second.store, result.campaign_id)
             if t.number == 3]
    assert third == [(1, AttemptState.SUCCEEDED)]
    retried = [e.data["trial"] for e in second.store.reads.events(result.campaign_id, "retry")
               if e.data is not None]
    assert 3 not in retried  # nothing ran, so nothing was interrupted


def test_a_resumed_pool_remembers_the_durations_and_usage_of_the_run_so_far(tmp_path):
    clock = FakeClock(START)
    cluster = ProbeBackend(script, clock=clock).cluster
    # One 8-GPU trial at a time, each 10 s under a 100 s limit.
    trials = [{**trial(f"t{n}", 8, 10.0, n), "limit": 100.0} for n in range(6)]

    class DieAfter(dse.EngineListener):
        def on_pass(self, engine: dse.Engine) -> None:
            if engine.stats.passes == 3:
                raise KeyboardInterrupt

    first = engine(tmp_path, "recall", trials, ProbeBackend(script, clock=clock,
                                                            cluster=cluster), clock,
                   parallelism=1)
    first.listener = DieAfter()
    with pytest.raises(KeyboardInterrupt):
        run_pool([first], PoolConfig({"gpus": 8}))
    result = first.finished
    assert result is not None
    assert first.pool is not None
    assert first.pool.scheduler is not None
    before = first.pool.scheduler.usage("recall", clock.time())

    second = engine(tmp_path, "recall", trials, ProbeBackend(script, clock=clock,
                                                             cluster=cluster), clock,
                    parallelism=1)
    pool = Pool(PoolConfig({"gpus": 8}))
    pool.join(second)
    pool.start()
    second.open(resume=result.campaign_id)
    pool.recall([second])
    assert pool.scheduler is not None
    # Three attempts ended before the crash, 10 s of the whole pool each; the fourth (started
    # and charged its expectation) had not ended, so it is not in the record's usage.
    now = clock.time() - START
    decayed = sum(10.0 * 0.5 ** ((now - end) / 3600.0) for end in (10.0, 20.0, 30.0))
    assert pool.scheduler.usage("recall", clock.time()) == pytest.approx(decayed)
    assert before > 30.0
    drive(pool)
    after = [a.expected_s for t, a in attempts(second.store, result.campaign_id)
             if a.attempt > 1 or t.number > 4]
    # Every attempt started after the restart expects 10 s, from the three that ended before
    # it, not its 100 s limit.
    assert after
    assert all(x == pytest.approx(10.0) for x in after)


def test_a_campaign_never_runs_more_than_max_parallelism_in_a_larger_pool(tmp_path):
    clock = FakeClock(START)
    backend = ProbeBackend(script, clock=clock)
    e = engine(tmp_path, "capped", [trial("a", 1, 10.0, n) for n in range(6)], backend, clock,
               parallelism=2, lookahead=4)
    run_pool([e], PoolConfig({"slots": 8}))
    starts = sorted(start for start, _ in schedule(e).values())
    assert starts == [0.0, 0.0, 10.0, 10.0, 20.0, 20.0]
    assert backend.cluster.running_peak == 2


def test_a_pool_file_names_campaigns_weights_and_capacity(tmp_path):
    (tmp_path / "pool.toml").write_text(
        '[pool]\nslots = 4\ngpus = 2\nhalf_life = "10m"\nwait_factor = 3\n'
        '[[campaign]]\nfile = "a.toml"\nweight = 2\n[[campaign]]\nfile = "b.toml"\n'
    )
    config = load_pool(tmp_path / "pool.toml")
    assert config.capacity == {"slots": 4, "gpus": 2}
    assert config.half_life == 600.0
    assert config.wait_factor == 3.0
    assert [p.name for p in config.campaigns] == ["a.toml", "b.toml"]
    assert config.weights == {str((tmp_path / "a.toml").resolve()): 2.0,
                              str((tmp_path / "b.toml").resolve()): 1.0}


@pytest.mark.parametrize(("text", "message"), [
    ('[pool]\nslots = 0\n[[campaign]]\nfile = "a.toml"\n', "pool.slots: expected a positive"),
    ('[pool]\ncores = 2\n[[campaign]]\nfile = "a.toml"\n', "pool: unknown key(s) ['cores']"),
    ("[pool]\nslots = 2\n", "campaign: expected one or more [[campaign]] tables"),
    ('[[campaign]]\nfile = "a.toml"\nweight = -1\n', "campaign[0].weight: expected a positive"),
    ('[[campaign]]\nname = "a"\n', "campaign[0]: expected a table with 'file'"),
])
def test_a_bad_pool_file_is_one_config_error_naming_the_key(tmp_path, text, message):
    path = tmp_path / "pool.toml"
    path.write_text(text)
    with pytest.raises(dse.ConfigError) as info:
        load_pool(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_a_campaign_whose_trials_may_span_more_nodes_than_the_pool_is_refused_in_one_line(
    tmp_path,
):
    project = write_plugin(tmp_path)
    (project / "wide.toml").write_text(
        '[campaign]\nname = "wide"\nagent = "list"\nbackend = "probe"\n'
        '[agent.list]\npoints = [{nodes = 1}, {nodes = 4}]\n'
        '[environment]\nnodes = "{nodes}"\n'
        '[[objectives]]\nmetric = "value"\n'
        '[space]\nnodes = { type = "int", low = 1, high = 4 }\n')
    (project / "pool.toml").write_text('[pool]\nnodes = 2\n[[campaign]]\nfile = "wide.toml"\n')
    proc = run_dse(project, "run", "pool.toml")
    # Refused before anything runs: the largest trial the space allows spans 4 nodes.
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "dse: error: wide.toml: environment: a trial needs {'nodes': 4}, more than the pool"
        " has ({'nodes': 2})"]
    assert not (project / ".dse").exists() or not list((project / ".dse").rglob("attempt-*"))
