"""The pool scheduler on hand-made cases: exact plans and exact schedules in virtual time."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

from dse import ConfigError
from dse.pool._scheduler import (
    DurationEstimate,
    PoolScheduler,
    Request,
    Reservation,
    Running,
    simulate,
)

if TYPE_CHECKING:
    from collections.abc import Sequence


def gpus(n: int) -> dict[str, int]:
    return {"gpus": n}


def req(key: str, n: int, duration: float, since: float = 0.0, campaign: str = "a") -> Request:
    return Request(key, campaign, gpus(n), duration, since)


POOL = {"gpus": 8}


def test_a_reservation_is_made_for_the_head_and_a_long_small_trial_may_not_delay_it() -> None:
    sched = PoolScheduler(POOL, {"a": 1.0})
    plan = sched.plan(
        [req("big", 8, 50.0, 0.0), req("small", 2, 200.0, 1.0)],
        [Running("r", "a", gpus(4), ends=100.0)],
        now=0.0,
    )
    assert plan.start == ()
    assert plan.reservation == Reservation("big", "a", 100.0, gpus(8))


def test_a_short_trial_backfills_when_it_ends_before_the_reserved_start() -> None:
    sched = PoolScheduler(POOL, {"a": 1.0})
    plan = sched.plan(
        [req("big", 8, 50.0, 0.0), req("long", 2, 200.0, 1.0), req("short", 2, 100.0, 2.0)],
        [Running("r", "a", gpus(4), ends=100.0)],
        now=0.0,
    )
    assert [r.key for r in plan.start] == ["short"]
    assert plan.backfilled == ("short",)
    assert plan.reservation is not None
    assert plan.reservation.start == 100.0


def test_a_long_trial_backfills_only_into_what_the_reservation_leaves_over() -> None:
    sched = PoolScheduler(POOL, {"a": 1.0})
    plan = sched.plan(
        [req("big", 6, 50.0, 0.0), req("l1", 2, 500.0, 1.0), req("l2", 2, 500.0, 2.0)],
        [Running("r", "a", gpus(4), ends=100.0)],
        now=0.0,
    )
    # At 100 the 8 GPUs are free; big takes 6, so 2 are spare: l1 may hold them, l2 may not.
    assert [r.key for r in plan.start] == ["l1"]
    assert plan.reservation == Reservation("big", "a", 100.0, gpus(6))


def run(
    sched: PoolScheduler, arrivals: list[Request], actual: dict[str, float] | None = None
) -> dict[str, tuple[float, float]]:
    """The schedule of *arrivals* under *sched*, charging each start's real duration."""
    return simulate(
        lambda queue, running, now: sched.plan(queue, running, now).start,
        arrivals,
        actual,
        on_start=lambda r, now, real: sched.charge(r.campaign, r.size, real, now),
    )


def test_greedy_packing_would_starve_the_wide_trial_and_the_scheduler_starts_it_on_time() -> None:
    # A stream of 1-GPU trials of 30 s, one arriving every 5 s, keeps 6 GPUs busy; an 8-GPU
    # trial arrives at 2 s. First come first served with greedy packing would start every
    # small trial that fits and the wide one only after the stream dries up.
    stream = [req(f"s{i}", 1, 30.0, since=5.0 * i) for i in range(60)]
    wide = req("wide", 8, 40.0, since=2.0)
    sched = PoolScheduler(POOL, {"a": 1.0})
    out = run(sched, [*stream, wide])
    # Running at 2 s: s0 (ends 30). The wide trial is reserved for 30 s; s1.. (30 s long) may
    # not start in the meantime, so it starts exactly when s0 ends.
    assert out["wide"] == (30.0, 70.0)
    assert out["s1"][0] == 70.0  # queued behind the reservation, then first served
    assert all(start >= 70.0 for key, (start, _) in out.items() if key not in {"s0", "wide"})


def test_an_overrun_pushes_the_reservation_back_to_the_real_end() -> None:
    sched = PoolScheduler(POOL, {"a": 1.0})
    out = run(
        sched, [req("first", 4, 10.0), req("wide", 8, 5.0, since=1.0)], actual={"first": 25.0}
    )
    assert out["wide"] == (25.0, 30.0)


def test_campaigns_interleave_by_weight_when_usage_is_equal() -> None:
    sched = PoolScheduler(POOL, {"a": 2.0, "b": 1.0})
    queue = [req(f"a{i}", 1, 10.0, i, "a") for i in range(6)]
    queue += [req(f"b{i}", 1, 10.0, i, "b") for i in range(3)]
    order = [r.key for r in sched.order(queue, now=0.0)]
    assert order == ["a0", "b0", "a1", "a2", "b1", "a3", "a4", "b2", "a5"]


def test_past_usage_decays_with_the_half_life_and_moves_a_campaign_back() -> None:
    sched = PoolScheduler(POOL, {"a": 1.0, "b": 1.0}, half_life=100.0)
    sched.charge("a", gpus(8), 100.0, now=0.0)
    assert sched.usage("a", 0.0) == pytest.approx(100.0)
    assert sched.usage("a", 100.0) == pytest.approx(50.0)
    sched.charge("b", gpus(8), 30.0, now=200.0)
    queue = [req("a0", 1, 10.0, 0.0, "a"), req("b0", 1, 10.0, 0.0, "b")]
    # Undecayed, a (100) would wait behind b (30); decayed, a has 25 by 200 s and goes first.
    assert [r.key for r in sched.order(queue, 200.0)] == ["a0", "b0"]


def test_a_request_over_max_wait_goes_first_whatever_its_campaigns_share() -> None:
    sched = PoolScheduler(POOL, {"a": 1.0, "b": 1.0}, max_wait=60.0)
    sched.charge("a", gpus(8), 1000.0, now=0.0)
    queue = [req("a0", 1, 10.0, 0.0, "a"), req("b0", 1, 10.0, 50.0, "b")]
    assert [r.key for r in sched.order(queue, 59.0)] == ["b0", "a0"]
    assert [r.key for r in sched.order(queue, 60.0)] == ["a0", "b0"]


def test_a_trial_larger_than_the_pool_is_never_started_nor_reserved() -> None:
    sched = PoolScheduler(POOL, {"a": 1.0})
    plan = sched.plan([req("huge", 9, 1.0), req("ok", 1, 1.0, 1.0)], [], now=0.0)
    assert [r.key for r in plan.start] == ["ok"]
    assert plan.reservation is None
    assert not sched.fits_pool(gpus(9))
    assert not sched.fits_pool({"cpus": 1})  # a resource the pool does not have


def test_the_dominant_resource_counts_the_usage() -> None:
    sched = PoolScheduler({"cpus": 16, "gpus": 8}, {"a": 1.0})
    assert sched.dominant({"cpus": 4, "gpus": 1}) == pytest.approx(0.25)
    assert sched.dominant({"cpus": 2, "gpus": 4}) == pytest.approx(0.5)


def test_bad_pools_and_weights_are_one_config_error() -> None:
    with pytest.raises(ConfigError, match="capacity"):
        PoolScheduler({"gpus": 0}, {"a": 1.0})
    with pytest.raises(ConfigError, match="weights"):
        PoolScheduler(POOL, {"a": 0.0})
    with pytest.raises(ConfigError, match="half_life"):
        PoolScheduler(POOL, {"a": 1.0}, half_life=0.0)


def test_durations_come_from_the_time_limit_then_from_the_campaigns_history() -> None:
    est = DurationEstimate(default=600.0)
    assert est.estimate("a") == 600.0
    assert est.estimate("a", time_limit=120.0) == 120.0
    for seconds in (10.0, 20.0):
        est.observe("a", seconds)
    assert est.estimate("a") == 20.0  # too few to trust a quantile: the longest seen
    for seconds in range(1, 101):
        est.observe("b", float(seconds))
    assert est.estimate("b") == pytest.approx(95.1)  # window 50: 51..100, 0.9 quantile
    assert est.estimate("b", time_limit=60.0) == 60.0
    est.observe("b", float("nan"))
    assert est.estimate("b") == pytest.approx(95.1)


def test_the_simulation_leaves_out_what_can_never_start() -> None:
    sched = PoolScheduler(POOL, {"a": 1.0})
    out = run(sched, [req("huge", 9, 1.0), req("ok", 1, 2.0, 1.0)])
    assert out == {"ok": (1.0, 3.0)}


def test_a_request_waiting_past_its_own_length_times_wait_factor_goes_first() -> None:
    sched = PoolScheduler(POOL, {"a": 1.0, "b": 1.0}, wait_factor=2.0)
    sched.charge("a", gpus(8), 1000.0, now=0.0)
    queue = [req("a0", 1, 10.0, 0.0, "a"), req("b0", 1, 10.0, 5.0, "b")]
    assert not sched.overdue(queue[0], 19.0)
    assert [r.key for r in sched.order(queue, 19.0)] == ["b0", "a0"]
    assert sched.overdue(queue[0], 20.0)
    assert [r.key for r in sched.order(queue, 20.0)] == ["a0", "b0"]


def nodes(n: int) -> dict[str, int]:
    return {"nodes": n}


def greedy(queue: Sequence[Request], running: Sequence[Running], now: float) -> list[Request]:
    """Greedy packing: every queued request that fits, oldest first, nothing reserved."""
    free = {"nodes": 16}
    for job in running:
        free["nodes"] -= job.size["nodes"]
    out = []
    for r in sorted(queue, key=lambda r: (r.since, r.key)):
        if r.size["nodes"] <= free["nodes"]:
            free["nodes"] -= r.size["nodes"]
            out.append(r)
    return out


def test_a_full_width_trial_is_reserved_and_started_while_1_node_trials_would_starve_it() -> None:
    # 16 nodes; a 1-node trial of 30 s arrives every 2 s (15 run at once); a 16-node trial of
    # 60 s arrives at 11 s, when s0..s5 hold 6 nodes until 30..40 s.
    stream = [Request(f"s{i}", "a", nodes(1), 30.0, 2.0 * i) for i in range(100)]
    wide = Request("wide", "a", nodes(16), 60.0, 11.0)
    out = run(PoolScheduler({"nodes": 16}, {"a": 1.0}), [*stream, wide])
    # Reserved for the end of s5; s6.. (ending after 40 s, no node to spare) wait behind it.
    assert out["wide"] == (40.0, 100.0)
    assert out["wide"][0] - wide.since <= 2 * wide.duration
    assert out["s6"][0] == 100.0
    # Greedy packing hands every freed node to the stream: the wide trial waits for its end.
    starved = simulate(greedy, [*stream, wide])
    assert starved["wide"][0] == max(end for key, (_, end) in starved.items() if key != "wide")


@pytest.mark.parametrize("ahead", [False, True], ids=["arriving", "all-queued-ahead"])
@pytest.mark.parametrize("seed", range(5))
def test_backfill_never_delays_a_reservation_of_nodes(seed: int, ahead: bool) -> None:
    # Trials of 1 to 16 nodes with exact expected durations, arriving over time (first come
    # first served) or all queued at once (largest area first): each reserved trial starts
    # exactly at the first start it was reserved, whatever backfilled meanwhile.
    rng = random.Random(seed)
    arrivals = [
        Request(f"t{i}", "a", nodes(rng.choice([1, 1, 1, 2, 2, 4, 8, 16])),
                float(rng.randint(5, 200)), 0.0 if ahead else float(rng.randint(0, 1000)))
        for i in range(150)
    ]
    sched = PoolScheduler({"nodes": 16}, {"a": 1.0}, longest_first=["a"] if ahead else [])
    first: dict[str, float] = {}
    backfills = 0

    def plan(queue: Sequence[Request], running: Sequence[Running], now: float) -> list[Request]:
        nonlocal backfills
        p = sched.plan(queue, running, now)
        if p.reservation is not None:
            first.setdefault(p.reservation.key, p.reservation.start)
        backfills += len(p.backfilled)
        return list(p.start)

    out = simulate(plan, arrivals)
    assert len(out) == len(arrivals)
    assert first  # the case is exercised:
    assert backfills
    assert {key: out[key][0] for key in first} == first


def test_lookahead_starts_the_largest_area_first_not_the_longest() -> None:
    # On 16 nodes a 16-node trial of 50 s holds 50 pool-seconds, a 4-node trial of 150 s
    # 37.5 and a 1-node trial of 400 s 25: widest or longest alone would put one of them
    # behind the others; the area weighs both.
    queue = [Request("narrow", "a", nodes(1), 400.0, 0.0),
             Request("middle", "a", nodes(4), 150.0, 1.0),
             Request("wide", "a", nodes(16), 50.0, 2.0)]
    sched = PoolScheduler({"nodes": 16}, {"a": 1.0}, longest_first=["a"])
    assert [r.key for r in sched.order(queue, 0.0)] == ["wide", "middle", "narrow"]
    assert [r.key for r in sched.plan(queue, [], 0.0).start] == ["wide"]
    assert PoolScheduler({"nodes": 16}, {"a": 1.0}).order(queue, 0.0) == queue  # first come


def test_an_estimate_kept_up_to_date_between_passes_is_the_one_taken_afresh() -> None:
    # Trials waiting are estimated again after each end; the nearest are merged with those
    # that ended since, and taken afresh when one of them left the window.
    rng = random.Random(7)
    points = [(rng.random(), rng.choice("xy")) for _ in range(40)]
    ended: list[tuple[float, tuple[float, str]]] = []
    kept = DurationEstimate(window=20)
    for _ in range(300):
        ended.append((rng.expovariate(0.01), (rng.random(), rng.choice("xy"))))
        kept.observe("a", *ended[-1])
        fresh = DurationEstimate(window=20)
        for seconds, point in ended:
            fresh.observe("a", seconds, point)
        for point in points:
            assert kept.estimate("a", None, point) == fresh.estimate("a", None, point)
