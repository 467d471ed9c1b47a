"""The default environment: a command template in, ``result.json`` out."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError
from dse.model._spend import SPEND_METRICS
from dse.model._template import PLACEHOLDER, substitute
from dse.model._trialfile import UnsafeTrialFile, read_trial_file, write_trial_file
from dse.model._types import Evaluation, FailureClass, JobSpec, JobStatus, Objective, finite_float

if TYPE_CHECKING:
    from pathlib import Path

    from dse.campaign._model import EnvironmentConfig
    from dse.plugins._protocols import TrialInfo

RESULT_FILE = "result.json"
PARAMS_FILE = "params.json"
PROGRESS_FILE = "progress.jsonl"
_TRIAL_VARS = ("trial_id", "trial_dir", "attempt", "checkpoint_dir", "params_file")
_ABSENT: Any = object()
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_SPAN = ("nodes", "tasks_per_node")
"""Resources in a result's identity only when a trial spans more than one task (so the
identity of every one-task trial recorded before they existed is unchanged)."""


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
        root: Path | None = None,
    ) -> None:
        self.config = config
        self.root = root
        """The directory a result's identity names the work directory relative to (the one
        holding the workspace; ``None``: named absolute)."""
        # What the trial cost is dse's to know, not the result's to report.
        self.objectives = tuple(o for o in objectives if o.metric not in SPEND_METRICS)
        allowed = set(param_names) | set(_TRIAL_VARS)
        for item in config.command:
            for name in PLACEHOLDER.findall(item):
                if name not in allowed:
                    msg = (
                        f"{source}: environment.command: placeholder {{{name}}} is neither a"
                        f" parameter nor one of {list(_TRIAL_VARS)}"
                    )
                    raise ConfigError(msg)

    def identity(self) -> Mapping[str, Any]:
        """The command template, the shell flag, the code version, the dependencies' digest
        (when known: an identity without one is an earlier release's, never met again), the
        environment variables, the work directory (:func:`workdir_identity`) and the
        resources asked (those a param sets are in the params; the time limit is not here: a
        trial it ended is never reused). See docs/record.md, "The identity of a result"."""
        config = self.config
        resources = {name: ("{" + config.resource_params[name] + "}"
                            if name in config.resource_params else value)
                     for name, value in dataclasses.asdict(config.resources).items()
                     if name not in _SPAN or value != 1 or name in config.resource_params}
        identity: dict[str, Any] = {
            "command": list(config.command),
            "shell": config.shell,
            "code_version": config.code_version,
            "env": dict(sorted(config.env.items())),
            "resources": resources,
            "workdir": workdir_identity(config.workdir, self.root),
        }
        if config.dependencies is not None:
            identity["dependencies"] = config.dependencies.digest
        return identity

    def prepare(self, trial: TrialInfo) -> JobSpec:
        """The job of one attempt of *trial*: the command with its placeholders filled (the
        params written to ``params.json`` in the trial directory first), the campaign's
        ``[environment] env`` with the trial contract's ``DSE_*`` variables over it, the
        resources and time limit (a ``"{param}"`` one read from the params), the shell and
        working directory."""
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
            # Each value stays inside its own argv item; through a shell it is quoted.
            quote = shlex.quote if self.config.shell else str
            argv = tuple(substitute(item, values, quote) for item in self.config.command)
            # The trial contract promises DSE_PARAMS_FILE to a command; the probe runs none.
            # Replaced atomically: a resumed controller rewrites it while the trial may read.
            write_trial_file(trial_dir, PARAMS_FILE, params_document(trial.params))
        env = dict(self.config.env)
        env.update(
            DSE_TRIAL_ID=trial.trial_id,
            DSE_TRIAL_DIR=dir_text,
            DSE_PARAMS_FILE=params_file,
            DSE_CHECKPOINT_DIR=checkpoint,
            DSE_PROGRESS_FILE=f"{dir_text}{os.sep}{PROGRESS_FILE}",
            DSE_ATTEMPT=str(trial.attempt),
            DSE_DATA_VERSION=trial.data_version or "",
        )
        if self.config.checkpoint_every is not None:
            env["DSE_CHECKPOINT_EVERY"] = repr(self.config.checkpoint_every)
        resources = self.config.resources_for(trial.params)
        # The task's place in the attempt: a backend that starts several tasks sets each
        # task's own DSE_RANK, DSE_LOCAL_RANK, DSE_NODE_RANK, DSE_NODE and DSE_NODES.
        env.update(DSE_RANK="0", DSE_LOCAL_RANK="0", DSE_NODE_RANK="0",
                   DSE_WORLD_SIZE=str(resources.tasks), DSE_NUM_NODES=str(resources.nodes),
                   DSE_TASKS_PER_NODE=str(resources.tasks_per_node))
        return JobSpec(
            trial_id=trial.trial_id,
            attempt=trial.attempt,
            params=trial.params,
            trial_dir=trial_dir,
            argv=argv,
            env=env,
            resources=resources,
            time_limit=(
                float(trial.params[self.config.time_limit_param])
                if self.config.time_limit_param else self.config.time_limit
            ),
            shell=self.config.shell,
            cwd=self.config.workdir,
        )

    def evaluate(self, job: JobSpec, status: JobStatus) -> Evaluation:
        """The metrics of a successful attempt: from the result the backend delivered in-band
        (:attr:`JobStatus.result`), else from the trial's ``result.json`` (written since the
        attempt started); an :class:`Evaluation` with a failure class when the result is
        missing, unreadable, older than the attempt, incomplete, or lacks a finite objective
        metric."""
        doc = status.result
        if doc is None:
            doc_or_failure = read_result(job.trial_dir / RESULT_FILE,
                                         started_at=status.started_at)
            if isinstance(doc_or_failure, Evaluation):
                return doc_or_failure
            doc = doc_or_failure
        evaluation = score_document(doc, self.objectives)
        read, environment = reported_data_version(doc), reported_environment(doc)
        if read is None and environment is None:
            return evaluation  # most results say neither: no copy (this is per trial)
        return dataclasses.replace(evaluation, data_version=read, environment=environment)


def params_document(params: Mapping[str, Any]) -> bytes:
    """The params file of a trial of *params* (``params.json``: what ``DSE_PARAMS_FILE``
    names), as the environment writes it and a backend checks it when the trial starts."""
    return json.dumps(dict(params)).encode()


def workdir_identity(workdir: Path | None, root: Path | None) -> str | None:
    """How a result's identity names *workdir*, the directory its command runs in: relative
    to *root* (the directory holding the workspace) when inside it, so a project moved whole
    keeps its results (``.``, ``bench/gemm``); else absolute. Both resolved (a symlink to
    another directory is that directory); ``None`` without a *workdir* (the controller's)."""
    if workdir is None:
        return None
    where = os.path.realpath(workdir)
    if root is not None:
        base = os.path.realpath(root)
        if where == base or where.startswith(base.rstrip(os.sep) + os.sep):
            return os.path.relpath(where, base).replace(os.sep, "/")
    return where


def read_result(
    path: Path, *, started_at: float | None = None
) -> Mapping[str, Any] | Evaluation:
    """Parse a result file (of the attempt that started at *started_at*), or say why it cannot
    be used.

    Returns the document (a JSON object, every key kept, ``data_version`` included) or an
    :class:`Evaluation` carrying the failure: ``no_result`` when the file does not exist;
    ``result_symlink``, ``result_not_regular`` or ``result_too_large`` when it is not a
    regular file inside its directory of at most :data:`MAX_TRIAL_FILE_BYTES` (it is then
    never read, so a FIFO cannot block: :func:`read_trial_file`); ``stale_result`` when it
    was last written before *started_at* (by more than :data:`CLOCK_SLACK_S`);
    ``malformed_result`` when it cannot be read, is empty, is not UTF-8, is not JSON (a
    truncated write included) or is not a JSON object. Never raises.
    """
    name = path.name
    try:
        raw = read_trial_file(path.parent, name, started_at=started_at)
    except FileNotFoundError:
        return Evaluation(failure=FailureClass.NO_RESULT, message=f"no {name}")
    except UnsafeTrialFile as exc:
        return Evaluation(failure=exc.failure, message=str(exc))
    except OSError as exc:
        return _malformed(f"{name} cannot be read ({exc.strerror or type(exc).__name__})")
    if not raw.strip():
        return _malformed(f"{name} is empty")
    try:
        # utf-8-sig: a byte order mark is tolerated (RFC 8259 allows a parser to ignore it).
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _malformed(
            f"{name} is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        )
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"{exc.msg}: line {exc.lineno} column {exc.colno}"
        if _ends_early(text, exc):
            return _malformed(f"{name} is truncated ({where})")
        return _malformed(f"{name} is not valid JSON ({where})")
    except (ValueError, RecursionError) as exc:
        # Valid JSON Python will not load: a 5000-digit integer, arrays nested 10**5 deep.
        return _malformed(f"{name} cannot be loaded ({_clip(str(exc))})")
    if not isinstance(doc, dict):
        return _malformed(f"{name} holds {_describe(doc)}, not a JSON object")
    return doc


def score_document(doc: Mapping[str, Any], objectives: Sequence[Objective]) -> Evaluation:
    """Check completeness and the objective metrics of a result document.

    ``complete`` must be ``true`` (else ``incomplete_output``) and ``metrics`` an object holding
    every objective metric (else ``missing_metric``) as a finite number: NaN, an infinity, a
    string, a boolean or null is ``invalid_metric``. Other metrics that are finite numbers are
    kept; other keys of the document (``data_version``, anything a workload adds) are ignored
    here. Never raises.
    """
    complete = doc.get("complete", _ABSENT)
    if complete is not True:
        if complete is _ABSENT:
            said = "it has no 'complete' marker"
        else:
            said = f"complete is {_describe(complete)}"
        return Evaluation(
            failure=FailureClass.INCOMPLETE_OUTPUT,
            message=f"result is not marked complete ({said})",
        )
    raw_metrics = doc.get("metrics", _ABSENT)
    if raw_metrics is _ABSENT:
        return Evaluation(failure=FailureClass.MISSING_METRIC, message="result has no metrics")
    if not isinstance(raw_metrics, Mapping):
        return _malformed(f"result 'metrics' is {_describe(raw_metrics)}, not a JSON object")
    metrics: dict[str, float] = {}
    for key, value in raw_metrics.items():
        number = _finite(value)
        if number is not None:
            metrics[str(key)] = number
    for objective in objectives:
        name = objective.metric
        if name in metrics:
            continue
        if name not in raw_metrics:
            return Evaluation(
                metrics=metrics,
                failure=FailureClass.MISSING_METRIC,
                message=f"metric {name!r} is missing",
            )
        return Evaluation(
            metrics=metrics,
            failure=FailureClass.INVALID_METRIC,
            message=f"metric {name!r} is {_describe(raw_metrics[name])}, not a finite number",
        )
    return Evaluation(metrics=metrics)


def reported_data_version(doc: Mapping[str, Any]) -> str | None:
    """The data version a result document says the trial actually read, if it says one."""
    value = doc.get("data_version")
    return value if isinstance(value, str) and value else None


def reported_environment(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The environment a result document says the trial ran in, if it says one usably:
    ``{"python": str | None, "distributions": {name: version}}`` (other keys dropped)."""
    value = doc.get("environment")
    if not isinstance(value, Mapping):
        return None
    dists = value.get("distributions")
    if not isinstance(dists, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in dists.items()
    ):
        return None
    python = value.get("python")
    return {
        "python": python if isinstance(python, str) else None,
        "distributions": dict(sorted(dists.items())),
    }


def _malformed(message: str) -> Evaluation:
    return Evaluation(failure=FailureClass.MALFORMED_RESULT, message=message)


def _ends_early(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether the JSON stops mid-document (a write cut short) rather than going wrong."""
    if exc.msg == "Extra data":
        return False
    if exc.msg.startswith("Unterminated string"):
        return True
    rest = text[exc.pos :].rstrip()
    return not rest or any(literal.startswith(rest) for literal in _LITERALS)


def _finite(value: Any) -> float | None:
    try:
        return finite_float(value)
    except OverflowError:  # an integer beyond float range: JSON numbers have no size limit
        return None


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(value: Any) -> str:
    """A JSON value in a few words, as the workload wrote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return f"the string {_clip(repr(value), 40)}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return _clip(repr(value), 40)
