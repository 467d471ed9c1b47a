"""Fault injection on real processes: ``dse run`` SIGKILLed 30 times, restarted each time.

A seeded campaign of 48 checkpointing trials (the whole of a finite space, drawn by the
``random`` agent) runs on the local backend under ``python -m dse run``. The controller is
killed with SIGKILL at 30 seeded moments and started again each time; the last run goes to
the end. Trials live in sessions of their own, so they keep running (and some end) while no
controller runs. At some of the kills the crash also takes a running trial down with the
controller (its whole session, or only its workload, SIGKILLed): nothing else in this
picture would ever make a trial resume from its checkpoint, since the trials survive their
controller. After each kill the record is read directly with ``sqlite3``.

When a kill lands is seeded; what the controller is doing then is not (real processes).
Each kill is anchored either at the controller's start (``uniform(0.05, 0.6)`` seconds
after it was started, but no later than the moment it announces the run: a kill during
start-up, locking or restore) or at that announcement (``uniform(0.05, 0.6)`` seconds into
its polling loop). The anchor follows a seeded coin and the campaign's progress: the test
keeps the number of dispatched trials near a line that reaches 32 of 48 at the 30th kill,
so the kills spread over the campaign's life on a fast or a loaded machine alike, and no
killed controller could have finished the campaign (a trial it starts outlives it: the
shortest trial takes longer than the longest life after the announcement).

The test prints one summary line (``pytest -s`` is not needed) and writes it to
``fault-injection-summary.txt`` in its ``tmp_path``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dse import load_campaign
from dse_agents import RandomAgent
from support.procs import alive, live_pids_mentioning, stat_fields

SEED = 20240604
KILLS = 30
CAMPAIGN_SEED = 11
STEPS = 10
PARALLELISM = 4
DISPATCH_TARGET = 32
"""Where the dispatch line ends: before kill *i*, a controller is let into its polling loop
only while fewer than ``DISPATCH_TARGET * i / KILLS`` trials were dispatched."""
LONGEST_LIFE = 0.6
"""Seconds a controller lives at most after its start or its announcement."""

WORKLOAD = r"""
import json, os, time
import dse.trial

STEPS = __STEPS__
p = dse.trial.params()
state = dse.trial.checkpoint_dir() / "state.json"
start = json.loads(state.read_text())["step"] if state.exists() else 0
attempt = dse.trial.attempt()
trace = dse.trial.trial_dir() / "trace.jsonl"


def note(**doc):
    doc.update(attempt=attempt, pid=os.getpid(), at=time.time())
    fd = os.open(trace, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(doc) + "\n").encode())
    finally:
        os.close(fd)


note(event="start", step=start)
pause = 0.09 + 0.01 * (p["a"] - 1)  # 10 steps: 0.9 to 1.2 s per trial
for step in range(start, STEPS):
    time.sleep(pause)
    tmp = state.with_name("state.json.tmp")
    tmp.write_text(json.dumps({"step": step + 1}))
    os.replace(tmp, state)
    dse.trial.checkpointed()
dse.trial.report({"loss": 10.0 * p["a"] + p["b"] + {"x": 0.25, "y": 0.5, "z": 0.75}[p["c"]]},
                 start_step=start)
note(event="end", step=STEPS)
""".replace("__STEPS__", str(STEPS))

CAMPAIGN = """
[campaign]
name = "fault"
agent = "random"
backend = "local"
mode = "rolling"
max_parallelism = {parallelism}
seed = {seed}
poll_interval = ["20ms", "200ms"]

[backend.local]
cpus = {parallelism}
gpus = 0
grace = "1s"

[environment]
command = [{python}, {workload}]
time_limit = "60s"

[[objectives]]
metric = "loss"
direction = "minimize"

[space]
a = [1, 2, 3, 4]
b = [1, 2, 3, 4]
c = ["x", "y", "z"]
"""
SPACE_SIZE = 4 * 4 * 3
FINAL_STATES = {"succeeded", "lost", "killed"}


def loss(params: dict[str, Any]) -> float:
    """What the workload reports for *params*."""
    return 10.0 * params["a"] + params["b"] + {"x": 0.25, "y": 0.5, "z": 0.75}[params["c"]]


@dataclass(frozen=True, slots=True)
class Kill:
    """One seeded fault: when the controller dies, and whether a trial goes down with it."""

    delay: float
    """Seconds after the anchor."""
    at_start: bool
    """Anchored at the controller's start; else at its announcement, unless the campaign
    is ahead of the dispatch line (then at its start too)."""
    takes_trial: bool
    """The crash also kills a running trial (carried to the next kill if none runs)."""
    pick: float
    """Which of the running trials, as a fraction of their sorted list."""
    whole_session: bool
    """Kill the trial's whole session (wrapper too: no exit file) or only its workload."""


def schedule(seed: int) -> list[Kill]:
    rng = random.Random(seed)
    return [
        Kill(
            delay=rng.uniform(0.05, LONGEST_LIFE),
            at_start=rng.random() < 0.25,
            takes_trial=rng.random() < 0.35,
            pick=rng.random(),
            whole_session=rng.random() < 0.5,
        )
        for _ in range(KILLS)
    ]





def session(sid: int) -> list[int]:
    """Pids of the live processes of session *sid*."""
    members = []
    for name in os.listdir("/proc"):
        fields = stat_fields(int(name)) if name.isdigit() else None
        if fields is not None and int(fields[3]) == sid and fields[0] != b"Z":
            members.append(int(name))
    return members


def kill_session(sid: int, *, spare: int | None = None) -> None:
    """SIGKILL every process of session *sid* except *spare*."""
    for pid in session(sid):
        if pid != spare:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@dataclass(slots=True)
class Record:
    """What the record says between two controller lives (read with plain sqlite3)."""

    integrity: str
    campaigns: list[dict[str, Any]]
    trials: dict[int, dict[str, Any]]
    attempts: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    """Event kind → how many."""

    @property
    def completed(self) -> dict[int, tuple[str, float]]:
        """Trial number → (config hash, score) of the completed trials."""
        return {n: (t["config_hash"], t["score"]) for n, t in self.trials.items()
                if t["status"] == "completed"}


def read_record(db: Path) -> Record:
    if not db.exists():
        return Record("ok", [], {})
    con = sqlite3.connect(db)
    try:
        con.row_factory = sqlite3.Row
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        campaigns = [dict(r) for r in con.execute("SELECT * FROM campaigns ORDER BY id")]
        trials = {r["number"]: dict(r) for r in con.execute("SELECT * FROM trials")}
        attempts = {
            (r["number"], r["attempt"]): dict(r) for r in con.execute(
                "SELECT t.number, a.* FROM attempts a JOIN trials t ON t.id = a.trial_id"
            )
        }
        events = dict(con.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind").fetchall())
    finally:
        con.close()
    return Record(integrity, campaigns, trials, attempts, events)


@dataclass(frozen=True, slots=True)
class Running:
    """An attempt running with a checkpoint saved."""

    trial: int
    attempt: int
    wrapper: int
    ticks: int
    step: int
    """The step its checkpoint holds."""

    @property
    def key(self) -> tuple[int, int]:
        return self.trial, self.attempt


def running_with_checkpoint(run_dir: Path) -> list[Running]:
    """Attempts whose wrapper runs and whose trial saved (and marked) a checkpoint."""
    out = []
    for trial_dir in sorted(run_dir.glob("[0-9]*")):
        checkpoint = trial_dir / "checkpoint"
        attempts = sorted(int(p.name[8:]) for p in trial_dir.glob("attempt-*"))
        if not attempts or not (checkpoint / ".dse-checkpointed").exists():
            continue
        last = trial_dir / f"attempt-{attempts[-1]}"
        try:
            pid, ticks = (int(w) for w in (last / "wrapper.pid").read_text().split())
            step = json.loads((checkpoint / "state.json").read_text())["step"]
        except (OSError, ValueError):
            continue
        if 0 < step < STEPS and not (last / "exit.json").exists() and alive(pid, ticks):
            out.append(Running(int(trial_dir.name), attempts[-1], pid, ticks, step))
    return out


def take_down(
    run_dir: Path, victim: Running, *, whole_session: bool
) -> tuple[str, int] | None:
    """SIGKILL *victim*'s session (or only its workload), wait until all of it is gone;
    return the end state the record must show for that attempt — ``lost`` (no exit file)
    or ``killed`` (the wrapper saw its workload die of SIGKILL) — and the step its
    checkpoint holds; None when the attempt ended on its own first."""
    kill_session(victim.wrapper, spare=None if whole_session else victim.wrapper)
    deadline = time.monotonic() + 10
    while (
        alive(victim.wrapper, victim.ticks) or session(victim.wrapper)
    ) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not alive(victim.wrapper, victim.ticks)
    trial_dir = run_dir / f"{victim.trial:06d}"
    step = json.loads((trial_dir / "checkpoint" / "state.json").read_text())["step"]
    exit_file = trial_dir / f"attempt-{victim.attempt}" / "exit.json"
    if not exit_file.exists():
        return "lost", step
    doc = json.loads(exit_file.read_text())
    return ("killed", step) if doc["signal"] == signal.SIGKILL else None


def wait_for_line(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until *path* holds *text*; False if *proc* ended or *timeout* passed first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.005)
    return False


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[bytes]:
    """An environment entry every process of this test's campaign carries (controllers,
    wrapper servers, wrappers, workloads); whatever still runs at teardown is killed."""
    value = f"DSE_FAULT_INJECTION_TEST={tmp_path}"
    yield value.encode()
    for pid in live_pids_mentioning(value.encode()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_campaign_survives_30_controller_kills(tmp_path, marker, capsys):
    workload = tmp_path / "workload.py"
    workload.write_text(WORKLOAD)
    campaign_file = tmp_path / "campaign.toml"
    campaign_file.write_text(CAMPAIGN.format(
        parallelism=PARALLELISM, seed=CAMPAIGN_SEED, python=json.dumps(sys.executable),
        workload=json.dumps(str(workload)),
    ))
    db = tmp_path / ".dse" / "dse.sqlite"
    run_dir = tmp_path / ".dse" / "fault" / "run-1"
    logs = tmp_path / "controllers"
    logs.mkdir()
    env = dict(os.environ)
    env.pop("DSE_DEBUG", None)
    key, _, value = marker.decode().partition("=")
    env[key] = value

    def start(life: int) -> tuple[subprocess.Popen[bytes], Path, float]:
        err = logs / f"{life:02d}.err"
        with open(logs / f"{life:02d}.out", "wb") as out, open(err, "wb") as errors:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dse", "run", str(campaign_file)],
                cwd=tmp_path, env=env, stdout=out, stderr=errors,
            )
        return proc, err, time.monotonic()

    announcement = "campaign fault (run "
    began = time.monotonic()
    watched: list[tuple[float, float]] = []  # (announced, killed) of each controller
    stages = {"starting": 0, "restoring": 0, "polling": 0}
    marked = False  # a trial's wrapper was seen carrying the marker
    ever_completed: dict[int, tuple[str, float]] = {}
    ended_attempts: dict[tuple[int, int], tuple[str, float]] = {}
    # (trial, attempt) taken down → (its end state, the step its checkpoint held then)
    hit: dict[tuple[int, int], tuple[str, int]] = {}
    gone_by: dict[tuple[int, int], float] = {}  # when its processes were all gone
    owed = 0
    lost = 0  # completed results, or ended attempts, that later vanished or changed
    record = read_record(db)
    for life, kill in enumerate(schedule(SEED), start=1):
        had_run = bool(record.campaigns)
        target = DISPATCH_TARGET * life / KILLS
        at_start = kill.at_start or len(record.trials) >= target
        proc, err, started = start(life)
        if at_start:
            # Until the run is announced, and no longer: start-up, lock, restore.
            announced = wait_for_line(err, announcement, proc, timeout=kill.delay)
            announced_at = time.time()
        else:
            announced = wait_for_line(err, announcement, proc, timeout=60)
            announced_at = time.time()
            assert announced, f"controller {life} never announced its run:\n{err.read_text()}"
            time.sleep(kill.delay)
        assert proc.poll() is None, (
            f"controller {life} ended by itself (exit {proc.returncode}) before its kill,"
            f" {time.monotonic() - started:.2f}s after its start:\n{err.read_text()}"
        )
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        if announced:
            watched.append((announced_at, time.time()))

        owed += kill.takes_trial
        seen = {trial for trial, _ in hit}
        candidates = [c for c in running_with_checkpoint(run_dir) if c.trial not in seen]
        if owed and candidates:
            victim = candidates[int(kill.pick * len(candidates))]
            marked = marked or victim.wrapper in live_pids_mentioning(marker)
            taken = take_down(run_dir, victim, whole_session=kill.whole_session)
            if taken is not None:
                hit[victim.key] = taken
                gone_by[victim.key] = time.time()
                owed -= 1

        stderr = err.read_text(errors="replace")
        stages[
            "polling" if announcement in stderr else "restoring" if stderr else "starting"
        ] += 1
        assert "Traceback" not in stderr
        assert "dse: error" not in stderr
        assert "starting a new run" not in stderr
        if had_run and announcement in stderr:
            assert "run 1 of fault did not finish: resuming it" in stderr

        record = read_record(db)
        assert record.integrity == "ok", f"after kill {life}: {record.integrity}"
        assert [c["status"] for c in record.campaigns] in ([], ["running"])
        # No completed result is ever lost or changed, no ended attempt rewritten.
        lost += sum(1 for n, value in ever_completed.items()
                    if record.completed.get(n) != value)
        ever_completed.update(record.completed)
        lost += sum(
            1 for k, value in ended_attempts.items()
            if k not in record.attempts
            or (record.attempts[k]["state"], record.attempts[k]["ended_at"]) != value
        )
        ended_attempts.update({
            k: (a["state"], a["ended_at"]) for k, a in record.attempts.items()
            if a["ended_at"] is not None
        })
    kill_phase = time.monotonic() - began
    dispatched_in_kill_phase = len(record.trials)

    # The last controller goes to the end.
    proc, err, _ = start(KILLS + 1)
    last_started = time.time()
    assert proc.wait(timeout=300) == 0, err.read_text()
    watched.append((last_started, time.time()))
    stderr = err.read_text()
    stdout = (logs / f"{KILLS + 1:02d}.out").read_text()
    assert "run 1 of fault did not finish: resuming it" in stderr
    assert "campaign fault run 1: completed (agent_exhausted); 48 trials: 48 completed, 0 failed," \
        " 0 cached, 0 rejected, 0 cancelled" in stdout
    elapsed = time.monotonic() - began

    final = read_record(db)
    assert final.integrity == "ok"
    # Every replay of the agent matched its log; nothing went wrong in the engine.
    assert not {"agent_replay_diverged", "error"} & set(final.events), final.events
    # One retry event per attempt after the first.
    assert final.events.get("retry", 0) == len(final.attempts) - len(final.trials)
    # One run: every restart resumed it.
    assert [(c["id"], c["status"], c["end_reason"]) for c in final.campaigns] == [
        (1, "completed", "agent_exhausted")
    ]
    # Exactly one completed trial per configuration, each the whole space once, in the
    # order the agent draws them undisturbed: its state survived every restart.
    trials = [final.trials[n] for n in sorted(final.trials)]
    campaign = load_campaign(campaign_file)
    expected = RandomAgent(campaign.space, seed=CAMPAIGN_SEED).propose(SPACE_SIZE + 1)
    assert [json.loads(t["params"]) for t in sorted(trials, key=lambda t: t["proposal"])] == [
        campaign.space.coerce(p) for p in expected
    ]
    assert [t["number"] for t in trials] == list(range(1, SPACE_SIZE + 1))
    assert {(t["status"], t["cache_of"], t["failure"]) for t in trials} == {
        ("completed", None, None)
    }
    per_config: dict[str, int] = {}
    for t in trials:
        per_config[t["config_hash"]] = per_config.get(t["config_hash"], 0) + 1
        assert t["score"] == loss(json.loads(t["params"]))
    assert len(per_config) == SPACE_SIZE
    # Duplicated: a configuration completed twice, or a trial that succeeded twice.
    duplicated = sum(count - 1 for count in per_config.values())
    duplicated += sum(
        1 for (number, attempt), row in final.attempts.items()
        if row["state"] == "succeeded" and attempt != max(
            a for n, a in final.attempts if n == number
        )
    )
    # Nothing completed was lost since (the final record included).
    lost += sum(1 for n, value in ever_completed.items() if final.completed.get(n) != value)
    lost += sum(
        1 for k, value in ended_attempts.items()
        if (final.attempts[k]["state"], final.attempts[k]["ended_at"]) != value
    )
    assert (lost, duplicated) == (0, 0)

    # Every attempt is in the record, numbered 1..k, ended, and only the last succeeded.
    by_trial: dict[int, list[dict[str, Any]]] = {}
    for (number, _), row in sorted(final.attempts.items()):
        by_trial.setdefault(number, []).append(row)
    assert sorted(by_trial) == [t["number"] for t in trials]
    for number, rows in by_trial.items():
        assert [r["attempt"] for r in rows] == list(range(1, len(rows) + 1))
        assert all(r["state"] in FINAL_STATES and r["ended_at"] is not None for r in rows)
        assert rows[-1]["state"] == "succeeded"
        on_disk = {int(p.name[8:]) for p in (run_dir / f"{number:06d}").glob("attempt-*")}
        assert on_disk <= {r["attempt"] for r in rows}, f"trial {number}: attempts off record"
    # A trial taken down with its controller was retried as the same trial: lost (its
    # wrapper gone, no exit file) or killed (its workload SIGKILLed), and the next attempt
    # resumed from the checkpoint, as the workload's own trace shows.
    assert hit, "no trial was running with a checkpoint at any kill"
    traces: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for t in trials:
        path = Path(t["trial_dir"]) / "trace.jsonl"
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            traces.setdefault((t["number"], doc["attempt"]), []).append(doc)
    assert set(traces) <= set(final.attempts), "a workload ran as an attempt off the record"
    for (number, attempt), (end, step) in hit.items():
        assert final.attempts[number, attempt]["state"] == end
        later = [r for r in by_trial[number] if r["attempt"] > attempt]
        assert later
        assert {r["resumed"] for r in later} == {1}
        # The next attempt that ran (one may have been lost before it started) resumed at
        # the step the checkpoint held when the trial was taken down.
        ran = next(r["attempt"] for r in later if (number, r["attempt"]) in traces)
        started_from = [d["step"] for d in traces[number, ran] if d["event"] == "start"]
        assert started_from == [step], (number, ran, step, started_from)
    # max_parallelism held across every restart: never more than 4 workloads at once.
    edges = []
    for key, docs in traces.items():
        edges.append((next(d["at"] for d in docs if d["event"] == "start"), 1))
        end = next((d["at"] for d in docs if d["event"] == "end"), None)
        edges.append((gone_by[key] if end is None else end, -1))
    at_once = peak = 0
    for _, change in sorted(edges):
        at_once += change
        peak = max(peak, at_once)
    assert peak <= PARALLELISM
    resumed = [k for k, row in final.attempts.items() if row["resumed"]]
    # Only a trial taken down had a checkpoint to resume from.
    assert {number for number, _ in resumed} == {number for number, _ in hit}
    for k, row in final.attempts.items():
        if row["state"] in ("lost", "killed"):
            assert row["work_lost_s"] is not None, (k, row)
            assert row["work_lost_s"] >= 0, (k, row)

    # Trials ended while no controller watched them; their exit files told the next one.
    unwatched = [
        k for k, row in final.attempts.items()
        if row["state"] == "succeeded"
        and not any(start <= row["ended_at"] <= end for start, end in watched)
    ]
    assert unwatched

    # Nothing of the campaign is left running.
    assert marked, "the marker scan never saw a trial's wrapper"
    deadline = time.monotonic() + 10
    while live_pids_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_pids_mentioning(marker) == []

    summary = (
        f"fault injection: kills={KILLS} trials={len(trials)} attempts={len(final.attempts)}"
        f" resumed={len(resumed)} lost={lost} duplicated={duplicated}"
        f" taken_down={len(hit)}"
        f" (no_exit_file={sum(end == 'lost' for end, _ in hit.values())},"
        f" workload_killed={sum(end == 'killed' for end, _ in hit.values())})"
        f" ended_unwatched={len(unwatched)} peak_parallel={peak}"
        f" kills_by_stage=({', '.join(f'{k}: {v}' for k, v in stages.items())})"
        f" dispatched_during_kills={dispatched_in_kill_phase}"
        f" kill_phase={kill_phase:.1f}s total={elapsed:.1f}s"
    )
    (tmp_path / "fault-injection-summary.txt").write_text(summary + "\n")
    with capsys.disabled():
        print(f"\n{summary}\nsummary file: {tmp_path / 'fault-injection-summary.txt'}")
