"""dse: design-space-exploration campaigns that lose no trial.

The public API is re-exported here; implementation lives in private modules of the
subpackages. Names are imported on first use (PEP 562), so ``import dse.trial`` inside a trial
stays fast. Each name is written three times (the imports for type checkers, ``_LAZY``,
``__all__``), since type checkers read only literal lists; ``tests/core/api/test_public_api.py``
fails when they disagree. ``_MOVED`` keeps, for one release, the names that moved under their
package (``dse.Store`` is ``dse.record.sqlite.Store``, ``dse.Engine`` is ``dse.engine.Engine``,
``dse.Pool`` is ``dse.pool.Pool``...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.model._lazy import lazy_names

if TYPE_CHECKING:
    from dse._version import __version__
    from dse.api._api import load, run
    from dse.api._asktell import AskedTrial, AskTell, ask_tell
    from dse.api._enqueue import enqueue
    from dse.campaign._campaign import campaign_from_dict, load_campaign
    from dse.campaign._model import Campaign, EnvironmentConfig
    from dse.engine._engine import Engine as Engine
    from dse.engine._engine import EngineListener
    from dse.engine._trialdirs import start_attempt_dir
    from dse.hookspecs import hookimpl
    from dse.launch._build import build_engine
    from dse.model._clock import Clock, SystemClock
    from dse.model._constraints import Constraint
    from dse.model._errors import (
        AgentError,
        BackendError,
        ConfigError,
        ConstraintError,
        DseError,
        ExitCode,
        LockedError,
        NoResultError,
        PluginError,
        RunWarning,
        StoreError,
        did_you_mean,
    )
    from dse.model._hashing import canonical_json, config_hash
    from dse.model._outcome import BestTrial, CampaignResult, Retry, Stats, TrialEnd
    from dse.model._pareto import hypervolume, pareto_ranks
    from dse.model._space import Categorical, FloatRange, IntRange, ParamError, Parameter, Space
    from dse.model._types import (
        REUSED_FAILURES,
        AttemptState,
        CampaignStatus,
        Decision,
        Direction,
        EndReason,
        Evaluation,
        FailureClass,
        JobSpec,
        JobState,
        JobStatus,
        Objective,
        Observation,
        Resources,
        TrialStatus,
        Verdict,
        reusable,
    )
    from dse.model._units import parse_duration
    from dse.plugins._backend import Backend
    from dse.plugins._classify import stderr_tail
    from dse.plugins._deferred import Deferred
    from dse.plugins._environment import CommandEnvironment
    from dse.plugins._integration import CampaignExport, Integration, TrialExport
    from dse.plugins._plugins import PluginManager, Registered
    from dse.plugins._protocols import (
        Agent,
        Environment,
        PopulationRule,
        Runner,
        StoppingRule,
        TrialInfo,
    )
    from dse.plugins._scoring import Scorer
    from dse.pool._pool import Pool as Pool
    from dse.pool._pool import drive as drive
    from dse.pool._pool import run_pool as run_pool
    from dse.pool._poolfile import PoolConfig as PoolConfig
    from dse.pool._scheduler import Plan as Plan
    from dse.pool._scheduler import PoolScheduler as PoolScheduler
    from dse.pool._scheduler import Request as Request
    from dse.record._lock import CampaignLock, LockHolder
    from dse.record.sqlite._files import filesystem_type as filesystem_type
    from dse.record.sqlite._store import Store as Store
    from dse.report._html import write_html_report
    from dse.report._readback import AttemptRecord, Results, TrialRecord

_LAZY: dict[str, str] = {
    "Agent": "dse.plugins._protocols",
    "AgentError": "dse.model._errors",
    "AskTell": "dse.api._asktell",
    "AskedTrial": "dse.api._asktell",
    "ask_tell": "dse.api._asktell",
    "AttemptRecord": "dse.report._readback",
    "AttemptState": "dse.model._types",
    "CampaignStatus": "dse.model._types",
    "Decision": "dse.model._types",
    "StoppingRule": "dse.plugins._protocols",
    "PopulationRule": "dse.plugins._protocols",
    "Verdict": "dse.model._types",
    "EndReason": "dse.model._types",
    "Backend": "dse.plugins._backend",
    "BackendError": "dse.model._errors",
    "BestTrial": "dse.model._outcome",
    "Campaign": "dse.campaign._model",
    "CampaignLock": "dse.record._lock",
    "CampaignResult": "dse.model._outcome",
    "Categorical": "dse.model._space",
    "Clock": "dse.model._clock",
    "CommandEnvironment": "dse.plugins._environment",
    "ConfigError": "dse.model._errors",
    "Constraint": "dse.model._constraints",
    "ConstraintError": "dse.model._errors",
    "Deferred": "dse.plugins._deferred",
    "Integration": "dse.plugins._integration",
    "CampaignExport": "dse.plugins._integration",
    "TrialExport": "dse.plugins._integration",
    "Direction": "dse.model._types",
    "DseError": "dse.model._errors",
    "EngineListener": "dse.engine._engine",
    "Retry": "dse.model._outcome",
    "TrialEnd": "dse.model._outcome",
    "Environment": "dse.plugins._protocols",
    "EnvironmentConfig": "dse.campaign._model",
    "Evaluation": "dse.model._types",
    "ExitCode": "dse.model._errors",
    "did_you_mean": "dse.model._errors",
    "stderr_tail": "dse.plugins._classify",
    "start_attempt_dir": "dse.engine._trialdirs",
    "FailureClass": "dse.model._types",
    "REUSED_FAILURES": "dse.model._types",
    "FloatRange": "dse.model._space",
    "IntRange": "dse.model._space",
    "JobSpec": "dse.model._types",
    "JobState": "dse.model._types",
    "JobStatus": "dse.model._types",
    "LockHolder": "dse.record._lock",
    "LockedError": "dse.model._errors",
    "NoResultError": "dse.model._errors",
    "RunWarning": "dse.model._errors",
    "Objective": "dse.model._types",
    "Observation": "dse.model._types",
    "ParamError": "dse.model._space",
    "Parameter": "dse.model._space",
    "PluginError": "dse.model._errors",
    "PluginManager": "dse.plugins._plugins",
    "Registered": "dse.plugins._plugins",
    "Resources": "dse.model._types",
    "Results": "dse.report._readback",
    "Runner": "dse.plugins._protocols",
    "Scorer": "dse.plugins._scoring",
    "Space": "dse.model._space",
    "Stats": "dse.model._outcome",
    "StoreError": "dse.model._errors",
    "SystemClock": "dse.model._clock",
    "TrialInfo": "dse.plugins._protocols",
    "TrialRecord": "dse.report._readback",
    "TrialStatus": "dse.model._types",
    "__version__": "dse._version",
    "build_engine": "dse.launch._build",
    "campaign_from_dict": "dse.campaign._campaign",
    "canonical_json": "dse.model._hashing",
    "config_hash": "dse.model._hashing",
    "hypervolume": "dse.model._pareto",
    "pareto_ranks": "dse.model._pareto",
    "enqueue": "dse.api._enqueue",
    "hookimpl": "dse.hookspecs",
    "load": "dse.api._api",
    "load_campaign": "dse.campaign._campaign",
    "parse_duration": "dse.model._units",
    "reusable": "dse.model._types",
    "run": "dse.api._api",
    "write_html_report": "dse.report._html",
}

_MOVED: dict[str, str] = {
    "Engine": "dse.engine",
    "Plan": "dse.pool",
    "Pool": "dse.pool",
    "PoolConfig": "dse.pool",
    "PoolScheduler": "dse.pool",
    "Request": "dse.pool",
    "Store": "dse.record.sqlite",
    "drive": "dse.pool",
    "filesystem_type": "dse.record.sqlite",
    "run_pool": "dse.pool",
}
"""Names that moved under their package (the top level is what a user or plugin author needs):
kept here for one release, as aliases of the same objects; docs/python-api.md lists them."""

__all__ = [
    "REUSED_FAILURES",
    "Agent",
    "AgentError",
    "AskTell",
    "AskedTrial",
    "AttemptRecord",
    "AttemptState",
    "Backend",
    "BackendError",
    "BestTrial",
    "Campaign",
    "CampaignExport",
    "CampaignLock",
    "CampaignResult",
    "CampaignStatus",
    "Categorical",
    "Clock",
    "CommandEnvironment",
    "ConfigError",
    "Constraint",
    "ConstraintError",
    "Decision",
    "Deferred",
    "Direction",
    "DseError",
    "EndReason",
    "EngineListener",
    "Environment",
    "EnvironmentConfig",
    "Evaluation",
    "ExitCode",
    "FailureClass",
    "FloatRange",
    "IntRange",
    "Integration",
    "JobSpec",
    "JobState",
    "JobStatus",
    "LockHolder",
    "LockedError",
    "NoResultError",
    "Objective",
    "Observation",
    "ParamError",
    "Parameter",
    "PluginError",
    "PluginManager",
    "PopulationRule",
    "Registered",
    "Resources",
    "Results",
    "Retry",
    "RunWarning",
    "Runner",
    "Scorer",
    "Space",
    "Stats",
    "StoppingRule",
    "StoreError",
    "SystemClock",
    "TrialEnd",
    "TrialExport",
    "TrialInfo",
    "TrialRecord",
    "TrialStatus",
    "Verdict",
    "__version__",
    "ask_tell",
    "build_engine",
    "campaign_from_dict",
    "canonical_json",
    "config_hash",
    "did_you_mean",
    "enqueue",
    "hookimpl",
    "hypervolume",
    "load",
    "load_campaign",
    "pareto_ranks",
    "parse_duration",
    "reusable",
    "run",
    "start_attempt_dir",
    "stderr_tail",
    "write_html_report",
]


__getattr__, __dir__ = lazy_names(__name__, {**_LAZY, **_MOVED}, __all__)
