"""The probe backend: in-memory jobs whose duration (in polling passes) and end are scripted.

It runs no process. Each job's script says how many polling passes report it running before
it ends, how it ends and what result it delivers, so a test can assert wave composition and
pass counts exactly. Several probe instances may share one :class:`ProbeCluster`, which is
how a controller restart is simulated (a new instance reattaches to the cluster's jobs).

With trial directories (``write_results``) a script may also carry a learning curve
(:attr:`ProbeScript.progress`, :class:`ProbePoint`): at each poll the probe appends to the
trial's ``progress.jsonl`` the points whose time has come on its clock (the lines
:func:`dse.trial.report_progress` writes), saving a checkpoint first for the points that say
so, and an attempt that finds a checkpoint in its trial directory resumes the curve after it,
as the early-stopping contract asks of a workload.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from dse.model._constraints import load_callable
from dse.model._errors import ConfigError, did_you_mean
from dse.model._types import JobSpec, JobState, JobStatus
from dse.plugins._backend import Backend
from dse.trial import CHECKPOINT_MARK, PROGRESS_FILE

if TYPE_CHECKING:
    from dse.model._clock import Clock


CHECKPOINT_STEP = "probe-step"
"""The probe's checkpoint, in the trial's ``checkpoint/`` directory: the step it was saved
for (a workload's own state, as far as a probe has any)."""


@dataclass(frozen=True, slots=True)
class ProbePoint:
    """One point of a probe job's learning curve (:attr:`ProbeScript.progress`)."""

    at: float
    """When it is reported: seconds of the backend's clock after the start of a run of the
    whole curve (an attempt resumed from a checkpoint starts later in it)."""
    step: int
    """Its step (a whole number, growing along the curve)."""
    metrics: Mapping[str, Any]
    """Its metrics."""
    checkpoint: bool = False
    """Save a checkpoint for this step just before reporting it: the probe writes the step
    to ``checkpoint/probe-step`` and the checkpoint mark (:data:`dse.trial.CHECKPOINT_MARK`,
    dated at the point's time), as a resumable workload does."""


@dataclass(frozen=True, slots=True)
class ProbeScript:
    """How one probe job behaves."""

    passes: int = 0
    """Polling passes that report the job running before the pass that reports its end."""
    state: JobState = JobState.SUCCEEDED
    """How it ends."""
    metrics: Mapping[str, Any] | None = None
    """Metrics of the result document (``None``: no result at all)."""
    complete: bool = True
    """The completeness marker of the result document."""
    exit_code: int | None = None
    """Exit code reported (default: 0 for success, 1 for failure)."""
    node: str = "probe"
    """Node reported."""
    ambiguous: bool = False
    """Report the end as ambiguous (a kill with no known sender, a vanished job)."""
    data_version: str | None = None
    """The data version the result document says the trial read (``None``: it says none)."""
    seconds: float | None = None
    """Run for this many seconds of the backend's clock instead of counting passes: the job
    starts when submitted, ends ``seconds`` later, and is ended TIMEOUT at its time limit if
    that comes first. :meth:`ProbeBackend.wait` then sleeps the clock to the next end (or the
    next point of a learning curve).

    An attempt resumed from a checkpoint (one in its trial directory when it is submitted,
    saved by a point of an earlier attempt) starts at the time of the checkpointed point
    instead of 0: it runs ``seconds`` less that time (at least 0) and reports the points
    after that step."""
    progress: tuple[ProbePoint, ...] = ()
    """The learning curve, in the order of the points' times, played only with trial
    directories (``write_results``): each poll appends to the trial's ``progress.jsonl`` the
    points whose time has come (a job reports none past its end, or past the time it was
    cancelled), in the format of :func:`dse.trial.report_progress`, with the attempt's
    number and the point's time on the backend's clock. A script of attempts 1, 2, ... that
    share a curve gives each the same points."""


ScriptFn = Callable[
    [Mapping[str, Any]], "ProbeScript | Sequence[ProbeScript] | Mapping[str, Any]"
]


def default_script(params: Mapping[str, Any]) -> ProbeScript:
    """The script used when none is given.

    Understood params: ``outcome`` (``"succeed"``, ``"fail"``, ``"hang"``) and ``passes``;
    the metric ``value`` is a deterministic pseudo-random number in ``[0, 1)`` per params.
    """
    digest = hashlib.sha256(repr(sorted(params.items())).encode()).hexdigest()
    value = int(digest[:12], 16) / float(1 << 48)
    outcome = params.get("outcome", "succeed")
    passes = params.get("passes", 0)
    passes = passes if isinstance(passes, int) and not isinstance(passes, bool) else 0
    if outcome == "fail":
        return ProbeScript(passes=passes, state=JobState.FAILED, metrics=None, exit_code=3)
    if outcome == "hang":
        return ProbeScript(passes=10**9, metrics={"value": value})
    return ProbeScript(passes=passes, metrics={"value": value})


@dataclass(slots=True)
class _Job:
    job_id: str
    spec: JobSpec
    script: ProbeScript
    seen: int = 0
    state: JobState = JobState.PENDING
    started_at: float | None = None
    cancelled: bool = False
    cancelled_at: float | None = None
    ends_at: float | None = None
    """For a timed script: when it ends (its duration or its time limit, whichever first)."""
    times_out: bool = False
    """For a timed script: whether its time limit comes before its end."""
    ended_at: float | None = None
    resumed_at: float = 0.0
    """The time along its script's learning curve this attempt started at (the checkpointed
    point's: 0 for a run from the start)."""
    curve: list[ProbePoint] = field(default_factory=list)
    """The points of its learning curve not reported yet (soonest last)."""

    def point_time(self, point: ProbePoint) -> float:
        """When *point* comes on the clock (the job has started)."""
        assert self.started_at is not None
        return self.started_at + point.at - self.resumed_at

    def next_event(self) -> float | None:
        """For a timed job: when it next changes (its end, its next point, or its cancel)."""
        if self.ends_at is None:
            return None
        if self.cancelled_at is not None:
            return self.cancelled_at
        if self.curve:
            return min(self.ends_at, self.point_time(self.curve[-1]))
        return self.ends_at

    def reported_until(self, now: float) -> float:
        """The clock time up to which the job reports points at *now*: not past its end nor
        past its cancel."""
        limit = now
        if self.cancelled_at is not None:
            limit = min(limit, self.cancelled_at)
        if self.ends_at is not None:
            limit = min(limit, self.ends_at)
        return limit


@dataclass
class ProbeCluster:
    """State shared by probe instances: the jobs, and a log of what happened per pass."""

    jobs: dict[str, _Job] = field(default_factory=dict)
    """The jobs by id (private records: read them through :attr:`timeline` and
    :attr:`batches`)."""
    batches: list[list[str]] = field(default_factory=list)
    """Trial ids of each :meth:`Backend.submit` call, in order."""
    passes: int = 0
    """Number of polling passes made so far."""
    timeline: list[tuple[int, str, str]] = field(default_factory=list)
    """(pass, ``"start"`` or ``"end"``, trial id): starts are logged with the pass they follow."""
    running_peak: int = 0
    """Most jobs running at once."""
    live: int = 0
    """Jobs submitted and not yet ended."""
    history: bool = True
    """Whether ended jobs, :attr:`batches` and :attr:`timeline` are kept for a test to read.
    Without, a job is forgotten once its end was reported and nothing is logged: memory stays
    flat over a long campaign. The probe a campaign file names (``dse run``) keeps none, since
    nothing outside the controller could read it."""
    _counter: int = 0


class ProbeBackend(Backend):
    """In-memory backend for tests and benchmarks (see the module docstring).

    :param script: how each job behaves: a function of the trial's params returning a
        :class:`ProbeScript`, a sequence of them (attempts 1, 2, ...; the last repeats), or a
        mapping of metrics (a successful run reporting them at its first poll); or the same
        function named as ``"module:function"``. Default :func:`default_script`.
    :param clock: the clock its timed scripts (:attr:`ProbeScript.seconds`) run on and its
        times are read from; the engine replaces it with its own
        (:meth:`Backend.use_clock`), so pass the engine the same one.
    :param cluster: the jobs' shared state; probes given the same one see the same jobs
        (how a test plays a controller restart). Default: a cluster of its own.
    :param write_results: write each success's result to the trial's ``result.json`` (and
        play the scripts' learning curves, :attr:`ProbeScript.progress`), so the engine
        makes trial directories (:attr:`Backend.trial_dirs`); default ``False``: the result
        is delivered in-band (:attr:`JobStatus.result`) and no directory is made.

    A campaign file's ``[backend.probe]`` table takes ``script`` (``"module:function"``,
    looked up beside the campaign file first) and ``write_results`` (:meth:`from_options`).
    """

    name: ClassVar[str] = "probe"
    version: ClassVar[str] = "1"
    runs_commands: ClassVar[bool] = False
    spans_tasks: ClassVar[bool] = True  # it plays scripts: a trial of any size is one script
    default_poll_interval: ClassVar[tuple[float, float]] = (0.0, 0.0)

    def __init__(
        self,
        script: ScriptFn | str | None = None,
        *,
        clock: Clock | None = None,
        cluster: ProbeCluster | None = None,
        write_results: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(script, str):
            script = load_callable(script, None, "backend.probe.script")
        self.script: ScriptFn = script or default_script
        if clock is not None:
            self.use_clock(clock)  # the engine sets the same (its own) when it is built
        self.cluster = cluster or ProbeCluster()
        self.write_results = write_results
        self.trial_dirs = write_results  # a trial's directory holds only its result file

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
        """The probe of a campaign file's ``[backend.probe]`` table: ``script``
        (``"module:function"``, imported from beside the campaign file first, else from
        ``sys.path``) and ``write_results`` (true or false); anything else is a
        :class:`~dse.ConfigError` naming the key. Its cluster keeps no history (nothing
        outside the controller reads it)."""
        opts = dict(options)
        unknown = sorted(set(opts) - {"script", "write_results"})
        if unknown:
            raise ConfigError(f"{source}: backend.probe: unknown option(s) {unknown}"
                              + did_you_mean(unknown, ("script", "write_results")))
        if not isinstance(opts.get("write_results", False), bool):
            msg = (f"{source}: backend.probe.write_results: expected true or false, got"
                   f" {opts['write_results']!r}")
            raise ConfigError(msg)
        script = opts.get("script")
        if script is not None:
            if not isinstance(script, str):
                raise ConfigError(f"{source}: backend.probe.script: expected 'module:function'")
            base = Path(source).parent if source != "<campaign>" else None
            opts["script"] = load_callable(script, base, f"{source}: backend.probe.script")
        return cls(**opts, cluster=ProbeCluster(history=False))

    def _resolve(self, params: Mapping[str, Any], attempt: int) -> ProbeScript:
        """The script of one attempt: a list scripts attempts 1, 2, ... (the last repeats)."""
        result = self.script(params)
        if isinstance(result, ProbeScript):
            return result
        if isinstance(result, Sequence):
            return result[min(attempt, len(result)) - 1]
        return ProbeScript(metrics=dict(result))

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        cluster = self.cluster
        ids = []
        for spec in jobs:
            cluster._counter += 1
            job_id = f"probe-{cluster._counter}"
            job = _Job(job_id, spec, self._resolve(spec.params, spec.attempt))
            if self.write_results and job.script.progress:
                self._resume(job)
            if job.script.seconds is not None:
                job.started_at = self.clock.time()
                run = max(job.script.seconds - job.resumed_at, 0.0)
                if spec.time_limit is not None and spec.time_limit < run:
                    run, job.times_out = spec.time_limit, True
                job.ends_at = job.started_at + run
            cluster.jobs[job_id] = job
            if cluster.history:
                cluster.timeline.append((cluster.passes, "start", spec.trial_id))
            ids.append(job_id)
        cluster.live += len(jobs)
        if cluster.history:
            cluster.batches.append([spec.trial_id for spec in jobs])
        cluster.running_peak = max(cluster.running_peak, cluster.live)
        return ids

    @staticmethod
    def _resume(job: _Job) -> None:
        """Set *job* to play its curve from its trial's checkpoint (if there is one)."""
        points = job.script.progress
        try:
            text = (job.spec.checkpoint_dir / CHECKPOINT_STEP).read_text()
        except FileNotFoundError:
            saved = None
        else:
            saved = int(text)
        if saved is not None:
            done = [point for point in points if point.step <= saved]
            job.resumed_at = max((point.at for point in done), default=0.0)
            points = tuple(point for point in points if point.step > saved)
        job.curve = list(reversed(points))

    def _report(self, job: _Job, until: float) -> None:
        """Append to *job*'s progress file the points that come by *until* on the clock."""
        if not job.curve or job.started_at is None:
            return
        lines: list[str] = []
        while job.curve and job.point_time(job.curve[-1]) <= until:
            point = job.curve.pop()
            at = job.point_time(point)
            if point.checkpoint:
                if lines:  # what came before the checkpoint is written before it
                    self._append(job, lines)
                    lines = []
                self._checkpoint(job, point.step, at)
            lines.append(json.dumps({"step": point.step, "metrics": dict(point.metrics),
                                     "attempt": job.spec.attempt, "at": at}) + "\n")
        if lines:
            self._append(job, lines)

    @staticmethod
    def _append(job: _Job, lines: list[str]) -> None:
        with open(job.spec.trial_dir / PROGRESS_FILE, "a", encoding="utf-8") as handle:
            handle.write("".join(lines))

    @staticmethod
    def _checkpoint(job: _Job, step: int, at: float) -> None:
        """Save the checkpoint of *step*, then its mark dated *at* (as
        :func:`dse.trial.checkpointed` does, after the checkpoint is complete)."""
        directory = job.spec.checkpoint_dir
        directory.mkdir(exist_ok=True)
        for name, text in ((CHECKPOINT_STEP, str(step)), (CHECKPOINT_MARK, str(job.spec.attempt))):
            tmp = directory / f"{name}.tmp"
            tmp.write_text(f"{text}\n")
            os.replace(tmp, directory / name)
        os.utime(directory / CHECKPOINT_MARK, (at, at))

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        cluster = self.cluster
        cluster.passes += 1
        now = self.clock.time()
        out: dict[str, JobStatus] = {}
        for job_id in job_ids:
            job = cluster.jobs.get(job_id)
            if job is None:
                out[job_id] = JobStatus(job_id, JobState.LOST, reason="unknown to the probe")
                continue
            if job.state.is_finished():
                out[job_id] = self._status(job, now)
                continue
            if job.started_at is None:
                job.started_at = now
            if self.write_results:
                self._report(job, job.reported_until(now))
            if job.cancelled:
                job.state = JobState.CANCELLED
            elif job.ends_at is not None:
                if now < job.ends_at:
                    job.state = JobState.RUNNING
                else:
                    job.ended_at = job.ends_at
                    job.state = JobState.TIMEOUT if job.times_out else job.script.state
            elif job.seen >= job.script.passes:
                job.state = job.script.state
            else:
                job.seen += 1
                job.state = JobState.RUNNING
            if job.state.is_finished():
                cluster.live -= 1
                if cluster.history:
                    cluster.timeline.append((cluster.passes, "end", job.spec.trial_id))
                else:
                    del cluster.jobs[job_id]  # its end is reported now, never asked again
            out[job_id] = self._status(job, now)
        return out

    def _status(self, job: _Job, now: float) -> JobStatus:
        state = job.state
        if not state.is_finished():
            return JobStatus(job.job_id, state, node=job.script.node, started_at=job.started_at)
        script = job.script
        result = None
        if state is JobState.SUCCEEDED and script.metrics is not None:
            result = {"complete": script.complete, "metrics": dict(script.metrics)}
            if script.data_version is not None:
                result["data_version"] = script.data_version
            if self.write_results:
                path = job.spec.trial_dir / "result.json"
                path.write_text(json.dumps(result))
                result = None
        exit_code = script.exit_code
        if exit_code is None and state in (JobState.SUCCEEDED, JobState.FAILED):
            exit_code = 0 if state is JobState.SUCCEEDED else 1
        return JobStatus(
            job.job_id,
            state,
            exit_code=exit_code,
            node=script.node,
            started_at=job.started_at,
            ended_at=job.ended_at if job.ended_at is not None else now,
            result=result,
            ambiguous=script.ambiguous,
        )

    def _cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            job = self.cluster.jobs.get(job_id)
            if job is None or job.state.is_finished():
                continue
            now = self.clock.time()
            if job.ends_at is not None and job.ends_at <= now:
                continue  # it already ended; the next poll reports how
            job.cancelled, job.cancelled_at = True, now  # it reports no point after this
            if job.ends_at is not None:
                job.ended_at = now

    def _wait(self, timeout: float) -> bool:
        """With timed jobs: sleep the clock to the next end or point of a learning curve (at
        most *timeout*; a cancelled job's end is now). With no timeout (a poll interval of 0)
        and only timed jobs, none of which has ended, to the next end: nothing can change
        before it, and on a fake clock nothing else moves time."""
        now = self.clock.time()
        jobs = self.cluster.jobs
        live = [jobs[job_id] for job_id in self.outstanding if job_id in jobs]
        ends = [end for job in live if (end := job.next_event()) is not None]
        if not ends:
            return False
        soonest = min(ends)
        if timeout <= 0 and len(ends) == len(live) and soonest > now:
            timeout = soonest - now
        self.clock.sleep(max(min(soonest - now, timeout), 0.0))
        return True

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        """Nothing to do: the shared cluster already knows every job."""
