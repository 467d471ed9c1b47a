"""The campaign's baseline and its scoring: what each complete run is compared against.

``[baseline]`` names params (run first, once per data version) or a recorded trial; every
score is the scorer's on a trial's metrics and the baseline of the data version it ran against
(a baseline run is compared with itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.engine._live import LiveTrial
from dse.model._errors import ConfigError
from dse.model._space import ParamError
from dse.model._types import TrialStatus
from dse.plugins._scoring import ScoringError, compute_score

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dse.campaign._model import Campaign
    from dse.plugins._scoring import Scorer, ScoreVector
    from dse.record._base import Storage


class Baselines:
    """The baseline's params and the baseline trial of each data version (one owner).

    :param scorer: who scores complete runs.
    :param vector: in a Pareto campaign, who scores each objective (``None`` otherwise).
    """

    def __init__(self, scorer: Scorer, vector: ScoreVector | None = None) -> None:
        self.scorer = scorer
        self.vector = vector
        self.params: dict[str, Any] | None = None
        """The baseline's params (``None``: the campaign has no baseline)."""
        self.given: LiveTrial | None = None
        """The recorded trial ``[baseline] trial`` names."""
        self.by_version: dict[str | None, LiveTrial] = {}
        """The baseline trial of each data version."""

    def resolve(self, campaign: Campaign, store: Storage) -> None:
        """Read the campaign's ``[baseline]``: its params, and a given trial's result."""
        spec = campaign.baseline
        if spec is None:
            return
        if spec.params is not None:
            self.params = dict(spec.params)
            return
        assert spec.trial is not None
        where = f"{campaign.source or '<campaign>'}: baseline.trial"
        try:
            _, row = store.reads.find_trial(spec.trial)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        metrics = row.metrics
        if metrics is None or row.status not in (TrialStatus.COMPLETED, TrialStatus.CACHED):
            raise ConfigError(f"{where}: trial {spec.trial} has no result ({row.status.value})")
        if row.invalidation is not None:
            raise ConfigError(f"{where}: trial {spec.trial} was invalidated")
        try:
            params = campaign.space.coerce(row.params)
        except ParamError as exc:
            raise ConfigError(f"{where}: trial {spec.trial} is outside the space: {exc}") from None
        self.params = params
        given = LiveTrial(row.id, row.number, -1, 0, params, row.config_hash,
                          status=TrialStatus.COMPLETED, metrics=metrics, score=row.score)
        given.data_version = row.data_version_read or row.data_version
        self.given = given

    def score(
        self, trial: LiveTrial, metrics: Mapping[str, float]
    ) -> tuple[float, tuple[float, ...] | None, int | None]:
        """The scorer's score of *metrics* for *trial*, its score of each objective in a
        Pareto campaign (else ``None``), and the baseline trial it compared against: the
        baseline of the data version *trial* ran against."""
        if self.params is None:
            return (*self._scores(metrics, None), None)
        base = trial if trial.proposal == 0 else self.by_version.get(trial.data_version)
        if base is None or (base is not trial and base.status is not TrialStatus.COMPLETED):
            raise ScoringError(
                f"no baseline result for data version {trial.data_version or '(none)'}"
            )
        baseline = metrics if base is trial else base.metrics or {}
        return (*self._scores(metrics, baseline), base.row_id)

    def _scores(
        self, metrics: Mapping[str, float], baseline: Mapping[str, float] | None
    ) -> tuple[float, tuple[float, ...] | None]:
        if self.vector is None:
            return compute_score(self.scorer, metrics, baseline), None
        scores = self.vector.scores(metrics, baseline)
        return scores[0], scores

    def rescore(self, trial: LiveTrial, original: LiveTrial) -> None:
        """Score a cache hit: the reused metrics, by this campaign's scorer and baseline."""
        trial.score = trial.scores = None
        if original.status is not TrialStatus.COMPLETED or original.metrics is None:
            return
        try:
            trial.score, trial.scores, trial.baseline_row = self.score(trial, original.metrics)
        except ScoringError as exc:
            trial.message = str(exc)
