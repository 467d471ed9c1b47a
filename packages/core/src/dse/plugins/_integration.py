"""The base class of an integration: a place outside the record where a campaign's trials are
also written as they end (MLflow, TensorBoard, Weights & Biases), enabled by the campaign's
``[integrations.<name>]`` table.

The record stays the truth; an integration is a copy kept in step with it. The engine never
waits on one: a thread of the controller writes each trial once it is committed, and reads
what the integration already holds when it starts, so a controller killed at any point (mid
write included) leaves nothing written twice and nothing missing once a controller of the
campaign runs again. That is the contract below: :meth:`Integration.open` says which trials
the place already holds *whole* and removes what a killed writer left half written;
:meth:`Integration.write` writes one trial whole, or leaves something the next ``open``
removes.
"""

from __future__ import annotations

import hashlib
import importlib.util
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

from dse.model._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path


@dataclass(frozen=True, slots=True)
class CampaignExport:
    """The campaign an integration writes for, as :meth:`Integration.open` is told."""

    name: str
    """The campaign's name."""
    workspace: Path
    """Its workspace (where an integration keeps files by default)."""
    record: str
    """Its record as messages name it (a file, or a URL without a password)."""
    params: tuple[tuple[str, str, tuple[Any, ...]], ...]
    """Its params: (name, kind, values), with *kind* ``int``, ``float`` or ``choice`` and
    *values* the choices of a ``choice`` param, or (low, high) of a number."""
    objectives: tuple[tuple[str, str], ...]
    """Its objectives: (metric, ``minimize`` | ``maximize``), the primary first."""


@dataclass(frozen=True, slots=True)
class TrialExport:
    """One trial that reached its outcome, as :meth:`Integration.write` is given it."""

    key: str
    """What the integration files it under, unique across records: the trial's name and a
    digest of its run (``<campaign>-<run>-<number>-<8 hex>``), the same on every write of the
    trial, so a place can tell it holds it already."""
    name: str
    """The trial as ``dse show`` takes it: ``<campaign>-<run>-<number>``."""
    campaign: str
    """Its campaign's name."""
    run: int
    """Its run's id in the record."""
    number: int
    """Its number in the run."""
    config_hash: str
    """The identity of its result."""
    params: Mapping[str, Any]
    """Its params."""
    status: str
    """Its outcome: ``completed``, ``failed``, ``stopped``, ``cached``, ``interrupted`` or
    ``budget_exhausted``."""
    failure: str | None
    """Its failure class (``None`` unless it failed or was interrupted)."""
    message: str | None
    """The record's words on how it ended."""
    metrics: Mapping[str, float]
    """Its result's numeric metrics (empty without a result)."""
    score: float | None
    """Its score."""
    curve: tuple[tuple[int, Mapping[str, float], float], ...]
    """Its learning curve: (step, metrics, when) as the workload reported them, in order."""
    created_at: float
    """When the record took it (seconds since the epoch)."""
    ended_at: float
    """When it reached its outcome."""
    data_version: str | None
    """The data version its result read (or it was dispatched against)."""
    cache_of: str | None
    """For a cache hit: the name of the trial whose result it reuses."""

    @property
    def last_step(self) -> int:
        """The last step of its curve (0 without one): where its final metrics stand."""
        return self.curve[-1][0] if self.curve else 0


def export_key(campaign: str, run: int, created_at: float, number: int) -> str:
    """:attr:`TrialExport.key` of trial *number* of run *run* of *campaign* (the run recorded at
    *created_at*): two records' run 1 of the same campaign never share a key."""
    digest = hashlib.sha256(f"{campaign}\0{run}\0{created_at!r}".encode()).hexdigest()[:8]
    return f"{campaign}-{run}-{number}-{digest}"


class Integration(ABC):
    """A place a campaign's trials are also written to (``[integrations.<name>]``).

    Subclasses set :attr:`name` and implement :meth:`open`, :meth:`write` and :meth:`close`;
    they are built with :meth:`from_options` from the campaign's table. Every method is
    called from one thread of the controller, never from two at once, and never from the
    engine's: an integration may take its time.
    """

    name: ClassVar[str]
    """Registered name: the campaign's ``[integrations.<name>]`` table."""
    version: ClassVar[str] = "0"
    """The integration's version (``dse plugins`` shows it)."""
    needs: ClassVar[tuple[str, ...]] = ()
    """The modules it imports (checked when the campaign is built: a missing one is a
    :class:`~dse.ConfigError` naming what to install)."""
    install: ClassVar[str] = ""
    """What installs :attr:`needs` (``pip install 'dse-core[mlflow]'``)."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, where: str) -> Self:
        """Build it from the campaign's ``[integrations.<name>]`` table (*where* names the
        table in messages): what it needs is checked here, before anything runs."""
        for module in cls.needs:
            if importlib.util.find_spec(module) is None:
                how = f" ({cls.install})" if cls.install else ""
                msg = f"{where}: needs the {module} package, which is not installed{how}"
                raise ConfigError(msg)
        try:
            return cls(**options)
        except TypeError as exc:
            raise ConfigError(f"{where}: bad option(s): {exc}") from None

    @abstractmethod
    def open(self, campaign: CampaignExport) -> Iterable[str]:
        """Make ready to write *campaign*'s trials, remove what a writer killed mid-write
        left, and return the :attr:`TrialExport.key` of every trial the place holds whole."""

    @abstractmethod
    def write(self, trial: TrialExport) -> None:
        """Write *trial* whole (it is not held yet). Killed part way, what it leaves must be
        what the next :meth:`open` removes."""

    def close(self) -> None:  # noqa: B027 - an integration with nothing to close
        """Nothing more will be written by this controller (flush, end the campaign's run)."""


def numeric(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """The metrics an integration can plot: the numbers of *metrics* (booleans and text
    left out)."""
    if not metrics:
        return {}
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}
