"""dse: design-space-exploration campaigns that lose no trial.

The public API is re-exported here; implementation lives in private modules.
"""

from __future__ import annotations

from dse._backend import Backend
from dse._build import build_engine
from dse._campaign import Campaign, EnvironmentConfig, campaign_from_dict, load_campaign
from dse._clock import Clock, SystemClock
from dse._constraints import Constraint
from dse._engine import BestTrial, CampaignResult, Engine, EngineListener, Stats
from dse._environment import CommandEnvironment
from dse._errors import (
    BackendError,
    ConfigError,
    ConstraintError,
    DseError,
    ExitCode,
    PluginError,
    StoreError,
)
from dse._hashing import canonical_json, config_hash
from dse._plugins import PluginManager, Registered
from dse._protocols import Agent, Environment, TrialInfo
from dse._space import Categorical, FloatRange, IntRange, ParamError, Parameter, Space
from dse._store import Store
from dse._types import (
    Direction,
    Evaluation,
    FailureClass,
    JobSpec,
    JobState,
    JobStatus,
    Objective,
    Observation,
    Resources,
    TrialStatus,
)
from dse._units import parse_duration
from dse._version import __version__
from dse.hookspecs import hookimpl

__all__ = [
    "Agent",
    "Backend",
    "BackendError",
    "BestTrial",
    "Campaign",
    "CampaignResult",
    "Categorical",
    "Clock",
    "CommandEnvironment",
    "ConfigError",
    "Constraint",
    "ConstraintError",
    "Direction",
    "DseError",
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
    "Objective",
    "Observation",
    "ParamError",
    "Parameter",
    "PluginError",
    "PluginManager",
    "Registered",
    "Resources",
    "Space",
    "Stats",
    "Store",
    "StoreError",
    "SystemClock",
    "TrialInfo",
    "TrialStatus",
    "__version__",
    "build_engine",
    "campaign_from_dict",
    "canonical_json",
    "config_hash",
    "hookimpl",
    "load_campaign",
    "parse_duration",
]
