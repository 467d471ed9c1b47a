"""The controller keeps what the live campaign needs, never every trial it has seen: its trial
table holds the live trials and the ends of the current pass; older results are found in the
record. Counted in objects, never timed."""

from __future__ import annotations

import dse
from dse.testing import FakeClock, ProbeBackend, ProbeCluster, ScriptedAgent
from support.record import record


class TableSize(dse.EngineListener):
    """The most trials the table held for reuse at the end of a pass, and its live trials."""

    def __init__(self) -> None:
        self.cached: list[int] = []
        self.live: list[int] = []

    def on_pass(self, engine: dse.Engine) -> None:
        self.cached.append(engine.table.cached())
        self.live.append(len(list(engine.table.unfinished())))


def test_the_table_forgets_ended_trials_once_the_record_holds_them(run_campaign):
    sizes = TableSize()
    run = run_campaign(range(1, 101), mode="rolling", max_parallelism=4,
                       passes=[i % 3 for i in range(100)], listener=sizes)

    assert run.result.stats.completed == 100
    # Each pass's ends are committed in that pass: at its end the table holds none of them.
    assert max(sizes.cached) == 0
    assert max(sizes.live) <= 4


def test_a_config_of_an_earlier_pass_is_reused_from_the_record(run_campaign):
    # 1 ends in pass 1; its repeat (proposal 3) comes passes later, long after the table
    # forgot it: the claim finds the result in the record.
    run = run_campaign([1, 2, 3, 1], max_parallelism=1)

    rows = run.trials
    assert [r["status"] for r in rows] == ["completed", "completed", "completed", "cached"]
    assert rows[3]["cache_of"] == rows[0]["id"]
    assert rows[3]["score"] == 1.0


def test_a_fresh_run_reuses_its_own_results_from_the_record(make_campaign, tmp_path):
    campaign = make_campaign(max_parallelism=1)
    clock = FakeClock()
    store = dse.Store(campaign.workspace / "dse.sqlite")
    try:
        first = dse.Engine(campaign, agent=ScriptedAgent([{"x": 1}]),
                           backend=ProbeBackend(clock=clock), store=store, clock=clock).run()
        engine = dse.Engine(campaign, agent=ScriptedAgent([{"x": 1}, {"x": 2}, {"x": 2}]),
                            backend=ProbeBackend(clock=clock), store=store, clock=clock)
        engine.reuse = False  # `dse run --fresh`: the first run's result is not reused
        second = engine.run()
        rows = record(store).trials(second.campaign_id)
    finally:
        store.close()
    assert first.status == "completed"
    assert [r["status"] for r in rows] == ["completed", "completed", "cached"]
    assert rows[2]["cache_of"] == rows[1]["id"]


def test_a_probe_without_history_forgets_each_job_once_its_end_is_reported(make_campaign):
    campaign = make_campaign(max_parallelism=8, mode="rolling")
    cluster = ProbeCluster(history=False)
    clock = FakeClock()
    store = dse.Store(campaign.workspace / "dse.sqlite")
    try:
        result = dse.Engine(campaign, agent=ScriptedAgent([{"x": x} for x in range(50)]),
                            backend=ProbeBackend(clock=clock, cluster=cluster), store=store,
                            clock=clock).run()
    finally:
        store.close()
    assert result.stats.completed == 50
    assert (cluster.jobs, cluster.timeline, cluster.batches) == ({}, [], [])
    assert cluster.live == 0
