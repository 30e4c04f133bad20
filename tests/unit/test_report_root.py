"""The root cause a node's summary and report.json name on several nodes: node 0's decision, where this node's
own failure only followed from another node's (hostile46mn F4)."""

from __future__ import annotations

from pathlib import Path

from launcher.model import Failure, FailureKind
from launcher.plan.degrade import Settings
from launcher.run.records import AttemptRecord, RunResult
from launcher.run.report import report_json, summary

S = Settings(micro_batch=1, grad_accum=2, world_size=2)
LOST_PEER = Failure(FailureKind.COMM_ERROR, ("Connection closed by peer",), rank=0, exit_code=1)


def attempt(number: int, **kw) -> AttemptRecord:  # type: ignore[no-untyped-def]
    return AttemptRecord(number=number, settings=S, command=[], env_set={}, log_path="", started="", **kw)


def decision(kind: str, node: int) -> dict[str, object]:
    return {"action": "retry", "reason": f"{kind} on node {node}: the same settings once more", "root_node": node,
            "root_kind": kind, "change": None, "resume_from": None}  # fmt: skip


def test_node_0_names_node_1s_killed_rank_as_the_root_cause_and_its_own_lost_connection_as_this_nodes() -> None:
    """A rank killed on node 1: node 0 decided `killed on node 1` and retried, while its summary and report.json
    named its own symptom, a lost connection on rank 0, as the root cause."""
    attempts = [attempt(1, failure=LOST_PEER, decision=decision("killed", 1)), attempt(2)]
    result = RunResult("succeeded", attempts, 0)
    said = summary(result, Path("/r/report.json"))
    assert "  root cause (attempt 1, node 0's decision): killed on node 1" in said
    assert "  on this node: comm_error: " in said and "across the nodes" not in said
    root = report_json(attempts, result, [], None, None)["root_cause"]
    assert (root["kind"], root["node"]) == ("killed", 1)
    assert root["evidence"] == ["killed on node 1: the same settings once more"]


def test_a_nodes_own_failure_that_node_0_agreed_on_stays_its_root_cause() -> None:
    oom = Failure(FailureKind.CUDA_OOM, ("CUDA out of memory",), rank=1, exit_code=1)
    attempts = [attempt(1, failure=oom, decision=decision("cuda_oom", 1)), attempt(2)]
    result = RunResult("succeeded", attempts, 0)
    said = summary(result, Path("/r/report.json"))
    assert "  root cause (attempt 1): cuda_oom: " in said and "across the nodes (node 0's decision): cuda_oom" in said
    assert report_json(attempts, result, [], None, None)["root_cause"]["kind"] == "cuda_oom"
