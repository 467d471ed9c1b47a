"""dse-core's stopping rules on their own (median, asha, hyperband): no engine, no store.

Each rule is driven through random learning curves the way the engine drives it — a trial
stopped reports nothing more until it is promoted, then goes on from where it stopped — and
every decision and every promotion is checked against a brute-force model of the published
rule, written here from the rule's definition (dicts and sorts over all trials, no sorted
arrays, no index arithmetic). Values are losses, as the rules see them: the engine negates a
maximised metric before a rule sees it, so nothing here knows a direction.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import dse
from dse import ConfigError, Decision, Verdict
from dse.model._types import MAX_COMPARED
from dse.plugins._stopping_rules import AshaRule, HyperbandRule, MedianRule, hyperband_rungs, rungs

if TYPE_CHECKING:
    from collections.abc import Callable

Rule = AshaRule | HyperbandRule | MedianRule
Point = tuple[int, int, float]
"""(trial number, step, value) as a rule is told it."""

VALUES = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]),
                   st.floats(-1e6, 1e6, allow_nan=False))
"""Losses, often tied (ties are broken by trial number, never by chance)."""
ETAS = st.sampled_from([2, 3, 4, 2.5])


# -- learning curves and an engine's way of driving a rule ---------------------------------


@st.composite
def curves(draw: st.DrawFn, max_step: int, most: int = 12) -> list[Point]:
    """Up to *most* trials, each reporting a few increasing steps (often skipping rungs,
    sometimes at or past *max_step*), interleaved in a random order."""
    trials = draw(st.integers(1, most))
    per: dict[int, list[tuple[int, float]]] = {}
    for trial in range(1, trials + 1):
        steps = sorted(draw(st.sets(st.integers(0, max_step + 2), max_size=7)))
        per[trial] = [(step, draw(VALUES)) for step in steps]
    total = sum(len(points) for points in per.values())
    picks = draw(st.lists(st.integers(0, trials - 1), min_size=total, max_size=total))
    taken = dict.fromkeys(per, 0)
    out: list[Point] = []
    for pick in picks:  # the picked trial reports next, or the next one with points left
        trial = next(t for i in range(trials) if taken[t := (pick + i) % trials + 1]
                     < len(per[t]))
        step, value = per[trial][taken[trial]]
        taken[trial] += 1
        out.append((trial, step, value))
    return out


@dataclass
class Log:
    """What an engine saw driving a rule: every call in order and what it answered."""

    reports: list[tuple[Point, Decision | None]] = field(default_factory=list)
    promotions: list[tuple[frozenset[int], list[Decision], int]] = field(default_factory=list)
    """(the stopped trials it was asked about, its answer, how many the engine took)."""
    calls: list[tuple[str, Any]] = field(default_factory=list)
    stopped: set[int] = field(default_factory=set)


def drive(rule: Rule, points: list[Point], takes: list[int],
          model: Callable[[Point], Decision | None] | None = None,
          promoted: Callable[[frozenset[int]], list[Decision]] | None = None) -> Log:
    """Report *points* in order as an engine would: a stopped trial's points wait (it is not
    running) until a promotion resumes it. After the i-th point the engine asks for
    promotions and resumes the first ``takes[i]`` it is given (room for that many). With a
    *model*, each answer is checked against it as it comes."""
    log = Log()
    waiting: dict[int, list[Point]] = {}
    for i, point in enumerate(points):
        trial = point[0]
        if trial in log.stopped:
            waiting.setdefault(trial, []).append(point)
            continue
        _report(rule, point, log, model)
        if not takes[i]:
            continue
        snapshot = frozenset(log.stopped)
        answer = list(rule.promotions(snapshot))
        if promoted is not None:
            assert [_plain(d) for d in answer] == [_plain(d) for d in promoted(snapshot)]
        log.calls.append(("promotions", snapshot))
        log.promotions.append((snapshot, answer, takes[i]))
        for decision in answer[:takes[i]]:
            log.stopped.discard(decision.trial)
            for later in waiting.pop(decision.trial, []):
                if decision.trial not in log.stopped:
                    _report(rule, later, log, model)
    return log


def _report(rule: Rule, point: Point, log: Log,
            model: Callable[[Point], Decision | None] | None) -> None:
    decision = rule.report(*point)
    if model is not None:
        expected = model(point)
        assert _plain(decision) == _plain(expected), point
    log.calls.append(("report", point))
    log.reports.append((point, decision))
    if decision is not None and decision.verdict is Verdict.STOP:
        log.stopped.add(point[0])


def _plain(decision: Decision | None) -> tuple[Any, ...] | None:
    """A decision without its sentence (the model does not write prose)."""
    if decision is None:
        return None
    return (decision.trial, decision.verdict, decision.rung, decision.step, decision.value,
            decision.cutoff, decision.peers, decision.compared, decision.bracket)


def replay(rule: Rule, log: Log) -> list[Any]:
    """The same calls, in the same order, to a fresh rule: its answers."""
    out: list[Any] = []
    for kind, arg in log.calls:
        out.append(rule.report(*arg) if kind == "report" else list(rule.promotions(arg)))
    return out


def answers(log: Log) -> list[Any]:
    out: list[Any] = []
    reports = iter(log.reports)
    promotions = iter(log.promotions)
    for kind, _ in log.calls:
        out.append(next(reports)[1] if kind == "report" else next(promotions)[1])
    return out


# -- a brute-force model of successive halving ---------------------------------------------


class HalvingModel:
    """ASHA as published, from dicts: a trial reaching a rung (every rung it passed) is
    among the n there; the highest it reached decides it — on when it is among the best
    max(1, floor(n / eta)) by (value, trial number), unless fewer than *min_peers* others
    are there; promoted when stopped and among the best floor(n / eta) at its highest rung,
    or at a lower rung it reached when at every rung above that it reached it is among the
    best max(1, floor(n / eta)) (its stop landed late: it ran on past a rung)."""

    def __init__(self, ladder: Callable[[int], list[int]], *, max_step: int, eta: float,
                 min_peers: int, bracket: Callable[[int], int | None]) -> None:
        self.ladder = ladder
        self.max_step = max_step
        self.eta = eta
        self.min_peers = min_peers
        self.bracket = bracket
        self.at: dict[tuple[int | None, int], dict[int, float]] = {}
        """(bracket, rung step) -> trial -> the value it reached the rung with."""
        self.top: dict[int, tuple[int, int, float]] = {}
        """trial -> (its highest rung's step, the step and value it reached it with)."""
        self.step: dict[tuple[int, int], int] = {}
        """(trial, rung step) -> the step it reached that rung with."""

    def order(self, bracket: int | None, rung: int, without: int) -> list[tuple[int, float]]:
        at = self.at.get((bracket, rung), {})
        return sorted(((t, v) for t, v in at.items() if t != without),
                      key=lambda tv: (tv[1], tv[0]))

    def rank(self, bracket: int | None, rung: int, trial: int) -> int:
        at = self.at[(bracket, rung)]
        mine = (at[trial], trial)
        return sum(1 for t, v in at.items() if (v, t) < mine)

    def report(self, point: Point) -> Decision | None:
        trial, step, value = point
        bracket = self.bracket(trial)
        passed = [r for r in self.ladder(trial)
                  if r <= step and trial not in self.at.get((bracket, r), {})]
        for r in passed:
            self.at.setdefault((bracket, r), {})[trial] = value
            self.step[(trial, r)] = step
        if not passed:
            return None
        rung = max(passed)
        self.top[trial] = (rung, step, value)
        if step >= self.max_step:
            return None
        n = len(self.at[(bracket, rung)])
        keep = max(1, math.floor(n / self.eta))
        peers = self.order(bracket, rung, trial)
        compared = tuple(peers[:MAX_COMPARED])
        if n - 1 < self.min_peers:
            return Decision(trial, Verdict.CONTINUE, rung, step, value, None, n - 1, compared,
                            "", bracket)
        on = self.rank(bracket, rung, trial) < keep
        return Decision(trial, Verdict.CONTINUE if on else Verdict.STOP, rung, step, value,
                        peers[keep - 1][1] if peers else None, n - 1, compared, "", bracket)

    def promotions(self, stopped: frozenset[int]) -> list[Decision]:
        out: list[Decision] = []
        for trial in stopped:
            top = self.top[trial][0]
            bracket = self.bracket(trial)
            reached = [r for r in self.ladder(trial) if r <= top]
            for rung in sorted(reached, reverse=True):
                n = len(self.at[(bracket, rung)])
                keep = math.floor(n / self.eta)
                if self.rank(bracket, rung, trial) < keep:
                    peers = self.order(bracket, rung, trial)
                    out.append(Decision(trial, Verdict.PROMOTE, rung, self.step[(trial, rung)],
                                        self.at[(bracket, rung)][trial], peers[keep - 1][1],
                                        n - 1, tuple(peers[:MAX_COMPARED]), "", bracket))
                    break
                # A late stop carried it past this rung: lower rungs count only while it
                # would have gone on here.
                if self.rank(bracket, rung, trial) >= max(1, math.floor(n / self.eta)):
                    break
        out.sort(key=lambda d: (-d.rung, d.value, d.trial))
        return out


def asha_model(rule: AshaRule, min_step: int, max_step: int, eta: float) -> HalvingModel:
    ladder: list[int] = []
    k = 0
    while (r := math.ceil(Fraction(eta) ** k * min_step)) < max_step:
        if r not in ladder:
            ladder.append(r)
        k += 1
    assert rule.rungs == ladder
    return HalvingModel(lambda _: ladder, max_step=max_step, eta=eta,
                        min_peers=rule.min_peers, bracket=lambda _: None)


def s_max_of(min_step: int, max_step: int, eta: float) -> int:
    """floor(log_eta(max_step / min_step)), exactly."""
    s = 0
    while min_step * Fraction(eta) ** (s + 1) <= max_step:
        s += 1
    return s


def hyperband_model(rule: HyperbandRule, min_step: int, max_step: int,
                    eta: float) -> HalvingModel:
    s_max = s_max_of(min_step, max_step, eta)

    def ladder(trial: int) -> list[int]:
        s = s_max - rule.bracket_of(trial)
        return [math.floor(Fraction(max_step) / Fraction(eta) ** j) for j in range(s, 0, -1)]

    return HalvingModel(ladder, max_step=max_step, eta=eta, min_peers=rule.min_peers,
                        bracket=rule.bracket_of)


def unpromoted(log: Log) -> frozenset[int]:
    return frozenset(log.stopped)


# -- asha -----------------------------------------------------------------------------------


@st.composite
def asha_cases(draw: st.DrawFn) -> tuple[dict[str, Any], list[Point], list[int]]:
    max_step = draw(st.integers(2, 40))
    min_step = draw(st.integers(1, max_step - 1))
    options = {"min_step": min_step, "max_step": max_step, "reduction_factor": draw(ETAS),
               "min_peers": draw(st.integers(0, 3))}
    points = draw(curves(max_step))
    takes = draw(st.lists(st.integers(0, 3), min_size=len(points), max_size=len(points)))
    return options, points, takes


@given(asha_cases())
def test_asha_decides_and_promotes_as_the_published_rule(
        case: tuple[dict[str, Any], list[Point], list[int]]) -> None:
    """Every decision and every list of promotions is the model's, field by field: a trial
    is counted at every rung it passed (coarse steps too) and decided at the highest; it goes
    on iff among the best max(1, n // eta) of the n there (ties to the lower number);
    promotions are exactly the stopped trials among the best n // eta at their highest rung
    (or a lower one, when above it they would have gone on), highest rung first; nothing is
    decided at or past max_step."""
    options, points, takes = case
    rule = AshaRule(**options)
    model = asha_model(rule, options["min_step"], options["max_step"],
                       options["reduction_factor"])
    log = drive(rule, points, takes, model.report, model.promotions)
    assert [_plain(d) for d in rule.promotions(unpromoted(log))] == [
        _plain(d) for d in model.promotions(unpromoted(log))]
    for (_, step, _), decision in log.reports:
        assert decision is None or (decision.step == step < options["max_step"]
                                    and decision.rung <= step)


@given(asha_cases())
def test_asha_keeps_at_most_its_share_and_never_stops_the_best(
        case: tuple[dict[str, Any], list[Point], list[int]]) -> None:
    """At its arrival at a rung, a compared trial goes on only when fewer than
    max(1, n // eta) of the n trials there are better (by value, then number); the best of
    them always goes on; a promotion list names a trial once, the highest rung first."""
    options, points, takes = case
    rule = AshaRule(**options)
    log = drive(rule, points, takes)
    eta = options["reduction_factor"]
    for (trial, _, value), d in log.reports:
        if d is None or (d.verdict is Verdict.CONTINUE and d.cutoff is None):
            continue  # between rungs, past max_step, or not compared yet (min_peers)
        n = d.peers + 1
        better = sum(1 for t, v in d.compared if (v, t) < (value, trial))
        if d.verdict is Verdict.CONTINUE:
            assert better < max(1, math.floor(n / eta))
        else:
            assert better >= 1  # the best at a rung is never stopped
    for _, answer, _ in log.promotions:
        assert len({d.trial for d in answer}) == len(answer)
        assert [d.rung for d in answer] == sorted((d.rung for d in answer), reverse=True)


@given(asha_cases())
def test_asha_replays_to_the_same_decisions(
        case: tuple[dict[str, Any], list[Point], list[int]]) -> None:
    """The same calls in the same order give the same answers; a fresh rule told only the
    points (as a resumed run rebuilds it) promotes the same trials."""
    options, points, takes = case
    rule = AshaRule(**options)
    log = drive(rule, points, takes)
    assert replay(AshaRule(**options), log) == answers(log)
    assert _rebuilt(AshaRule(**options), log).promotions(unpromoted(log)) == \
        rule.promotions(unpromoted(log))


def _rebuilt(rule: Rule, log: Log) -> Rule:
    """*rule* told every point *log* reported, in order, and nothing else."""
    for point, _ in log.reports:
        rule.report(*point)
    return rule


def test_asha_counts_a_coarse_trial_at_every_rung_it_passed() -> None:
    rule = AshaRule(min_step=1, max_step=100, min_peers=0)
    assert rule.rungs == [1, 3, 9, 27, 81]
    first = rule.report(1, 50, 0.2)  # passed 1, 3, 9 and 27 in one report
    assert first is not None
    assert (first.rung, first.step, first.verdict) == (
        27, 50, Verdict.CONTINUE)
    for rung in (1, 3, 9, 27):
        d = rule.report(2, rung, 0.5)
        assert d is not None
        assert d.rung == rung
        assert (d.peers, d.compared, d.verdict) == (1, ((1, 0.2),), Verdict.STOP)
    assert rule.report(2, 30, 0.1) is None  # between rungs


def test_asha_decides_nothing_at_or_past_max_step_but_counts_it() -> None:
    rule = AshaRule(min_step=1, max_step=9, min_peers=0)
    assert rule.rungs == [1, 3]
    assert rule.report(1, 9, 5.0) is None  # a full run in one report
    assert rule.report(1, 12, 5.0) is None
    d = rule.report(2, 3, 9.0)
    assert d is not None
    assert d.peers == 1
    assert d.compared == ((1, 5.0),)
    assert d.verdict is Verdict.STOP


def test_asha_promotes_a_stopped_trial_once_its_rung_has_grown() -> None:
    """Two trials: the worse is stopped (best 1 of 2). Four more, all worse: now the best
    6 // 3 = 2 include it, and it is promoted; once it resumes and is stopped at the next
    rung it is never named at the old one again."""
    rule = AshaRule(min_step=1, max_step=27, min_peers=0)
    assert rule.report(1, 1, 0.1).verdict is Verdict.CONTINUE  # type: ignore[union-attr]
    assert rule.report(2, 1, 0.2).verdict is Verdict.STOP  # type: ignore[union-attr]
    assert rule.promotions({2}) == []
    for trial in range(3, 7):
        rule.report(trial, 1, 1.0 + trial)
    (promoted,) = rule.promotions({2, 3, 4, 5, 6})
    assert (promoted.trial, promoted.verdict, promoted.rung, promoted.value) == (
        2, Verdict.PROMOTE, 1, 0.2)
    assert (promoted.peers, promoted.cutoff) == (5, 4.0)
    assert rule.report(1, 3, 0.1).verdict is Verdict.CONTINUE  # type: ignore[union-attr]
    # Trial 2 resumes and is stopped at the next rung: never named at the old one again.
    assert rule.report(2, 3, 0.15).verdict is Verdict.STOP  # type: ignore[union-attr]
    assert rule.promotions({2}) == []


def test_asha_promotes_a_trial_whose_stop_landed_after_the_next_rung() -> None:
    """Stopped at rung 1, the trial ran on to rung 3 before its cancel took effect (a slow
    scancel): where rung 3 is too small to promote from (2 // 3 = 0) it is promoted from
    rung 1 once that rung has grown, if at rung 3 it would have gone on; never if not."""
    for late_value, promoted in ((2.0, [(2, 1, 1, 4.0)]), (4.0, [])):
        rule = AshaRule(min_step=1, max_step=9)
        for step in range(1, 10):
            rule.report(1, step, 2 + 1 / step)
        assert rule.report(2, 1, 4.0).verdict is Verdict.STOP  # type: ignore[union-attr]
        rule.report(2, 3, late_value)  # after the stop: the cancel had not landed yet
        for trial in range(3, 7):
            assert rule.report(trial, 1, 10.0 + trial).verdict is Verdict.STOP  # type: ignore[union-attr]
        assert [(d.trial, d.rung, d.step, d.value)
                for d in rule.promotions({2, 3, 4, 5, 6})] == promoted


def test_asha_promotes_the_highest_rung_first() -> None:
    rule = AshaRule(min_step=1, max_step=8, reduction_factor=2, min_peers=0)
    assert rule.rungs == [1, 2, 4]
    verdicts = [rule.report(*point).verdict  # type: ignore[union-attr]
                for point in [(1, 1, 0.1), (2, 1, 0.2), (1, 2, 0.1), (3, 1, 0.05), (3, 2, 0.3),
                              (4, 2, 0.9), (5, 2, 0.95), (6, 1, 1.0)]]
    assert [v.value for v in verdicts] == [
        "continue", "stop", "continue", "continue", "stop", "stop", "stop", "stop"]
    promoted = rule.promotions({2, 3, 4, 5, 6})
    assert [(d.trial, d.rung, d.step) for d in promoted] == [(3, 2, 2), (2, 1, 1)]


def test_asha_ties_go_to_the_lower_trial_number() -> None:
    rule = AshaRule(min_step=1, max_step=10, min_peers=0)
    assert rule.report(2, 1, 0.5).verdict is Verdict.CONTINUE  # type: ignore[union-attr]
    assert rule.report(1, 1, 0.5).verdict is Verdict.CONTINUE  # type: ignore[union-attr]
    assert rule.report(3, 1, 0.5).verdict is Verdict.STOP  # type: ignore[union-attr]


def test_asha_waits_for_min_peers_before_comparing() -> None:
    assert AshaRule(min_step=1, max_step=10).min_peers == 0  # compared from the second on
    rule = AshaRule(min_step=1, max_step=10, min_peers=2)
    for trial, value in ((1, 0.1), (2, 0.9)):
        d = rule.report(trial, 1, value)
        assert d is not None
        assert d.verdict is Verdict.CONTINUE
        assert d.cutoff is None
    d = rule.report(3, 1, 0.5)
    assert d is not None
    assert d.verdict is Verdict.STOP
    assert d.cutoff == 0.1


def test_a_nan_loss_is_the_worst() -> None:
    rule = AshaRule(min_step=1, max_step=10, min_peers=0)
    rule.report(1, 1, 5.0)
    d = rule.report(2, 1, math.nan)
    assert d is not None
    assert d.verdict is Verdict.STOP
    assert d.value == math.inf


def test_rungs_round_up_to_whole_steps() -> None:
    assert rungs(1, 100, 3) == [1, 3, 9, 27, 81]
    assert rungs(2, 50, 2) == [2, 4, 8, 16, 32]
    assert rungs(1, 100, 2.5) == [1, 3, 7, 16, 40, 98]  # 2.5, 6.25, 15.6, 39.1, 97.7
    assert rungs(5, 6, 3) == [5]


# -- hyperband ------------------------------------------------------------------------------


@st.composite
def hyperband_cases(draw: st.DrawFn) -> tuple[dict[str, Any], list[Point], list[int]]:
    eta = draw(ETAS)
    min_step = draw(st.integers(1, 4))
    max_step = draw(st.integers(math.ceil(min_step * eta), 60))
    options = {"min_step": min_step, "max_step": max_step, "reduction_factor": eta,
               "min_peers": draw(st.integers(0, 2))}
    points = draw(curves(max_step, most=16))
    takes = draw(st.lists(st.integers(0, 3), min_size=len(points), max_size=len(points)))
    return options, points, takes


@given(hyperband_cases())
def test_hyperband_is_asha_within_each_bracket(
        case: tuple[dict[str, Any], list[Point], list[int]]) -> None:
    """Every decision and promotion is the model's with Hyperband's rungs (bracket s halves s
    times, at max_step / eta**j, rounded down) and peers of the trial's bracket only; the
    last bracket decides nothing; a replay gives the same answers."""
    options, points, takes = case
    rule = HyperbandRule(**options)
    model = hyperband_model(rule, options["min_step"], options["max_step"],
                            options["reduction_factor"])
    log = drive(rule, points, takes, model.report, model.promotions)
    last = len(rule.brackets) - 1
    for (trial, _, _), d in log.reports:
        assert d is None or (rule.bracket_of(trial) != last and d.bracket == rule.bracket_of(
            trial) and all(rule.bracket_of(t) == d.bracket for t, _ in d.compared))
    assert replay(HyperbandRule(**options), log) == answers(log)
    assert _rebuilt(HyperbandRule(**options), log).promotions(unpromoted(log)) == \
        rule.promotions(unpromoted(log))


@given(st.integers(1, 20), st.integers(1, 3000), ETAS, st.integers(0, 10_000))
def test_hyperband_brackets_have_hyperbands_sizes_over_every_cycle(
        min_step: int, span: int, eta: float, start: int) -> None:
    """s_max = floor(log_eta(max/min)); bracket b = s_max - s has s rungs, all whole steps
    from min_step up and below max_step; over any cycle of consecutive trial numbers bracket
    b holds Hyperband's n = ceil((s_max + 1) / (s + 1) * eta**s) trials."""
    max_step = min_step + span
    s_max = s_max_of(min_step, max_step, eta)
    if s_max == 0:
        with pytest.raises(ConfigError, match=r"^stopping\.hyperband\.reduction_factor: "):
            HyperbandRule(min_step=min_step, max_step=max_step, reduction_factor=eta)
        return
    rule = HyperbandRule(min_step=min_step, max_step=max_step, reduction_factor=eta)
    assert len(rule.brackets) == s_max + 1
    expected = [math.ceil(Fraction(s_max + 1, s + 1) * Fraction(eta) ** s)
                for s in range(s_max, -1, -1)]
    assert rule.sizes == expected
    counts = [0] * (s_max + 1)
    for trial in range(start + 1, start + sum(expected) + 1):
        counts[rule.bracket_of(trial)] += 1
    assert counts == expected
    for b, ladder in enumerate(rule.brackets):
        assert len(ladder.rungs) == s_max - b
        assert ladder.rungs == sorted(set(ladder.rungs))
        assert all(min_step <= r < max_step for r in ladder.rungs)
    assert rule.brackets[-1].rungs == []


def test_hyperband_rungs_are_hyperbands() -> None:
    rule = HyperbandRule(min_step=1, max_step=81)
    assert [b.rungs for b in rule.brackets] == [
        [1, 3, 9, 27], [3, 9, 27], [9, 27], [27], []]
    assert rule.sizes == [81, 34, 15, 8, 5]
    assert hyperband_rungs(100, 3, 4) == [1, 3, 11, 33]
    spread = [rule.bracket_of(t) for t in range(1, 11)]
    assert len(set(spread)) >= 3  # brackets interleave rather than come in runs


# -- median ---------------------------------------------------------------------------------


class MedianModel:
    """Median stopping as published, from dicts: at the first step a trial reports in each
    window of *interval* steps from min_step (below max_step), when at least min_peers others
    reported that very step, stop iff its best so far is worse than their median there."""

    def __init__(self, min_step: int, max_step: int, min_peers: int, interval: int) -> None:
        self.min_step, self.max_step = min_step, max_step
        self.min_peers, self.interval = min_peers, interval
        self.at: dict[int, dict[int, float]] = {}
        self.curve: dict[int, dict[int, float]] = {}
        self.windows: dict[int, set[int]] = {}

    def report(self, point: Point) -> Decision | None:
        trial, step, value = point
        curve = self.curve.setdefault(trial, {})
        if curve and step <= max(curve):
            return None  # a step gone over again
        curve[step] = value
        if not self.min_step <= step < self.max_step:
            return None
        self.at.setdefault(step, {})[trial] = value
        window = (step - self.min_step) // self.interval
        decided = self.windows.setdefault(trial, set())
        if window in decided:
            return None
        decided.add(window)
        peers = {t: v for t, v in self.at[step].items() if t != trial}
        if len(peers) < self.min_peers:
            return None
        best = min(curve.values())
        median = statistics.median(peers.values())
        order = sorted(peers.items(), key=lambda tv: (tv[1], tv[0]))
        return Decision(trial, Verdict.STOP if best > median else Verdict.CONTINUE, step,
                        step, best, median, len(peers), tuple(order[:MAX_COMPARED]), "")


@given(st.data())
def test_median_stops_what_is_worse_than_the_median_at_the_same_step(data: st.DataObject,
                                                                    ) -> None:
    """Every answer is the model's; decisions come only from min_step on, below max_step,
    once per window of interval steps at the first step reported in it."""
    max_step = data.draw(st.integers(2, 30))
    min_step = data.draw(st.integers(1, max_step - 1))
    interval = data.draw(st.integers(1, 4))
    min_peers = data.draw(st.integers(1, 4))
    points = data.draw(curves(max_step, most=16))
    rule = MedianRule(min_step=min_step, max_step=max_step, min_peers=min_peers,
                      interval=interval, peers="all")
    model = MedianModel(min_step, max_step, min_peers, interval)
    log = drive(rule, points, [0] * len(points), model.report)
    windows: set[tuple[int, int]] = set()
    for (trial, step, _), d in log.reports:
        if d is None:
            continue
        assert min_step <= d.step == step < max_step
        assert d.peers >= min_peers
        window = (trial, (step - min_step) // interval)
        assert window not in windows
        windows.add(window)
    assert replay(MedianRule(min_step=min_step, max_step=max_step, min_peers=min_peers,
                             interval=interval, peers="all"), log) == answers(log)


def test_median_compares_every_interval_steps_from_min_step() -> None:
    rule = MedianRule(min_step=3, max_step=20, min_peers=2, interval=4, peers="all")
    for trial in (1, 2):
        for step in range(1, 20):
            rule.report(trial, step, 1.0)
    decided = [step for step in range(1, 20)
               if rule.report(3, step, 2.0 if step < 10 else 0.5) is not None]
    assert decided == [3, 7, 11, 15, 19]  # 19: its window [19, 23) starts below max_step


def test_median_uses_the_trials_best_so_far_and_the_peers_at_that_step() -> None:
    rule = MedianRule(min_step=1, max_step=10, min_peers=3, peers="all")
    for trial, values in ((1, [4.0, 1.0]), (2, [4.0, 2.0]), (3, [4.0, 3.0])):
        for step, value in enumerate(values, start=1):
            rule.report(trial, step, value)
    assert rule.report(4, 1, 0.5).verdict is Verdict.CONTINUE  # type: ignore[union-attr]
    d = rule.report(4, 2, 9.0)  # best so far 0.5 against the median 2.0 at step 2
    assert d is not None
    assert (d.verdict, d.value, d.cutoff, d.peers) == (
        Verdict.CONTINUE, 0.5, 2.0, 3)
    rule.report(5, 1, 4.5)
    d = rule.report(5, 2, 2.5)  # no worse than the median 2.5: not stopped
    assert d is not None
    assert (d.verdict, d.value, d.cutoff) == (Verdict.CONTINUE, 2.5, 2.5)
    assert d.compared == ((1, 1.0), (2, 2.0), (3, 3.0), (4, 9.0))


def test_median_waits_for_min_peers_and_never_decides_at_max_step() -> None:
    rule = MedianRule(min_step=1, max_step=5, min_peers=2, peers="all")
    assert rule.report(1, 1, 1.0) is None
    assert rule.report(2, 1, 1.0) is None  # one peer
    assert rule.report(3, 1, 9.0) is not None
    for trial in (1, 2):
        rule.report(trial, 5, 1.0)
    assert rule.report(3, 5, 9.0) is None


def test_a_step_gone_over_again_changes_nothing() -> None:
    rule = MedianRule(min_step=1, max_step=10, min_peers=1, peers="all")
    rule.report(1, 1, 1.0)
    rule.report(1, 2, 1.0)
    rule.report(2, 1, 0.5)
    rule.report(2, 2, 0.5)
    assert rule.report(1, 2, 0.1) is None  # a retried attempt going over step 2 again
    d = rule.report(2, 3, 0.5)
    assert d is None  # nobody else reported step 3
    d = rule.report(1, 3, 0.6)
    assert d is not None
    assert d.value == 0.6
    assert d.verdict is Verdict.STOP


# -- options --------------------------------------------------------------------------------


BAD_OPTIONS = [
    (AshaRule, "reduction_factor", 1), (AshaRule, "reduction_factor", 1.5),
    (AshaRule, "reduction_factor", math.nan), (AshaRule, "reduction_factor", math.inf),
    (AshaRule, "reduction_factor", "3"), (AshaRule, "reduction_factor", True),
    (AshaRule, "min_peers", -1), (AshaRule, "min_peers", 1.5), (AshaRule, "min_peers", True),
    (HyperbandRule, "reduction_factor", 0), (HyperbandRule, "min_peers", -2),
    (MedianRule, "min_peers", 0), (MedianRule, "min_peers", 2.0),
    (MedianRule, "interval", 0), (MedianRule, "interval", "2"),
]


@pytest.mark.parametrize(("cls", "key", "value"), BAD_OPTIONS)
def test_a_bad_option_is_one_line_naming_it(cls: type[Rule], key: str, value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        cls(min_step=1, max_step=100, **{key: value})
    message = str(caught.value)
    assert message.startswith(f"stopping.{cls.name}.{key}: ")
    assert "\n" not in message
    assert repr(value) in message


@pytest.mark.parametrize("cls", [AshaRule, HyperbandRule, MedianRule])
@pytest.mark.parametrize(("low", "high", "key"), [(0, 10, "min_step"), (10, 10, "min_step"),
                                                  (1, 1, "max_step"), (True, 10, "min_step")])
def test_steps_are_checked_by_the_rule_too(cls: type[Rule], low: int, high: int,
                                           key: str) -> None:
    """A plugin or a test may build a rule without a campaign file."""
    with pytest.raises(ConfigError, match=rf"^stopping\.{key}: "):
        cls(min_step=low, max_step=high)


def test_hyperband_refuses_a_span_with_no_bracket_to_stop() -> None:
    with pytest.raises(ConfigError, match=r"^stopping\.hyperband\.reduction_factor: 3 "):
        HyperbandRule(min_step=2, max_step=5)


def test_median_by_default_compares_with_the_trials_that_ran_to_the_end() -> None:
    # As Vizier and Optuna: the peers at a step are the finished trials' values there, not
    # every trial that got so far (the survivors of a late step make a harsh median).
    rule = MedianRule(min_step=1, max_step=4, min_peers=2)
    for trial in (1, 2):  # running, not finished: no peers yet
        assert rule.report(trial, 1, float(trial)) is None
    assert rule.report(3, 1, 9.0) is None  # two trials there, none finished
    for trial in (1, 2):
        for step in (2, 3, 4):
            rule.report(trial, step, float(trial))
    d = rule.report(3, 2, 9.0)  # now against the finished 1 and 2 at step 2
    assert d is not None
    assert (d.verdict, d.peers, d.cutoff) == (Verdict.STOP, 2, 1.5)
    assert rule.report(3, 3, 0.1) is None  # stopped: what it reports after counts for nothing
    d = rule.report(4, 2, 1.2)
    assert d is not None
    assert (d.verdict, d.peers) == (Verdict.CONTINUE, 2)
    with pytest.raises(dse.ConfigError, match=r"stopping\.median\.peers"):
        MedianRule(min_step=1, max_step=4, peers="some")
