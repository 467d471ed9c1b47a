"""The default environment: a command template in, ``result.json`` out."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dse._errors import ConfigError
from dse._types import Evaluation, FailureClass, JobSpec, JobStatus, Objective, finite_float

if TYPE_CHECKING:
    from pathlib import Path

    from dse._campaign import EnvironmentConfig
    from dse._protocols import TrialInfo

RESULT_FILE = "result.json"
PARAMS_FILE = "params.json"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TRIAL_VARS = ("trial_id", "trial_dir", "attempt", "checkpoint_dir", "params_file")


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class CommandEnvironment:
    """Runs ``[environment] command`` with params substituted; scores ``result.json``.

    Each ``{name}`` in a command item is replaced by the param's value (or by one of
    ``trial_id``, ``trial_dir``, ``attempt``, ``checkpoint_dir``, ``params_file``). A value
    is never interpreted by a shell: it stays inside its own argv item.
    """

    def __init__(
        self,
        config: EnvironmentConfig,
        objectives: Sequence[Objective],
        *,
        param_names: Sequence[str] = (),
        source: str = "<campaign>",
    ) -> None:
        self.config = config
        self.objectives = tuple(objectives)
        allowed = set(param_names) | set(_TRIAL_VARS)
        for item in config.command:
            for name in _PLACEHOLDER.findall(item):
                if name not in allowed:
                    msg = (
                        f"{source}: environment.command: placeholder {{{name}}} is neither a"
                        f" parameter nor one of {list(_TRIAL_VARS)}"
                    )
                    raise ConfigError(msg)

    def identity(self) -> Mapping[str, Any]:
        return {
            "command": list(self.config.command),
            "shell": self.config.shell,
            "code_version": self.config.code_version,
        }

    def prepare(self, trial: TrialInfo) -> JobSpec:
        trial_dir = trial.trial_dir
        dir_text = str(trial_dir)
        checkpoint = f"{dir_text}{os.sep}checkpoint"
        params_file = f"{dir_text}{os.sep}{PARAMS_FILE}"
        argv: tuple[str, ...] = ()
        if self.config.command:
            values: dict[str, Any] = dict(trial.params)
            values.update(
                trial_id=trial.trial_id,
                trial_dir=dir_text,
                attempt=trial.attempt,
                checkpoint_dir=checkpoint,
                params_file=params_file,
            )
            argv = tuple(
                _PLACEHOLDER.sub(lambda m: _render(values[m.group(1)]), item)
                for item in self.config.command
            )
            # The trial contract promises DSE_PARAMS_FILE to a command; the probe runs none.
            with open(params_file, "w", encoding="utf-8") as handle:
                json.dump(dict(trial.params), handle)
        env = dict(self.config.env)
        env.update(
            DSE_TRIAL_ID=trial.trial_id,
            DSE_TRIAL_DIR=dir_text,
            DSE_PARAMS_FILE=params_file,
            DSE_CHECKPOINT_DIR=checkpoint,
            DSE_ATTEMPT=str(trial.attempt),
            DSE_DATA_VERSION=trial.data_version or "",
        )
        return JobSpec(
            trial_id=trial.trial_id,
            attempt=trial.attempt,
            params=trial.params,
            trial_dir=trial_dir,
            argv=argv,
            env=env,
            resources=self.config.resources,
            time_limit=self.config.time_limit,
            shell=self.config.shell,
        )

    def evaluate(self, job: JobSpec, status: JobStatus) -> Evaluation:
        doc = status.result
        if doc is None:
            doc_or_failure = read_result(job.trial_dir / RESULT_FILE)
            if isinstance(doc_or_failure, Evaluation):
                return doc_or_failure
            doc = doc_or_failure
        return score_document(doc, self.objectives)


def read_result(path: Path) -> Mapping[str, Any] | Evaluation:
    """Parse a result file, or say why it cannot be used."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Evaluation(failure=FailureClass.INCOMPLETE_OUTPUT, message=f"no {path.name}")
    except OSError as exc:
        return Evaluation(
            failure=FailureClass.INCOMPLETE_OUTPUT, message=f"{path.name}: {exc.strerror}"
        )
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return Evaluation(
            failure=FailureClass.INCOMPLETE_OUTPUT, message=f"{path.name} is not JSON: {exc}"
        )
    if not isinstance(doc, dict):
        return Evaluation(
            failure=FailureClass.INCOMPLETE_OUTPUT, message=f"{path.name} is not a JSON object"
        )
    return doc


def score_document(doc: Mapping[str, Any], objectives: Sequence[Objective]) -> Evaluation:
    """Check completeness and the objective metrics of a result document."""
    if doc.get("complete") is not True:
        return Evaluation(
            failure=FailureClass.INCOMPLETE_OUTPUT, message="result is not marked complete"
        )
    raw_metrics = doc.get("metrics")
    if not isinstance(raw_metrics, Mapping):
        return Evaluation(failure=FailureClass.MISSING_METRIC, message="result has no metrics")
    metrics: dict[str, float] = {}
    for key, value in raw_metrics.items():
        number = finite_float(value)
        if number is not None:
            metrics[str(key)] = number
    for objective in objectives:
        if objective.metric not in raw_metrics:
            return Evaluation(
                metrics=metrics,
                failure=FailureClass.MISSING_METRIC,
                message=f"metric {objective.metric!r} is missing",
            )
        if objective.metric not in metrics:
            return Evaluation(
                metrics=metrics,
                failure=FailureClass.INVALID_METRIC,
                message=f"metric {objective.metric!r} is {raw_metrics[objective.metric]!r},"
                " not a finite number",
            )
    return Evaluation(metrics=metrics)
