"""The grid agent: every point of the Cartesian product of the parameters' values, in order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from dse_agents._options import need_int, reject_unknown
from dse_agents._points import PointIndex, TreeIndex

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse import Observation, Space


class GridAgent:
    """Proposes the full grid of a space, lazily, in a fixed order.

    The grid is the Cartesian product of each parameter's values in declared order, the last
    parameter varying fastest: categorical choices as declared, every value of an integer
    range, every step of a stepped float, and *points* evenly spaced values (log-spaced on a
    log scale, both ends included) of a float declared without a step. Points are numbered
    and decoded on demand, so a huge grid costs nothing until it is walked. A conditional
    space's grid is its tree: each point holds its active parameters only, in the same order
    (declared order, the last active parameter fastest), no point twice.

    The grid needs no feedback: it hands out as many points as asked for, ignores
    observations and what is in flight, and is :attr:`exhausted` as soon as its last point
    has been handed out. The seed is accepted (every agent is built with one) and unused.

    Options (``[agent.grid]``): ``points`` (int >= 2, default 5).
    """

    name: ClassVar[str] = "grid"
    version: ClassVar[str] = "0.1.0"
    proposes_ahead: ClassVar[bool] = True
    """It learns nothing from results (see :class:`~dse_agents.RandomAgent`)."""

    def __init__(self, space: Space, *, seed: int = 0, points: int = 5, **options: Any) -> None:
        reject_unknown(self.name, options, ["points"])
        count = need_int(self.name, "points", points, minimum=2)
        self._index: PointIndex | TreeIndex = (
            TreeIndex(space, count) if space.conditional else PointIndex(space, count))
        self._next = 0

    @property
    def size(self) -> int:
        """Number of points in the grid."""
        return self._index.size

    @property
    def exhausted(self) -> bool:
        return self._next >= self._index.size

    def propose(self, n: int, in_flight: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
        start = self._next
        stop = min(start + max(n, 0), self._index.size)
        self._next = stop
        point = self._index.point
        return [point(number) for number in range(start, stop)]

    def observe(self, observations: Sequence[Observation]) -> None:
        """Ignored: a grid does not learn."""

    def snapshot(self) -> dict[str, Any]:
        """Where the walk is (a resume continues from there)."""
        return {"next": self._next}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`snapshot`."""
        self._next = int(state["next"])
