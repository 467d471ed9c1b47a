"""squeue/sacct parsing and the Slurm state mapping, on lines observed on Slurm 22.05."""

from __future__ import annotations

from datetime import datetime

import pytest

from dse import JobState
from dse_slurm import (
    SacctRow,
    SqueueRow,
    expand_job_ids,
    parse_exit_code,
    parse_sacct,
    parse_squeue,
    to_job_state,
)

S, F, K, L = JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED, JobState.LOST


@pytest.mark.parametrize(
    ("state", "exit_code", "expected"),
    [
        ("COMPLETED", "0:0", (S, 0, None, False)),
        ("FAILED", "3:0", (F, 3, None, False)),
        ("FAILED", "7:0", (F, 7, None, False)),
        ("FAILED", "0:9", (K, None, 9, True)),  # memory kill without cgroups
        ("FAILED", "1:15", (F, 1, 15, False)),
        ("OUT_OF_MEMORY", "0:125", (JobState.OUT_OF_MEMORY, None, None, False)),
        ("TIMEOUT", "0:0", (JobState.TIMEOUT, None, None, False)),
        ("TIMEOUT", "0:15", (JobState.TIMEOUT, None, 15, False)),
        ("DEADLINE", "0:0", (JobState.TIMEOUT, None, None, False)),
        ("PREEMPTED", "0:0", (JobState.PREEMPTED, None, None, False)),
        ("NODE_FAIL", "0:0", (JobState.NODE_FAIL, None, None, False)),
        ("BOOT_FAIL", "0:0", (JobState.BOOT_FAIL, None, None, False)),
        ("REQUEUED", "0:0", (JobState.PREEMPTED, None, None, False)),
        ("REQUEUE_FED", "0:0", (JobState.PREEMPTED, None, None, False)),
        ("REQUEUE_HOLD", "0:0", (JobState.PREEMPTED, None, None, False)),
        ("CANCELLED", "0:15", (JobState.CANCELLED, None, 15, False)),
        ("CANCELLED by 0", "0:0", (JobState.CANCELLED, None, None, False)),
        ("REVOKED", "0:0", (L, None, None, True)),
        ("SPECIAL_EXIT", "0:0", (L, None, None, True)),
        ("PENDING", "0:0", (JobState.PENDING, None, None, False)),
        ("CONFIGURING", None, (JobState.PENDING, None, None, False)),
        ("RUNNING", "0:0", (JobState.RUNNING, None, None, False)),
        ("COMPLETING", None, (JobState.RUNNING, None, None, False)),
        ("SUSPENDED", None, (JobState.RUNNING, None, None, False)),
        ("STOPPED", None, (JobState.RUNNING, None, None, False)),
        ("SIGNALING", None, (JobState.RUNNING, None, None, False)),
        ("RESIZING", None, (JobState.RUNNING, None, None, False)),
        ("WHATEVER_NEW", "0:0", (L, None, None, True)),
        ("", "", (L, None, None, True)),
        ("completed", "garbage", (S, 0, None, False)),
    ],
)
def test_every_slurm_state_maps(state, exit_code, expected):
    assert to_job_state(state, exit_code) == expected


@pytest.mark.parametrize("state", ["REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "PENDING"])
def test_requeue_states_still_in_the_queue_are_pending(state):
    assert to_job_state(state, None, queued=True) == (JobState.PENDING, None, None, False)


def test_parse_exit_code():
    assert parse_exit_code("3:0") == (3, None)
    assert parse_exit_code("0:15") == (0, 15)
    assert parse_exit_code("") == (None, None)
    assert parse_exit_code("x:y") == (None, None)


def test_expand_job_ids():
    assert expand_job_ids("68_[2-9]") == [f"68_{i}" for i in range(2, 10)]
    assert expand_job_ids("123_[5-9%2]") == ["123_5", "123_6", "123_7", "123_8", "123_9"]
    assert expand_job_ids("7_[1,4-6]") == ["7_1", "7_4", "7_5", "7_6"]
    assert expand_job_ids("7_[3]") == ["7_3"]
    assert expand_job_ids("68_1") == ["68_1"]
    assert expand_job_ids("63") == ["63"]
    assert expand_job_ids("7_[a-b]") == ["7_[a-b]"]


def test_parse_squeue_expands_pending_ranges():
    # As observed right after `sbatch --array=0-9` (scenarios-output-cgroup.txt), in our format.
    text = (
        "68_[2-9%2]|PENDING||JobArrayTaskLimit\n"
        "68_1|RUNNING|n1|None\n"
        "68_0|RUNNING|n1|None\n"
        "\n"
        "63|PENDING||Priority\n"
        "not a row\n"
    )
    rows = parse_squeue(text)
    assert sorted(rows) == sorted(["63", *(f"68_{i}" for i in range(10))])
    assert rows["68_5"] == SqueueRow("68_5", "PENDING", None, "JobArrayTaskLimit")
    assert rows["68_1"] == SqueueRow("68_1", "RUNNING", "n1", None)
    assert rows["63"] == SqueueRow("63", "PENDING", None, "Priority")


def test_parse_squeue_of_nothing():
    assert parse_squeue("") == {}


def test_parse_sacct_realistic_lines():
    # Job lines observed with sacct -X on Slurm 22.05 (scenarios-output-cgroup.txt), in the
    # format the backend asks for.
    text = (
        "63|COMPLETED|0:0|n1|2|2026-11-29T09:39:01|2026-11-29T09:39:03|"
        "billing=1,cpu=1,mem=3214M,node=1\n"
        "64|FAILED|3:0|n1|1|2026-11-29T09:39:04|2026-11-29T09:39:05|cpu=1,mem=3214M,node=1\n"
        "65|CANCELLED by 0|0:0|n1|0|2026-11-29T09:39:06|2026-11-29T09:39:06|cpu=1\n"
        "66|OUT_OF_MEMORY|0:125|n1|0|2026-11-29T09:39:07|2026-11-29T09:39:07|cpu=1,mem=100M\n"
        "68_7|FAILED|7:0|n2|1|2026-11-29T09:39:30|2026-11-29T09:39:31|cpu=1,gres/gpu=1\n"
        "68_[8-9]|PENDING|0:0|None assigned|0|Unknown|Unknown|\n"
        "62|TIMEOUT|0:0|n3|76|2026-11-29T09:37:00|2026-11-29T09:38:16|cpu=1\n"
        "70|RUNNING|0:0|n1|5|2026-11-29T09:40:00|Unknown|cpu=1\n"
        "short|line\n"
    )
    rows = parse_sacct(text)
    assert sorted(rows) == ["62", "63", "64", "65", "66", "68_7", "68_8", "68_9", "70"]
    assert rows["63"] == SacctRow(
        job_id="63", state="COMPLETED", exit_code=0, signal=None, cancelled_by=None,
        nodes="n1", elapsed_s=2,
        started_at=datetime(2026, 11, 29, 9, 39, 1).timestamp(),
        ended_at=datetime(2026, 11, 29, 9, 39, 3).timestamp(),
        alloc_tres={"billing": "1", "cpu": "1", "mem": "3214M", "node": "1"},
    )
    assert (rows["65"].state, rows["65"].cancelled_by) == ("CANCELLED", 0)
    assert (rows["66"].exit_code, rows["66"].signal) == (0, 125)
    assert rows["68_7"].alloc_tres == {"cpu": "1", "gres/gpu": "1"}
    assert rows["68_9"] == SacctRow(
        job_id="68_9", state="PENDING", exit_code=0, signal=None, nodes=None, elapsed_s=0,
    )
    assert rows["70"].ended_at is None
    mapped = {job: to_job_state(row.state, f"{row.exit_code}:{row.signal or 0}")[0]
              for job, row in rows.items()}
    assert mapped == {
        "62": JobState.TIMEOUT, "63": JobState.SUCCEEDED, "64": JobState.FAILED,
        "65": JobState.CANCELLED, "66": JobState.OUT_OF_MEMORY, "68_7": JobState.FAILED,
        "68_8": JobState.PENDING, "68_9": JobState.PENDING, "70": JobState.RUNNING,
    }


def test_parse_sacct_later_run_wins():
    text = (
        "67|REQUEUED|0:0|n1|1|2026-11-29T09:39:11|2026-11-29T09:39:12|cpu=1\n"
        "67|COMPLETED|0:0|n1|2|2026-11-29T09:39:25|2026-11-29T09:39:27|cpu=1\n"
    )
    assert parse_sacct(text)["67"].state == "COMPLETED"
