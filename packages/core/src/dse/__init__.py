"""dse: design-space-exploration campaigns that lose no trial.

The public API is re-exported here; implementation lives in private modules. Names are
imported on first use (PEP 562), so ``import dse.trial`` inside a trial stays fast. Each name
is written three times (the imports for type checkers, ``_LAZY``, ``__all__``), since type
checkers read only literal lists; ``tests/core/test_public_api.py`` fails when they disagree.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dse._api import load, run
    from dse._backend import Backend
    from dse._build import build_engine
    from dse._campaign import Campaign, EnvironmentConfig, campaign_from_dict, load_campaign
    from dse._classify import stderr_tail
    from dse._clock import Clock, SystemClock
    from dse._constraints import Constraint
    from dse._engine import Engine
    from dse._environment import CommandEnvironment
    from dse._errors import (
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
    from dse._hashing import canonical_json, config_hash
    from dse._html import write_html_report
    from dse._lock import CampaignLock, LockHolder
    from dse._outcome import BestTrial, CampaignResult, EngineListener, Retry, Stats, TrialEnd
    from dse._pareto import hypervolume, pareto_ranks
    from dse._plugins import Deferred, PluginManager, Registered
    from dse._pool import Pool, PoolConfig, drive, run_pool
    from dse._protocols import Agent, Environment, Runner, StoppingRule, TrialInfo
    from dse._readback import AttemptRecord, Results, TrialRecord
    from dse._scheduler import Plan, PoolScheduler, Request
    from dse._scoring import Scorer
    from dse._space import Categorical, FloatRange, IntRange, ParamError, Parameter, Space
    from dse._store import Store, filesystem_type
    from dse._trialdirs import start_attempt_dir
    from dse._types import (
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
    from dse._units import parse_duration
    from dse._version import __version__
    from dse.hookspecs import hookimpl

_LAZY: dict[str, str] = {
    "Agent": "dse._protocols",
    "AgentError": "dse._errors",
    "AttemptRecord": "dse._readback",
    "AttemptState": "dse._types",
    "CampaignStatus": "dse._types",
    "Decision": "dse._types",
    "StoppingRule": "dse._protocols",
    "Verdict": "dse._types",
    "EndReason": "dse._types",
    "Backend": "dse._backend",
    "BackendError": "dse._errors",
    "BestTrial": "dse._outcome",
    "Campaign": "dse._campaign",
    "CampaignLock": "dse._lock",
    "CampaignResult": "dse._outcome",
    "Categorical": "dse._space",
    "Clock": "dse._clock",
    "CommandEnvironment": "dse._environment",
    "ConfigError": "dse._errors",
    "Constraint": "dse._constraints",
    "ConstraintError": "dse._errors",
    "Deferred": "dse._plugins",
    "Direction": "dse._types",
    "DseError": "dse._errors",
    "Engine": "dse._engine",
    "EngineListener": "dse._outcome",
    "Retry": "dse._outcome",
    "TrialEnd": "dse._outcome",
    "Environment": "dse._protocols",
    "EnvironmentConfig": "dse._campaign",
    "Evaluation": "dse._types",
    "ExitCode": "dse._errors",
    "did_you_mean": "dse._errors",
    "stderr_tail": "dse._classify",
    "start_attempt_dir": "dse._trialdirs",
    "FailureClass": "dse._types",
    "REUSED_FAILURES": "dse._types",
    "FloatRange": "dse._space",
    "IntRange": "dse._space",
    "JobSpec": "dse._types",
    "JobState": "dse._types",
    "JobStatus": "dse._types",
    "LockHolder": "dse._lock",
    "LockedError": "dse._errors",
    "NoResultError": "dse._errors",
    "RunWarning": "dse._errors",
    "Objective": "dse._types",
    "Observation": "dse._types",
    "ParamError": "dse._space",
    "Parameter": "dse._space",
    "Plan": "dse._scheduler",
    "PluginError": "dse._errors",
    "PluginManager": "dse._plugins",
    "Pool": "dse._pool",
    "PoolConfig": "dse._pool",
    "PoolScheduler": "dse._scheduler",
    "Registered": "dse._plugins",
    "Request": "dse._scheduler",
    "Resources": "dse._types",
    "Results": "dse._readback",
    "Runner": "dse._protocols",
    "Scorer": "dse._scoring",
    "Space": "dse._space",
    "Stats": "dse._outcome",
    "Store": "dse._store",
    "StoreError": "dse._errors",
    "SystemClock": "dse._clock",
    "TrialInfo": "dse._protocols",
    "TrialRecord": "dse._readback",
    "TrialStatus": "dse._types",
    "__version__": "dse._version",
    "build_engine": "dse._build",
    "campaign_from_dict": "dse._campaign",
    "canonical_json": "dse._hashing",
    "config_hash": "dse._hashing",
    "drive": "dse._pool",
    "filesystem_type": "dse._store",
    "hypervolume": "dse._pareto",
    "pareto_ranks": "dse._pareto",
    "hookimpl": "dse.hookspecs",
    "load": "dse._api",
    "load_campaign": "dse._campaign",
    "parse_duration": "dse._units",
    "reusable": "dse._types",
    "run": "dse._api",
    "run_pool": "dse._pool",
    "write_html_report": "dse._html",
}

__all__ = [
    "REUSED_FAILURES",
    "Agent",
    "AgentError",
    "AttemptRecord",
    "AttemptState",
    "Backend",
    "BackendError",
    "BestTrial",
    "Campaign",
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
    "Engine",
    "EngineListener",
    "Environment",
    "EnvironmentConfig",
    "Evaluation",
    "ExitCode",
    "FailureClass",
    "FloatRange",
    "IntRange",
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
    "Plan",
    "PluginError",
    "PluginManager",
    "Pool",
    "PoolConfig",
    "PoolScheduler",
    "Registered",
    "Request",
    "Resources",
    "Results",
    "Retry",
    "RunWarning",
    "Runner",
    "Scorer",
    "Space",
    "Stats",
    "StoppingRule",
    "Store",
    "StoreError",
    "SystemClock",
    "TrialEnd",
    "TrialInfo",
    "TrialRecord",
    "TrialStatus",
    "Verdict",
    "__version__",
    "build_engine",
    "campaign_from_dict",
    "canonical_json",
    "config_hash",
    "did_you_mean",
    "drive",
    "filesystem_type",
    "hookimpl",
    "hypervolume",
    "load",
    "load_campaign",
    "pareto_ranks",
    "parse_duration",
    "reusable",
    "run",
    "run_pool",
    "start_attempt_dir",
    "stderr_tail",
    "write_html_report",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dse' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
