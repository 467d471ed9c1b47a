"""Batch scripts and manifests for Slurm job arrays, and the pilot job's script of allocation
mode (pure functions: no Slurm is called).

One array carries the attempts of one batch that ask for the same resources. The script's
``#SBATCH`` lines cannot vary per task, so everything per attempt lives in a *manifest*: one
JSON object per line, line ``SLURM_ARRAY_TASK_ID + 1`` for task ``SLURM_ARRAY_TASK_ID``. The
task's body runs ``python3 -c`` with a fixed launcher that reads its line, creates the attempt
directory, redirects its own stdout and stderr to ``<trial_dir>/attempt-<n>/stdout.log`` and
``stderr.log`` (append mode), changes to the working directory and ``exec``\\ s the argv with the
extra environment. No param, env value or path is ever parsed by bash: they reach the trial
through JSON, and the few values bash does see (the manifest path, the launcher) go through
:func:`shlex.quote`. The compute nodes therefore need a ``python3`` (any 3.x) on ``PATH`` after
the setup lines ran (:attr:`SlurmOptions.python` names another).

Slurm's own ``--output``/``--error`` files (``<log_dir>/%A_%a.out`` and ``.err``) keep only
what the setup lines print, launcher errors and slurmstepd's messages ("CANCELLED ... DUE TO
TIME LIMIT"). Because the batch shell ``exec``\\ s the launcher and the launcher ``exec``\\ s the
command, the trial *is* the batch shell's process: ``--signal=B:USR1@lead`` reaches it directly.

An attempt of several tasks (``nodes`` x ``tasks_per_node`` > 1) asks for
``--nodes --ntasks-per-node --cpus-per-task`` and the batch shell ``exec``\\ s ``srun
--kill-on-bad-exit=1`` instead, which starts the launcher once per task: each task reads the
same manifest line and learns its rank from srun's environment, and one task failing ends the
others and the attempt. srun forwards ``SIGUSR1`` to every task, so the signal path holds.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dse import ConfigError, JobState
from dse_slurm._states import expand_hostlist

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from pathlib import Path

    from dse import JobSpec, Resources

__all__ = [
    "LAUNCHER",
    "LAUNCH_NOTE",
    "SlurmOptions",
    "attempt_dir",
    "group_for_arrays",
    "launch_refusal",
    "manifest_entry",
    "parse_sbatch_output",
    "render_array_script",
    "render_manifest",
    "render_pilot_script",
    "sbatch_argv",
    "slurm_time",
    "spare_exclusion",
]

MAX_SIGNAL_LEAD_S = 65535
"""Largest ``--signal`` lead time Slurm accepts (seconds)."""

# Characters a value in an ``#SBATCH`` line may not hold. sbatch reads those lines with its own
# tokenizer (quotes stripped, ``#`` outside quotes starts a comment): a backslash escapes the
# next character even inside single quotes, which shlex.quote does not expect, and a line break
# would end the directive. Everything else survives shlex.quote.
_FORBIDDEN = {"\n": "a newline", "\r": "a carriage return", "\0": "a NUL", "\\": "a backslash"}

LAUNCH_NOTE = "dse-launch.json"
"""The file, in the attempt's directory, where the launcher says why it could not start the
command (``{"invalid": "cannot run 'x': No such file or directory"}``) before it exits 127 or
126: the backend reports that attempt INVALID, and a command's own exit status 127 FAILED."""



def attempt_dir(spec: JobSpec) -> Path:
    """Where the launcher puts an attempt's output (and its ``LAUNCH_NOTE``)."""
    return spec.trial_dir / f"attempt-{spec.attempt}"


def launch_refusal(where: Path, state: JobState, code: int | None) -> str | None:
    """Why the launcher could not start the command of the attempt in *where*: its
    ``LAUNCH_NOTE``, read for a FAILED end with exit status 127 or 126; ``None`` otherwise
    (a command that ran and exited 127 itself leaves no note)."""
    if state is not JobState.FAILED or code not in (126, 127):
        return None
    try:
        return str(json.loads((where / LAUNCH_NOTE).read_text(encoding="utf-8"))["invalid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


LAUNCHER = """\
import fcntl, json, os, stat, sys
path, index = sys.argv[1], int(sys.argv[2])
with open(path, encoding="utf-8") as handle:
    for number, line in enumerate(handle):
        if number == index:
            break
    else:
        sys.exit("dse: no line %d in the manifest %s" % (index + 1, path))
job = json.loads(line)
env = dict(os.environ)
env.update(job["env"])
# The place of this task in the attempt (the trial contract): from srun, or the batch job.
for key, name in (("DSE_RANK", "SLURM_PROCID"), ("DSE_LOCAL_RANK", "SLURM_LOCALID"),
                  ("DSE_NODE_RANK", "SLURM_NODEID"), ("DSE_WORLD_SIZE", "SLURM_NTASKS"),
                  ("DSE_NODE", "SLURMD_NODENAME")):
    if os.environ.get(name):
        env[key] = os.environ[name]
# The attempt's nodes: expanded by whoever started several tasks (the batch script, the
# pilot); one task's are its own node.
if not env.get("DSE_NODES") and env.get("DSE_NODE"):
    env["DSE_NODES"] = env["DSE_NODE"]
rank = int(env.get("DSE_RANK") or 0)
names = ("stdout.log", "stderr.log") if rank == 0 else (
    "stdout.%d.log" % rank, "stderr.%d.log" % rank)
adir = os.path.join(job["trial_dir"], "attempt-%d" % job["attempt"])
os.makedirs(adir, exist_ok=True)
os.makedirs(os.path.join(job["trial_dir"], "checkpoint"), exist_ok=True)
for fd, name in zip((1, 2), names):
    # Never through a symlink, never blocking on a FIFO an earlier attempt left there.
    try:
        out = os.open(os.path.join(adir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND
                      | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        sys.exit("dse: cannot open %s for the trial's output: %s" % (name, exc))
    if not stat.S_ISREG(os.fstat(out).st_mode):
        sys.exit("dse: %s in %s is not a regular file" % (name, adir))
    fcntl.fcntl(out, fcntl.F_SETFL, fcntl.fcntl(out, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    os.dup2(out, fd)
    os.close(out)
if job.get("path"):
    env["PATH"] = os.pathsep.join(job["path"] + [env.get("PATH", "")])
try:
    os.chdir(job["cwd"])
    os.execvpe(job["argv"][0], job["argv"], env)
except OSError as exc:
    why = "cannot run %r: %s" % (job["argv"][0], exc)
    sys.stderr.write("dse: %s\\n" % why)
    # The note tells this apart from a command that exits 127 itself.
    # Every task of the attempt fails alike: each writes through a temporary file of its own.
    tmp = os.path.join(adir, "%s.%s-%d.tmp" % (LAUNCH_NOTE, os.uname().nodename, os.getpid()))
    with open(tmp, "w") as note:
        json.dump({"invalid": why}, note)
    os.replace(tmp, os.path.join(adir, LAUNCH_NOTE))
    sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)
""".replace("LAUNCH_NOTE", json.dumps(LAUNCH_NOTE))
"""The per-task launcher ``python3 -c`` runs (every task of the attempt runs it: srun starts
one per task); exit 127: command (or cwd) not found, 126: not runnable. It sets the task's
place in the trial contract (``DSE_RANK``, ``DSE_LOCAL_RANK``, ``DSE_NODE_RANK``,
``DSE_WORLD_SIZE`` from ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NODEID``,
``SLURM_NTASKS``; ``DSE_NODE`` from ``SLURMD_NODENAME``; ``DSE_NODES`` as the batch script
or the pilot expanded the node list, else the task's own node) and sends rank 0's output to
``stdout.log``/``stderr.log``, rank *r*'s to ``stdout.<r>.log``/``stderr.<r>.log``. Written
for any Python 3 (no f-strings), since the node's python3 may be old."""


def _check_value(what: str, value: str) -> str:
    if not value:
        msg = f"backend.slurm.{what}: empty value"
        raise ConfigError(msg)
    for char, name in _FORBIDDEN.items():
        if char in value:
            msg = f"backend.slurm.{what}: {value!r} holds {name}, which an #SBATCH line cannot"
            raise ConfigError(msg)
    return value


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    """Cluster-side settings from the campaign file's ``[backend.slurm]`` table.

    Values are checked when the options are made: a value an ``#SBATCH`` line cannot carry
    (a newline, a backslash) is a :class:`~dse.ConfigError` naming the key.
    """

    partition: str | None = None
    """``--partition``, or ``None`` for the cluster's default."""
    account: str | None = None
    """``--account``, or ``None``."""
    qos: str | None = None
    """``--qos``, or ``None``."""
    constraint: str | None = None
    """``--constraint`` (node features, Slurm's own syntax such as ``a100&ib``), or ``None``."""
    exclusive: bool = False
    """Ask for whole nodes (``--exclusive``)."""
    extra_sbatch: tuple[str, ...] = ()
    """More sbatch options, one per item, written verbatim after ``#SBATCH `` (a leading
    ``#SBATCH`` in the item is accepted and dropped); each must start with ``-``."""
    setup: tuple[str, ...] = ()
    """Shell lines run by the batch script before the trial (``module load``, activating an
    environment), verbatim and under ``set -e``: a failing line ends the task."""
    signal_lead_s: int | None = None
    """Seconds before the time limit at which the trial receives ``SIGUSR1``
    (``--signal=B:USR1@lead``; Slurm's resolution is about 60 s), or ``None``."""
    array_throttle: int | None = None
    """At most this many tasks of one array run at once (``--array=...%P``), or ``None``."""
    python: str = "python3"
    """Interpreter on the compute nodes that runs the launcher (after the setup lines)."""

    def __post_init__(self) -> None:
        for key in ("partition", "account", "qos", "constraint"):
            value = getattr(self, key)
            if value is not None:
                _check_value(key, value)
        _check_value("python", self.python)
        for line in self.extra_sbatch:
            option = _extra_option(line)
            if not option.startswith("-"):
                msg = f"backend.slurm.extra_sbatch: {line!r} is not an sbatch option"
                raise ConfigError(msg)
        for line in self.setup:
            if "\0" in line:
                msg = f"backend.slurm.setup: {line!r} holds a NUL"
                raise ConfigError(msg)
        if self.signal_lead_s is not None and not 0 < self.signal_lead_s <= MAX_SIGNAL_LEAD_S:
            msg = (
                f"backend.slurm.signal_lead: 1 to {MAX_SIGNAL_LEAD_S} seconds expected"
                f" (got {self.signal_lead_s})"
            )
            raise ConfigError(msg)
        if self.array_throttle is not None and self.array_throttle < 1:
            msg = f"backend.slurm.array_throttle: >= 1 expected (got {self.array_throttle})"
            raise ConfigError(msg)


def _extra_option(line: str) -> str:
    text = line.strip()
    if text.startswith("#SBATCH"):
        text = text[len("#SBATCH") :].strip()
    return _check_value("extra_sbatch", text)


def slurm_time(seconds: float) -> str:
    """*seconds* as a Slurm ``--time`` value, rounded up to whole minutes (at least one).

    Under an hour: ``MM:SS`` (``"5:00"``); otherwise ``D-HH:MM:SS`` (``"1-02:03:00"``).
    """
    if not math.isfinite(seconds) or seconds <= 0:
        msg = f"a time limit must be a positive number of seconds (got {seconds!r})"
        raise ConfigError(msg)
    minutes = max(1, math.ceil(seconds / 60))
    if minutes < 60:
        return f"{minutes}:00"
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    return f"{days}-{hour:02d}:{minute:02d}:00"


def _time_class(limit: float | None) -> int | None:
    """The limit as Slurm sees it: whole minutes (``None``: no limit)."""
    return None if limit is None else max(1, math.ceil(limit / 60))


def _array_key(spec: JobSpec) -> tuple[Resources, int | None, frozenset[str]]:
    return (spec.resources, _time_class(spec.time_limit), frozenset(spec.avoid_nodes))


def group_for_arrays(specs: Iterable[JobSpec]) -> list[list[JobSpec]]:
    """Split *specs* into groups that can share one array: same resources, same ``--time``
    (limits are compared in whole minutes, as Slurm sees them) and same nodes to avoid.

    Groups come in the order of their first spec; each keeps its specs' order.
    """
    groups: dict[tuple[Resources, int | None, frozenset[str]], list[JobSpec]] = {}
    for spec in specs:
        groups.setdefault(_array_key(spec), []).append(spec)
    return list(groups.values())


def _command(spec: JobSpec) -> list[str]:
    if not spec.argv:
        msg = f"trial {spec.trial_id}: the job has no command (set [environment] command)"
        raise ValueError(msg)
    # Same convention as the local backend: "$0" is dse-trial, the command is argv[0].
    return ["/bin/sh", "-c", spec.argv[0], "dse-trial"] if spec.shell else list(spec.argv)


def manifest_entry(spec: JobSpec, path: Sequence[str] = ()) -> str:
    """One manifest line (without its newline): a JSON object, ASCII-only, so no value can
    break the line. *path*: directories put first on the trial's ``PATH`` (after the setup
    lines ran)."""
    entry = {
        "trial_id": spec.trial_id,
        "attempt": spec.attempt,
        "trial_dir": str(spec.trial_dir),
        "cwd": str(spec.cwd or spec.trial_dir),
        "argv": _command(spec),
        "env": dict(spec.env),
    }
    if path:
        entry["path"] = list(path)
    return json.dumps(entry, ensure_ascii=True, sort_keys=True)


def render_manifest(specs: Sequence[JobSpec], path: Sequence[str] = ()) -> str:
    """The manifest of one array: line *i* + 1 is task *i*. Raises :class:`ValueError` for a
    spec without a command (the backend reports those as INVALID before rendering)."""
    return "".join(manifest_entry(spec, path) + "\n" for spec in specs)


def _directive(option: str) -> str:
    return f"#SBATCH {shlex.quote(option)}"


def render_array_script(
    specs: Sequence[JobSpec],
    options: SlurmOptions,
    *,
    job_name: str,
    comment: str,
    manifest_path: Path,
    log_dir: Path | None = None,
) -> str:
    """The batch script of one array holding *specs* (task *i* runs ``specs[i]``).

    The specs must share resources, avoided nodes and time class (see
    :func:`group_for_arrays`), else :class:`ValueError`. ``--time`` is the largest limit of
    the batch, omitted when a spec has none. GPUs are asked for with ``--gres=gpu:N`` rather
    than ``--gpus``: it works with every select plugin, ``--gpus`` only with cons_tres.
    Slurm's own logs go to ``<log_dir>/%A_%a.out``/``.err`` (default: the manifest's
    directory). Slurm's own requeue is off (``--no-requeue``): an interrupted attempt ends,
    and dse retries it visibly as a new attempt. :class:`~dse.ConfigError` when a value
    cannot be written safely.
    """
    if not specs:
        msg = "an array needs at least one job"
        raise ValueError(msg)
    keys = {_array_key(spec) for spec in specs}
    if len(keys) > 1:
        msg = "the jobs of one array must share resources, time class and nodes to avoid"
        raise ValueError(msg)
    first = specs[0]
    logs = log_dir if log_dir is not None else manifest_path.parent
    if "%" in str(logs):
        msg = f"backend.slurm: the log directory {str(logs)!r} holds a '%' (a Slurm pattern)"
        raise ConfigError(msg)

    array = f"--array=0-{len(specs) - 1}"
    if options.array_throttle is not None:
        array += f"%{options.array_throttle}"
    sbatch = [
        array,
        f"--job-name={_check_value('job_name', job_name)}",
        f"--comment={_check_value('comment', comment)}",
    ]
    sbatch += _resource_options(specs)
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(options, key)
        if value is not None:
            sbatch.append(f"--{key}={value}")
    if options.exclusive:
        sbatch.append("--exclusive")
    if first.avoid_nodes:
        sbatch.append(_exclude_option(first.avoid_nodes))
    if options.signal_lead_s is not None:
        sbatch.append(f"--signal=B:USR1@{options.signal_lead_s}")
    sbatch += [
        "--no-requeue",
        "--open-mode=append",
        f"--output={_check_value('log_dir', str(logs))}/%A_%a.out",
        f"--error={logs}/%A_%a.err",
    ]

    lines = ["#!/bin/bash", *(_directive(option) for option in sbatch)]
    lines += [f"#SBATCH {_extra_option(line)}" for line in options.extra_sbatch]
    lines.append("")
    if options.setup:
        lines += ["# setup from the campaign file", "set -e", *options.setup, "set +e", ""]
    lines += _launch_lines(first.resources, options)
    lines += [f"    {shlex.quote(str(manifest_path))} \"${{SLURM_ARRAY_TASK_ID:?}}\"", ""]
    return "\n".join(lines)


def _launch_lines(res: Resources, options: SlurmOptions) -> list[str]:
    """The lines that start the launcher: ``exec``\\ ed by the batch shell for one task, or
    once per task by ``srun`` (one task failing ends them all), told the attempt's nodes."""
    launch = f"{shlex.quote(options.python)} -c {shlex.quote(LAUNCHER)} \\"
    if res.tasks == 1:
        return ["# task i runs line i+1 of the manifest (see dse_slurm._script)",
                f"exec {launch}"]
    return [
        f"# task i runs line i+1 of the manifest in each of its {res.tasks} tasks"
        " (see dse_slurm._script)",
        # The attempt's nodes in node-rank order, for every task (DSE_NODES).
        'DSE_NODES="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)" \\',
        f"exec srun --kill-on-bad-exit=1 --nodes={res.nodes} --ntasks={res.tasks}"
        f" --ntasks-per-node={res.tasks_per_node} --cpus-per-task={res.cpus} \\",
        f"    {launch}",
    ]


def _resource_options(specs: Sequence[JobSpec]) -> list[str]:
    """``--time`` (the largest limit; none when a spec has none) and what one attempt asks:
    its nodes, tasks per node and CPUs per task; GPUs (``--gres`` is per node) and memory
    (``--mem`` is per node) as given."""
    out = []
    limits = [spec.time_limit for spec in specs]
    if all(limit is not None for limit in limits):
        out.append(f"--time={slurm_time(max(limit or 0.0 for limit in limits))}")
    res = specs[0].resources
    if res.tasks == 1:
        out += ["--nodes=1", "--ntasks=1", f"--cpus-per-task={res.cpus}"]
    else:
        out += [f"--nodes={res.nodes}", f"--ntasks-per-node={res.tasks_per_node}",
                f"--cpus-per-task={res.cpus}"]
    if res.gpus:
        out.append(f"--gres=gpu:{res.gpus}")
    if res.memory_mb is not None:
        out.append(f"--mem={res.memory_mb}M")
    return out


def _exclude_option(avoid_nodes: Iterable[str]) -> str:
    """``--exclude`` of every node *avoid_nodes* names (an item may name several:
    ``n1,n2``, or Slurm's ``n[1-2]``)."""
    nodes = _avoided(avoid_nodes)
    for node in nodes:
        _check_value("avoid_nodes", node)
    return f"--exclude={','.join(nodes)}"


def _avoided(avoid_nodes: Iterable[str]) -> list[str]:
    """The node names *avoid_nodes* holds, sorted, once each: an item may name several (a
    multi-node attempt that ended on two failing nodes reports ``n1,n2``)."""
    return sorted({name for item in avoid_nodes for name in expand_hostlist(item)})


def spare_exclusion(
    avoid_nodes: Iterable[str], partition_nodes: Sequence[str], nodes: int
) -> tuple[list[str], list[str]]:
    """``(excluded, kept in)``: the avoided nodes of the partition an attempt of *nodes*
    nodes can do without — at most ``len(partition_nodes) - nodes``, the first in name order
    — and those it cannot (Slurm refuses a job whose exclusions leave too few nodes).
    Avoided nodes outside the partition are left out: they cannot be chosen anyway."""
    inside = [node for node in _avoided(avoid_nodes) if node in set(partition_nodes)]
    spare = max(len(set(partition_nodes)) - nodes, 0)
    return inside[:spare], inside[spare:]


def render_pilot_script(
    options: SlurmOptions,
    *,
    job_name: str,
    pilot_dir: Path,
    nodes: int,
    time_s: float,
    cpus_per_node: int | None = None,
    exclude: Iterable[str] = (),
    grace_s: float | None = None,
    tasks: tuple[int, int] | None = None,
) -> str:
    """The batch script of one pilot: *nodes* nodes for *time_s*, whole nodes
    (``--exclusive``) unless *cpus_per_node* is given, or — with *tasks* ``(n, cpus)`` — room
    for *n* attempts of *cpus* CPUs each on as many nodes as Slurm needs for them
    (``--ntasks=n --cpus-per-task=cpus``, *nodes* and *cpus_per_node* unused); runs
    ``pilot.py`` in *pilot_dir* after the setup lines, which releases the allocation once no
    controller was heard of for *grace_s* and nothing runs (never without it; see
    :mod:`dse_slurm._pilot`). :class:`~dse.ConfigError` when a value cannot be written safely."""
    if "%" in str(pilot_dir):
        msg = f"backend.slurm: the directory {str(pilot_dir)!r} holds a '%' (a Slurm pattern)"
        raise ConfigError(msg)
    where = _check_value("log_dir", str(pilot_dir))
    sbatch = [
        f"--job-name={_check_value('job_name', job_name)}",
        f"--comment=dse allocation {job_name}",
    ]
    if tasks is not None:
        sbatch += [f"--time={slurm_time(time_s)}", f"--ntasks={tasks[0]}",
                   f"--cpus-per-task={tasks[1]}"]
    elif cpus_per_node is None:
        sbatch += [f"--nodes={nodes}", f"--time={slurm_time(time_s)}", "--exclusive"]
    else:
        sbatch += [f"--nodes={nodes}", f"--time={slurm_time(time_s)}"]
        sbatch += ["--ntasks-per-node=1", f"--cpus-per-task={cpus_per_node}"]
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(options, key)
        if value is not None:
            sbatch.append(f"--{key}={value}")
    avoid = sorted(set(exclude))
    for node in avoid:
        _check_value("avoid_nodes", node)
    if avoid:
        sbatch.append(f"--exclude={','.join(avoid)}")
    sbatch += ["--no-requeue", f"--output={where}/pilot.out", f"--error={where}/pilot.err"]
    lines = ["#!/bin/bash", *(_directive(option) for option in sbatch)]
    lines += [f"#SBATCH {_extra_option(line)}" for line in options.extra_sbatch]
    lines.append("")
    if options.setup:
        lines += ["# setup from the campaign file", "set -e", *options.setup, "set +e", ""]
    python = shlex.quote(options.python)
    lines += [
        "# the pilot starts each attempt handed to it as a job step (see dse_slurm._pilot)",
        f"exec {python} {shlex.quote(str(pilot_dir / 'pilot.py'))}"
        f" {shlex.quote(str(pilot_dir))} {math.ceil(time_s)} {python}"
        + ("" if grace_s is None else f" {math.ceil(grace_s)}"),
        "",
    ]
    return "\n".join(lines)


def sbatch_argv(script_path: Path) -> list[str]:
    """The command that submits *script_path*; ``--parsable`` makes sbatch print only
    ``<job id>[;<cluster>]`` (see :func:`parse_sbatch_output`)."""
    return ["sbatch", "--parsable", str(script_path)]


def parse_sbatch_output(text: str) -> str:
    """The job id in ``sbatch --parsable``'s output; :class:`ValueError` when there is none."""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    job_id = line.split(";", 1)[0].strip()
    if not job_id.isdigit():
        msg = f"sbatch printed no job id: {text.strip()!r}"
        raise ValueError(msg)
    return job_id
