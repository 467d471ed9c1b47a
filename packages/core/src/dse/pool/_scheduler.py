"""The pool scheduler: which waiting trial gets the resources that just freed.

Several campaigns share one pool of resources (CPU and GPU slots, or a cap on outstanding
Slurm jobs). Each pass the engine hands the scheduler the waiting requests and what is
running; :meth:`PoolScheduler.plan` says which requests start now and which one, if any,
holds a reservation.

* **Fair share.** Campaigns are served in the order of their decayed usage over their weight
  (lowest first). Usage is counted in dominant-resource seconds: a trial holding 4 of 8 GPUs
  for 60 s uses 30 s of the pool, whatever else it holds. It decays with a half-life, so a
  campaign that was idle is not owed the whole past. Within a plan, each start counts at
  once, so one pass interleaves the campaigns by weight.
* **Reservations (EASY backfill).** The first request in that order that cannot start gets a
  reservation: the earliest time enough resources will be free, from the expected ends of
  the running trials. Later requests start only when they fit now *and* either end before
  that time or use only what the reservation leaves over. So a large or long trial is never
  starved by a stream of small ones, and small ones still fill the gaps. Sizes count whatever
  the pool counts (slots, CPUs, GPUs, nodes): a trial of 8 nodes reserves 8 of the pool's
  nodes as one of 8 GPUs reserves 8 GPUs.
* **Bounded wait.** A request that has waited ``wait_factor`` times its own expected duration,
  or ``max_wait`` seconds, goes ahead of the fair-share order (oldest first) and so gets the
  reservation: even a campaign far over its share gets its trial started, and a trial's wait
  is bounded by its own length plus the time the pool needs to make room for it.

Durations are expectations: a time limit when the trial has one, else an estimate from the
history of the campaign's trials (:class:`DurationEstimate`). A trial that overruns its
expected end pushes the reservation later, never past ``max_wait`` of the reserved request.
Everything here is plain data and arithmetic on a clock the caller passes in, so schedules can
be checked exactly in virtual time (:func:`simulate`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dse.model._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "DurationEstimate",
    "Plan",
    "Point",
    "PoolScheduler",
    "Request",
    "Reservation",
    "Running",
    "fits",
    "simulate",
    "take",
]


@dataclass(frozen=True, slots=True)
class Request:
    """A trial waiting for resources."""

    key: str
    """The trial's id."""
    campaign: str
    """The campaign it belongs to (a key of the scheduler's weights)."""
    size: Mapping[str, int]
    """Resources it needs, e.g. ``{"cpus": 1, "gpus": 8}``."""
    duration: float
    """Expected run time in seconds."""
    since: float
    """When it started waiting."""


@dataclass(frozen=True, slots=True)
class Running:
    """A trial holding resources."""

    key: str
    campaign: str
    size: Mapping[str, int]
    ends: float
    """Expected end (start + expected duration); may lie in the past if it overran."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """Resources held for *key* from *start* on."""

    key: str
    campaign: str
    start: float
    size: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do now: the requests to start, in order, and the reservation, if any."""

    start: tuple[Request, ...]
    """The requests to start now, in the order to start them."""
    reservation: Reservation | None
    """The resources held for the request that goes first once they free, if one waits."""
    backfilled: tuple[str, ...] = ()
    """Keys of the started requests that went ahead of the reserved one."""


@dataclass(slots=True)
class _Usage:
    value: float = 0.0
    at: float = 0.0


class PoolScheduler:
    """Fair share by weight and decayed usage, one EASY reservation, bounded wait.

    :param capacity: the pool, e.g. ``{"cpus": 16, "gpus": 8}``.
    :param weights: each campaign's weight (its target share is its weight over the sum of the
        weights of the campaigns that have work).
    :param half_life: seconds after which past usage counts half.
    :param max_wait: seconds after which a waiting request goes first (``None``: never).
    :param wait_factor: a request that has waited this many times its own expected duration
        goes first too (``None``: never).
    :param longest_first: campaigns whose own requests are served largest expected area
        first (:meth:`area`) instead of first come first served.
    """

    def __init__(
        self,
        capacity: Mapping[str, int],
        weights: Mapping[str, float],
        *,
        half_life: float = 3600.0,
        max_wait: float | None = None,
        wait_factor: float | None = None,
        longest_first: Iterable[str] = (),
    ) -> None:
        if not capacity or any(v <= 0 for v in capacity.values()):
            raise ConfigError(f"pool capacity must be positive, got {dict(capacity)}")
        bad = {k: w for k, w in weights.items() if not (w > 0 and math.isfinite(w))}
        if bad:
            raise ConfigError(f"campaign weights must be positive numbers, got {bad}")
        if not half_life > 0:
            raise ConfigError(f"half_life must be positive, got {half_life}")
        self.capacity = dict(capacity)
        self.weights = dict(weights)
        self.half_life = half_life
        self.max_wait = max_wait
        self.wait_factor = wait_factor
        self.longest_first = frozenset(longest_first)
        self._usage: dict[str, _Usage] = {c: _Usage() for c in weights}

    # -- usage ----------------------------------------------------------------------------

    def dominant(self, size: Mapping[str, int]) -> float:
        """The largest fraction of any one resource of the pool that *size* holds."""
        unknown = set(size) - set(self.capacity)
        if any(size[k] > 0 for k in unknown):
            return math.inf
        return max((size.get(k, 0) / cap for k, cap in self.capacity.items()), default=0.0)

    def area(self, request: Request) -> float:
        """How much of the pool *request* is expected to use: its :meth:`dominant` share
        times its expected duration (the longest of equally wide trials, the widest of equally
        long ones: a 16-node trial of a 16-node pool counts as much as sixteen 1-node trials
        of the same length)."""
        return self.dominant(request.size) * request.duration

    def usage(self, campaign: str, now: float) -> float:
        """Decayed dominant-resource seconds *campaign* has been charged by *now*."""
        entry = self._usage.setdefault(campaign, _Usage(at=now))
        return entry.value * math.pow(0.5, max(now - entry.at, 0.0) / self.half_life)

    def charge(self, campaign: str, size: Mapping[str, int], seconds: float, now: float) -> None:
        """Add *seconds* of *size* to *campaign*'s usage (negative to correct an estimate)."""
        value = self.usage(campaign, now) + self.dominant(size) * seconds
        self._usage[campaign] = _Usage(max(value, 0.0), now)

    # -- planning -------------------------------------------------------------------------

    def fits_pool(self, size: Mapping[str, int]) -> bool:
        """Whether *size* could ever run in this pool."""
        keys = set(size) | set(self.capacity)
        return all(size.get(k, 0) <= self.capacity.get(k, 0) for k in keys)

    def overdue(self, request: Request, now: float) -> bool:
        """Whether *request* has waited past its bound."""
        waited = now - request.since
        return (self.max_wait is not None and waited >= self.max_wait) or (
            self.wait_factor is not None and waited >= self.wait_factor * request.duration)

    def order(self, queue: Sequence[Request], now: float) -> list[Request]:
        """*queue* in the order it is served: overdue requests first (oldest first), then
        campaigns by fair share (each pick charged at once, so campaigns interleave by weight),
        first come first served within a campaign, or largest expected :meth:`area` first for
        the campaigns in ``longest_first`` (those that queue ahead: a long or wide trial started
        last would hold the campaign's end back on its own, and one started first is never
        kept waiting by the small ones, which fill the gaps around it)."""
        overdue = [r for r in queue if self.overdue(r, now)]
        overdue.sort(key=lambda r: (r.since, r.key))
        late = {r.key for r in overdue}
        lines: dict[str, deque[Request]] = {}
        lpt = self.longest_first
        for r in sorted((r for r in queue if r.key not in late),
                        key=lambda r: (-self.area(r) if r.campaign in lpt else 0.0,
                                       r.since, r.key)):
            lines.setdefault(r.campaign, deque()).append(r)
        virtual = {c: self.usage(c, now) for c in lines}
        out = list(overdue)
        while lines:
            campaign = min(lines, key=lambda c: (virtual[c] / self.weights.get(c, 1.0), c))
            r = lines[campaign].popleft()
            if not lines[campaign]:
                del lines[campaign]
            virtual[campaign] += self.dominant(r.size) * r.duration
            out.append(r)
        return out

    def plan(self, queue: Sequence[Request], running: Sequence[Running], now: float) -> Plan:
        """Which of *queue* start now, and the reservation for the first that cannot."""
        free = dict(self.capacity)
        for job in running:
            take(free, job.size)
        ends = [(max(job.ends, now), job.size) for job in running]
        started: list[Request] = []
        backfilled: list[str] = []
        reservation: Reservation | None = None
        spare: dict[str, int] = {}
        """What is left at the reservation's start once it has what it needs."""
        for r in self.order(queue, now):
            if not self.fits_pool(r.size):
                continue  # the engine refuses these before they queue
            if not fits(free, r.size):
                if reservation is None:
                    at, spare = _earliest(free, ends, r.size)
                    reservation = Reservation(r.key, r.campaign, at, dict(r.size))
                continue
            if reservation is not None:
                if now + r.duration <= reservation.start:
                    pass  # done before the reserved start: it delays nothing
                elif fits(spare, r.size):
                    take(spare, r.size)  # holds only what the reservation leaves over
                else:
                    continue
                backfilled.append(r.key)
            take(free, r.size)
            ends.append((now + r.duration, r.size))
            started.append(r)
        return Plan(tuple(started), reservation, tuple(backfilled))


def fits(free: Mapping[str, int], size: Mapping[str, int]) -> bool:
    """Whether *size* fits in the *free* resources."""
    return all(free.get(k, 0) >= v for k, v in size.items() if v > 0)


def take(free: dict[str, int], size: Mapping[str, int]) -> None:
    """Take *size* out of *free* (in place)."""
    for k, v in size.items():
        free[k] = free.get(k, 0) - v


def _earliest(
    free: Mapping[str, int], ends: Iterable[tuple[float, Mapping[str, int]]],
    size: Mapping[str, int],
) -> tuple[float, dict[str, int]]:
    """The earliest expected time *size* fits, releasing running trials in the order they
    end, and what is left over then."""
    now_free = dict(free)
    for at, held in sorted(ends, key=lambda e: e[0]):
        for k, v in held.items():
            now_free[k] = now_free.get(k, 0) + v
        if fits(now_free, size):
            left = dict(now_free)
            take(left, size)
            return at, left
    return math.inf, {}  # pragma: no cover - a request that fits the pool fits once all end


Point = tuple["float | str", ...]
"""A trial's params as the estimate compares them: numbers scaled to [0, 1] (log-scaled where
the parameter is), categories as they are."""


@dataclass(slots=True)
class DurationEstimate:
    """Expected durations per campaign, from the history of similar trials.

    A trial's estimate is the mean duration of the *neighbours* most similar trials of its
    campaign among the last *window* that ended (similar: nearest params, see :data:`Point`),
    capped by its time limit; with fewer than three ended, the time limit, else the longest
    seen, else *default*. Without params, a high *quantile* of the campaign's recent durations
    (a reservation built on an underestimate slips).
    """

    default: float = 3600.0
    window: int = 50
    quantile: float = 0.9
    neighbours: int = 5
    _seen: dict[str, deque[tuple[int, Point | None, float]]] = field(
        default_factory=dict, init=False, repr=False)
    """Per campaign: the last *window* ended trials, each numbered in the order it ended."""
    _quantiles: dict[str, tuple[float, int]] = field(
        default_factory=dict, init=False, repr=False)
    """Per campaign: the quantile, and how many durations had been seen when it was taken."""
    _count: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _near: dict[tuple[str, Point], tuple[int, list[tuple[float, int, float]]]] = field(
        default_factory=dict, init=False, repr=False)
    """Per campaign and point: how many durations had been seen, and the nearest of them
    (distance, number, seconds), nearest first. A waiting trial is estimated again at every
    pass, after one or two more ended: those are merged in rather than every distance taken
    again (thousands of trials queued ahead make that the scheduler's main cost)."""

    def observe(self, campaign: str, seconds: float, point: Point | None = None) -> None:
        """Add an ended trial's actual duration (and its params) to *campaign*'s history."""
        if seconds >= 0 and math.isfinite(seconds):
            seen = self._seen.setdefault(campaign, deque(maxlen=self.window))
            count = self._count.get(campaign, 0)
            seen.append((count, point, seconds))
            self._count[campaign] = count + 1

    def estimate(
        self, campaign: str, time_limit: float | None = None, point: Point | None = None
    ) -> float:
        """The expected duration of a trial of *campaign* with params *point*."""
        seen = self._seen.get(campaign)
        if seen and len(seen) >= 3:
            guess = self._similar(campaign, seen, point) if point is not None else None
            if guess is None:
                guess = self._quantile(campaign, seen)
            return min(guess, time_limit) if time_limit is not None else guess
        if time_limit is not None:
            return time_limit
        return max(s for _, _, s in seen) if seen else self.default

    def _quantile(self, campaign: str, seen: Iterable[tuple[int, Point | None, float]]) -> float:
        """The quantile of *campaign*'s recent durations, taken again after every tenth of
        a window of new ones (a run of thousands of trials asks it at each start)."""
        count = self._count.get(campaign, 0)
        cached = self._quantiles.get(campaign)
        if cached is not None and count - cached[1] < max(self.window // 10, 1):
            return cached[0]
        value = statistics.quantiles([s for _, _, s in seen], n=100, method="inclusive")[
            round(self.quantile * 100) - 1]
        self._quantiles[campaign] = (value, count)
        return value

    def _similar(
        self, campaign: str, seen: deque[tuple[int, Point | None, float]], point: Point
    ) -> float | None:
        """The mean duration of the ended trials nearest *point* (ties: the earlier ended)."""
        count = self._count[campaign]
        oldest = seen[0][0]
        cached = self._near.get((campaign, point))
        if cached is not None and all(n >= oldest for _, n, _ in cached[1]):
            # None of the nearest has left the window: the nearest now are among them and
            # the trials that ended since.
            since, near = cached
            new = [(_distance(point, p), n, s)
                   for n, p, s in itertools.islice(reversed(seen), count - since)
                   if p is not None and len(p) == len(point)]
            near = heapq.nsmallest(self.neighbours, near + new) if new else near
        else:
            near = heapq.nsmallest(self.neighbours, (
                (_distance(point, p), n, s) for n, p, s in seen
                if p is not None and len(p) == len(point)))
        if len(self._near) >= 64 * 1024:
            self._near.clear()  # of trials long started; kept bounded
        self._near[(campaign, point)] = (count, near)
        return sum(s for _, _, s in near) / len(near) if near else None


def _distance(a: Point, b: Point) -> float:
    """Squared distance: numbers by difference, categories 1 when they differ."""
    total = 0.0
    for x, y in zip(a, b, strict=True):
        if isinstance(x, str) or isinstance(y, str):
            total += x != y
        else:
            total += (x - y) ** 2
    return total


def simulate(
    plan: Callable[[Sequence[Request], Sequence[Running], float], Sequence[Request]],
    arrivals: Sequence[Request],
    actual: Mapping[str, float] | None = None,
    on_start: Callable[[Request, float, float], None] | None = None,
) -> dict[str, tuple[float, float]]:
    """Run *arrivals* (each queued at its ``since``) to the end in virtual time under *plan*
    (which returns the requests to start now); the start and end of every request.

    *actual* overrides a request's real duration (its ``duration`` stays the expectation the
    planner sees); *on_start* is called with the request, the time and its real duration
    (to charge a :class:`PoolScheduler`). A request the planner never starts, with nothing
    left to wait for, is left out of the result.
    """
    actual = actual or {}
    pending = deque(sorted(arrivals, key=lambda r: (r.since, r.key)))
    queue: list[Request] = []
    running: dict[str, Running] = {}
    ends: list[tuple[float, str]] = []
    out: dict[str, tuple[float, float]] = {}
    now = 0.0
    while pending or running or queue:
        while pending and pending[0].since <= now:
            queue.append(pending.popleft())
        for r in plan(queue, list(running.values()), now):
            queue.remove(r)
            real = actual.get(r.key, r.duration)
            running[r.key] = Running(r.key, r.campaign, r.size, now + r.duration)
            heapq.heappush(ends, (now + real, r.key))
            out[r.key] = (now, now + real)
            if on_start is not None:
                on_start(r, now, real)
        upcoming = [t for t in (ends[0][0] if ends else None,
                                pending[0].since if pending else None) if t is not None]
        if not upcoming:
            break  # what is still queued can never start
        now = min(upcoming)
        while ends and ends[0][0] <= now:
            del running[heapq.heappop(ends)[1]]
    return out
