"""Ask and tell (docs/python-api.md, "Ask and tell"): a loop that evaluates its own trials asks
them of a campaign and tells their results, and the record holds them as any other trials —
the same deduplication, budgets, stopping rules, retries and reports. Several processes ask
at once, one is killed holding a trial: no configuration is handed out twice, the killed one's
trial is asked again as its next attempt, and the trials budget holds exactly.

Real SQLite files, real processes; the agent is a class of the test's own (dse-core alone)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import dse
from support.waiting import wait_until

TIMEOUT = 300.0
"""Seconds a process or a state may take: generous, for a loaded 2-core machine."""

AGENT = """\
class Sweep:
    # x = 0, 1, 2... in order: deterministic, so a run rebuilt from the record replays it.
    def __init__(self, space, seed=0, count=100):
        self.next, self.count = 0, count

    @property
    def exhausted(self):
        return self.next >= self.count

    def propose(self, n, in_flight):
        out = []
        while len(out) < n and not self.exhausted:
            out.append({"x": self.next})
            self.next += 1
        return out

    def observe(self, observations):
        pass
"""


def campaign(tmp_path: Path, name: str, extra: str = "", *, count: int = 100,
             parallelism: int = 2) -> Path:
    """A campaign file of a sweep of *count* values of ``x``, its agent beside it."""
    (tmp_path / "sweep_agent.py").write_text(AGENT)
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(f"""\
        [campaign]
        name = "{name}"
        agent = "sweep_agent:Sweep"
        max_parallelism = {parallelism}
        mode = "rolling"

        [agent."sweep_agent:Sweep"]
        count = {count}

        [[objectives]]
        metric = "loss"

        [space]
        x = {{ type = "int", low = 0, high = 999 }}
        """) + textwrap.dedent(extra))
    return path


def loss(x: int) -> float:
    return float((x - 7) ** 2)


def dse_cli(tmp_path: Path, *args: str) -> str:
    """``dse ARGS --workspace .dse`` in *tmp_path*; its stdout (it must exit 0)."""
    done = subprocess.run([sys.executable, "-m", "dse", *args, "--workspace", ".dse"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_loop_asks_and_tells_twenty_trials(tmp_path: Path) -> None:
    path = campaign(tmp_path, "quad", count=20)
    asked = []
    with dse.ask_tell(path) as loop:
        while (trial := loop.ask()) is not None:
            asked.append(trial.params["x"])
            assert trial.trial_id == f"quad-{loop.run_id}-{trial.number}"
            assert trial.attempt == 1
            assert trial.dir.is_dir()
            status = loop.tell(trial, {"loss": loss(trial.params["x"]), "x2": 2.0 * trial.number})
            assert status is dse.TrialStatus.COMPLETED
        assert loop.ask() is None  # over is over
        assert loop.done
    assert sorted(asked) == list(range(20))
    results = dse.load(tmp_path / ".dse", campaign="quad")
    assert results.counts == {"completed": 20}
    assert len(results.trials) == 20
    for t in results.trials:
        assert t.metrics == {"loss": loss(t.params["x"]), "x2": 2.0 * t.number}
        assert [a.state for a in t.attempts] == [dse.AttemptState.SUCCEEDED]
    assert results.best is not None
    assert results.best.params == {"x": 7}
    report = dse_cli(tmp_path, "report", "quad")
    assert "20 completed" in report
    assert 'params {"x": 7}' in report
    status = json.loads(dse_cli(tmp_path, "status", "--json"))
    assert status[0]["backend"] == "ask==1"
    assert status[0]["completed"] == 20
    shown = dse_cli(tmp_path, "show", "quad:8")
    assert "backend       ask==1" in shown
    assert '"loss": 0.0' in shown


def test_a_told_failure_is_a_result_and_reused_as_one(tmp_path: Path) -> None:
    path = campaign(tmp_path, "fails", count=3)
    with dse.ask_tell(path) as loop:
        one, two = loop.ask(), loop.ask()
        assert one is not None
        assert two is not None
        assert loop.tell(one, failure="diverged at step 3") is dse.TrialStatus.FAILED
        assert loop.tell(two, failure=ValueError("x = 1 is refused")) is dse.TrialStatus.FAILED
        three = loop.ask()
        assert three is not None
        assert loop.tell(three, float("nan")) is dse.TrialStatus.FAILED  # as a command's NaN
        assert loop.ask() is None
    results = dse.load(tmp_path / ".dse", campaign="fails")
    by_x = {t.params["x"]: t for t in results.trials}
    assert by_x[0].failure is dse.FailureClass.NONZERO_EXIT
    assert by_x[0].message == "diverged at step 3"
    assert by_x[1].message == "ValueError: x = 1 is refused"
    assert by_x[2].failure is dse.FailureClass.INVALID_METRIC
    assert "diverged at step 3" in dse_cli(tmp_path, "show", "fails:1")
    # The same configurations again: a failure told is a result about its configuration.
    with dse.ask_tell(path) as again:
        assert again.ask() is None
        rerun = again.results()
    assert rerun.run_id != results.run_id
    assert rerun.counts == {"cached": 3}
    assert sorted(t.reuses or "" for t in rerun.trials) == sorted(
        t.trial_id for t in results.trials)


def test_a_trials_budget_ends_the_loop_with_the_budget_exact(tmp_path: Path) -> None:
    path = campaign(tmp_path, "budget", "[budget]\ntrials = 5\n", parallelism=3)
    told = 0
    with dse.ask_tell(path) as loop:
        held = [loop.ask() for _ in range(3)]  # every slot asked at once
        with pytest.raises(TimeoutError):
            loop.ask(timeout=0.2)
        for trial in held:
            assert trial is not None
            loop.tell(trial, loss(trial.params["x"]))
            told += 1
        while (trial := loop.ask()) is not None:
            loop.tell(trial, loss(trial.params["x"]))
            told += 1
    assert told == 5
    results = dse.load(tmp_path / ".dse", campaign="budget")
    assert results.status is dse.CampaignStatus.BUDGET_EXHAUSTED
    assert results.counts == {"completed": 5}


def test_a_stopping_rule_stops_an_asked_trial(tmp_path: Path) -> None:
    path = campaign(tmp_path, "curves", """\
        [stopping]
        rule = "median"
        max_step = 3

        [stopping.median]
        min_peers = 2
        """, parallelism=1)
    with dse.ask_tell(path) as loop:
        for _ in range(2):  # two peers run to max_step
            trial = loop.ask()
            assert trial is not None
            for step in (1, 2, 3):
                trial.report(step, loss=1.0)
                assert not trial.should_stop
            assert loop.tell(trial, 1.0) is dse.TrialStatus.COMPLETED
        bad = loop.ask()
        assert bad is not None
        bad.report(1, loss=100.0)
        assert bad.should_stop  # worse than the median of its peers at step 1
        assert bad.stop_reason is not None
        # Told anyway: nothing of it is written, the trial stays stopped.
        assert loop.tell(bad, 100.0) is dse.TrialStatus.STOPPED
    stopped = {t.number: t for t in dse.load(tmp_path / ".dse", campaign="curves").trials}[3]
    assert stopped.status is dse.TrialStatus.STOPPED
    assert stopped.metrics == {"loss": 100.0}
    assert stopped.trial_dir is not None
    assert not (Path(stopped.trial_dir) / "result.json").exists()
    assert "STOPPED" in dse_cli(tmp_path, "show", "curves:3")


def test_a_trial_past_its_time_limit_ends_budget_exhausted(tmp_path: Path) -> None:
    path = campaign(tmp_path, "limit", '[environment]\ntime_limit = "1s"\n', parallelism=1)
    with dse.ask_tell(path) as loop:
        trial = loop.ask()
        assert trial is not None
        wait_until(lambda: trial.should_stop, TIMEOUT, "the time limit to end the trial")
        assert loop.tell(trial, 1.0) is dse.TrialStatus.BUDGET_EXHAUSTED
        assert loop.ask() is not None  # the campaign goes on
    ended = {t.number: t for t in dse.load(tmp_path / ".dse", campaign="limit").trials}[1]
    assert ended.failure is dse.FailureClass.TIME_LIMIT
    assert ended.spend["wall_s"] == pytest.approx(1.0)  # charged its limit, no more


def test_a_silent_asker_loses_its_trial_to_another_after_its_expiry(tmp_path: Path) -> None:
    path = campaign(tmp_path, "silent", parallelism=1)
    slow = dse.ask_tell(path, expire=0.5)
    other = dse.ask_tell(path)
    first = slow.ask()
    assert first is not None
    first.report(1, loss=3.0)  # a word: its expiry starts again
    again = other.ask(timeout=TIMEOUT)  # the one slot, once slow said nothing for 0.5 s
    assert again is not None
    assert (again.trial_id, again.attempt) == (first.trial_id, 2)
    assert first.should_stop
    assert slow.tell(first, 9.0) is dse.TrialStatus.INTERRUPTED  # too late: not written
    assert other.tell(again, 1.0) is dse.TrialStatus.COMPLETED
    nxt = other.ask()
    assert nxt is not None
    other.close()  # gives nxt back: asked again as its next attempt
    back = slow.ask()
    assert back is not None
    assert (back.trial_id, back.attempt) == (nxt.trial_id, 2)
    slow.tell(back, 2.0)
    slow.close()
    trials = {t.number: t for t in dse.load(tmp_path / ".dse", campaign="silent").trials}
    assert trials[1].metrics == {"loss": 1.0}
    assert [a.state for a in trials[1].attempts] == [dse.AttemptState.PREEMPTED,
                                                      dse.AttemptState.SUCCEEDED]
    assert "gave no word" in (trials[1].attempts[0].reason or "")
    assert "given back" in (trials[2].attempts[0].reason or "")


def test_a_campaign_with_a_command_or_another_backend_is_refused(tmp_path: Path) -> None:
    base: dict[str, Any] = {"campaign": {"name": "no"}, "space": {"x": [1, 2]},
                            "objectives": [{"metric": "loss"}]}
    with pytest.raises(dse.ConfigError, match=r"environment\.command: the loop"):
        dse.ask_tell({**base, "environment": {"command": ["true"]}}, workspace=tmp_path)
    with pytest.raises(dse.ConfigError, match=r"campaign\.backend: 'probe'"):
        dse.ask_tell({**base, "campaign": {"name": "no", "backend": "probe"}},
                     workspace=tmp_path)
    with pytest.raises(dse.ConfigError, match="integrations: not written"):
        dse.ask_tell({**base, "integrations": {"tensorboard": {"logdir": "tb"}}},
                     workspace=tmp_path)
    with pytest.raises(dse.ConfigError, match="expire: expected a positive number"):
        dse.ask_tell(base, workspace=tmp_path, expire=0)
    assert not (tmp_path / "dse.sqlite").exists()


# -- several processes ----------------------------------------------------------------------

ASKER = """\
import json, os, sys, time
from pathlib import Path

import dse

log = open(sys.argv[1], "a")


def note(**what):
    log.write(json.dumps({"pid": os.getpid(), **what}) + "\\n")
    log.flush()


hold, wait = os.environ.get("ASK_HOLD"), os.environ.get("ASK_WAIT")
loop = dse.ask_tell("many.toml")
Path(f"ready-{os.getpid()}").touch()
while not Path("go").exists():
    time.sleep(0.01)
while (trial := loop.ask()) is not None:
    note(asked=trial.trial_id, attempt=trial.attempt, x=trial.params["x"])
    if hold:  # held until the test kills this process
        Path(hold + ".tmp").write_text(trial.trial_id)
        os.replace(hold + ".tmp", hold)
        time.sleep(3600)
    if wait:  # the first trial is held until the other one holds its own
        deadline = time.monotonic() + 300
        while not Path(wait).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        wait = None
    time.sleep(0.1)
    status = loop.tell(trial, {"loss": float(trial.params["x"])})
    note(told=trial.trial_id, attempt=trial.attempt, status=status.value)
loop.close()
"""


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_three_processes_ask_at_once_one_killed_holding_a_trial(tmp_path: Path) -> None:
    trials = 9
    campaign(tmp_path, "many", f"[budget]\ntrials = {trials}\n", parallelism=3)
    (tmp_path / "asker.py").write_text(ASKER)
    env = dict(os.environ)

    def start(name: str, **extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "asker.py", f"{name}.log"], cwd=tmp_path,
                                env={**env, **extra}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    victim = start("victim", ASK_HOLD="held")
    others = [start(name, ASK_WAIT="held") for name in ("one", "two")]
    everyone = [victim, *others]
    try:
        wait_until(lambda: len(list(tmp_path.glob("ready-*"))) == 3, TIMEOUT,
                   "the three askers to start",
                   seen=lambda: str([p.poll() for p in everyone]))
        (tmp_path / "go").touch()  # all three ask at once
        held = wait_until(lambda: (tmp_path / "held").exists(), TIMEOUT,
                          "the victim to hold a trial",
                          seen=lambda: str([p.poll() for p in everyone]))
        assert held
        held_trial = (tmp_path / "held").read_text()
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=TIMEOUT)  # reaped: its pid is gone
        for proc in others:
            _, err = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, err
    finally:
        for proc in everyone:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    victims = _records(tmp_path / "victim.log")
    survivors = _records(tmp_path / "one.log") + _records(tmp_path / "two.log")
    assert [(r["asked"], r["attempt"]) for r in victims] == [(held_trial, 1)]
    asked = [(r["asked"], r["attempt"], r["x"]) for r in victims + survivors if "asked" in r]
    # Each attempt was handed to one asker only, and each configuration to one trial only:
    # the killed asker's configuration again only as the next attempt of its trial.
    assert len({(t, a) for t, a, _ in asked}) == len(asked)
    configs = {x: t for t, _, x in asked}
    assert len(configs) == trials
    assert sorted(t for t, a, _ in asked if a > 1) == [held_trial]
    assert (held_trial, 2) in {(t, a) for t, a, _ in asked}
    told = [(r["told"], r["status"]) for r in survivors if "told" in r]
    assert sorted(told) == sorted((t, "completed") for t in configs.values())

    results = dse.load(tmp_path / ".dse", campaign="many")
    assert results.status is dse.CampaignStatus.BUDGET_EXHAUSTED
    assert results.counts == {"completed": trials}  # the budget exact: none more
    assert len(results.trials) == trials
    for t in results.trials:
        assert t.metrics == {"loss": float(t.params["x"])}
        expected = ([dse.AttemptState.KILLED, dse.AttemptState.SUCCEEDED]
                    if t.trial_id == held_trial else [dse.AttemptState.SUCCEEDED])
        assert [a.state for a in t.attempts] == expected, t
    killed = next(t for t in results.trials if t.trial_id == held_trial).attempts[0]
    assert "is gone" in (killed.reason or "")
    assert killed.started_at is not None  # asked: charged from then


def test_a_changed_campaign_closes_the_run_its_loops_ask(tmp_path: Path) -> None:
    path = campaign(tmp_path, "edited", parallelism=2)
    old = dse.ask_tell(path)
    held = old.ask()
    assert held is not None
    path.write_text(path.read_text().replace("max_parallelism = 2", "max_parallelism = 1"))
    with dse.ask_tell(path) as new:
        trial = new.ask()  # the run left running is closed first, then a new one starts
        assert trial is not None
        assert new.run_id != old.run_id
        assert held.should_stop
        assert old.tell(held, 1.0) is dse.TrialStatus.CANCELLED  # not written
        assert old.ask() is None  # its run is over
        new.tell(trial, 1.0)
    old.close()
    closed = dse.load(tmp_path / ".dse", campaign="edited", run=old.run_id)
    assert closed.status is dse.CampaignStatus.STOPPED
    assert closed.end_reason == "superseded"
    assert [t.status for t in closed.trials if t.trial_id == held.trial_id] == [
        dse.TrialStatus.CANCELLED]
