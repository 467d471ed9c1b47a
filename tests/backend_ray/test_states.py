"""How an attempt's end on Ray is read: the tasks' exit documents, Ray's errors, node names.

No cluster: the documents are what ``_supervise.py`` writes, the errors what Ray raises."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import ray.exceptions as rex

from dse import JobState
from dse_ray import node_label
from dse_ray._states import from_documents, from_error

DONE = {"started_at": 100.0, "ended_at": 101.0}


def end(*docs: dict[str, object], cancelled: bool = False, nodes: tuple[str, ...] = ()
        ) -> tuple[JobState, str | None, bool]:
    status = from_documents("j", list(docs), Path("/nonexistent"), cancelled=cancelled,
                            nodes=list(nodes))
    return status.state, status.reason, status.ambiguous


@pytest.mark.parametrize(("doc", "state", "ambiguous"), [
    ({"exit_code": 0}, JobState.SUCCEEDED, False),
    ({"exit_code": 3}, JobState.FAILED, False),
    ({"signal": signal.SIGKILL}, JobState.KILLED, True),
    ({"signal": signal.SIGSEGV}, JobState.FAILED, False),
    ({"timed_out": True, "signal": signal.SIGTERM}, JobState.TIMEOUT, False),
    ({"cancelled": True, "signal": signal.SIGTERM}, JobState.CANCELLED, False),
    ({"out_of_memory": True, "signal": signal.SIGKILL}, JobState.OUT_OF_MEMORY, False),
    ({"launch_error": "FileNotFoundError: x"}, JobState.INVALID, False),
    ({"orphaned": True, "signal": signal.SIGTERM}, JobState.LOST, False),
    ({"supervisor_died": -9}, JobState.LOST, True),
    ({"start_error": "OSError: [Errno 14] Bad address"}, JobState.LAUNCH_ERROR, False),
])
def test_one_task_s_document_says_its_end(doc: dict[str, object], state: JobState,
                                          ambiguous: bool) -> None:
    assert end({**DONE, **doc})[::2] == (state, ambiguous)


def test_the_rank_that_failed_names_the_attempt_s_end_not_those_it_took_down() -> None:
    failed = {**DONE, "rank": "1", "exit_code": 3, "node": "w2"}
    taken_down = {**DONE, "rank": "0", "cancelled": True, "signal": 15, "node": "w1"}
    status = from_documents("j", [taken_down, failed], Path("/nonexistent"), cancelled=False,
                            nodes=["w1", "w2"])
    assert (status.state, status.exit_code, status.node) == (JobState.FAILED, 3, "w2")


def test_a_successful_attempt_of_two_nodes_names_both() -> None:
    docs = [{**DONE, "rank": "0", "exit_code": 0}, {**DONE, "rank": "1", "exit_code": 0}]
    status = from_documents("j", docs, Path("/nonexistent"), cancelled=False,
                            nodes=["w1", "w2"])
    assert (status.state, status.node, status.started_at, status.ended_at) == (
        JobState.SUCCEEDED, "w1,w2", 100.0, 101.0)


class _Died(rex.RayActorError):
    """A RayActorError as Ray raises it, with its message and its preemption flag."""

    def __init__(self, text: str, preempted: bool = False) -> None:
        super().__init__(None, text, False, preempted)


@pytest.mark.parametrize(("text", "preempted", "cancelled", "state"), [
    ("The actor died because its node has died. Node Id: ab12", False, False,
     JobState.NODE_FAIL),
    ("The actor died because its node has died. Node Id: ab12", True, False, JobState.PREEMPTED),
    ("Task was killed due to the node running low on memory. OutOfMemoryError", False, False,
     JobState.OUT_OF_MEMORY),
    ("The actor was killed by `ray.kill`", False, True, JobState.CANCELLED),
    ("The actor was killed by `ray.kill`", False, False, JobState.LOST),
])
def test_ray_s_error_says_how_the_attempt_ended(text: str, preempted: bool, cancelled: bool,
                                                state: JobState) -> None:
    status = from_error("j", _Died(text, preempted), node="w1", cancelled=cancelled,
                        started_at=1.0, ended_at=2.0)
    assert status is not None
    assert status.state is state
    assert status.node == "w1"


def test_an_actor_unavailable_for_now_is_no_news() -> None:
    assert from_error("j", rex.ActorUnavailableError("restarting", None), node=None,
                      cancelled=False, started_at=None, ended_at=1.0) is None


def test_nodes_are_named_by_their_name_else_address_and_id() -> None:
    assert node_label({"NodeName": "w1", "NodeManagerAddress": "10.0.0.1",
                       "NodeID": "ab" * 28}) == "w1"
    assert node_label({"NodeName": "10.0.0.1", "NodeManagerAddress": "10.0.0.1",
                       "NodeID": "cd" * 28}) == "10.0.0.1-cdcdcdcd"


def test_a_node_killed_before_it_started_because_another_failed_is_not_the_attempt_s_end(
    tmp_path: Path,
) -> None:
    """Rank 1 exited 3 before rank 0's actor answered that it started: rank 0's actor was
    killed (Ray: "killed by ray.kill ... before it started running"); the attempt failed
    with 3, it was not lost."""
    import dataclasses

    from dse import Resources, SystemClock
    from dse.testing.contracts import contract_job
    from dse_ray._attempt import Attempt

    spec = dataclasses.replace(contract_job(tmp_path, "two", "succeed"),
                               resources=Resources(cpus=1, nodes=2))
    att = Attempt("j", spec)
    att.results = {0: object(), 1: object()}
    att.take("result", 1, {"node": "w2", "started_at": 100.0, "nodes": ["w1", "w2"],
                           "tasks": [{**DONE, "rank": "1", "exit_code": 3, "node": "w2"}]},
             None, SystemClock())
    assert att.failing()
    att.stopped.update(r for r in att.results if r not in att.docs)  # as the backend does
    att.take("result", 0, None, _Died("The actor is dead because it was killed by `ray.kill`."
                                      " The actor never ran - it was cancelled before it"
                                      " started running."), SystemClock())
    assert att.ended()
    status = att.end()
    assert (status.state, status.exit_code) == (JobState.FAILED, 3), status.reason
