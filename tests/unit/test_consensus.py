"""Many nodes, one decision: the rule (the most severe failure wins) and message validation."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.model import FailureKind as K
from launcher.plan.consensus import (
    Decision,
    NodeReport,
    ProtocolError,
    decide,
    decode_decision,
    decode_report,
    encode,
)
from launcher.plan.degrade import Settings
from launcher.plan.settings import Resume

SETTINGS = Settings(micro_batch=4, grad_accum=2, world_size=16, deepspeed="zero2")
RESUME = Resume("v0-a/checkpoint-3", 3, False, "")


def report(node: int, kind: K | None, exit_code: int | None = 1, checkpoints=("v0-a/checkpoint-3",)) -> NodeReport:  # type: ignore[no-untyped-def]
    return NodeReport("job-7", 1, node, kind.value if kind else None, exit_code, ("evidence",), tuple(checkpoints))


def run(reports: list[NodeReport], nnodes: int = 3, max_attempts: int = 5) -> Decision:
    return decide("job-7", 1, reports, nnodes, SETTINGS, [], max_attempts=max_attempts, resume_for=lambda s: RESUME)


@pytest.mark.parametrize(
    ("kinds", "action", "root"),
    [
        pytest.param([None, None, None], "finish", None, id="all-finished"),
        pytest.param([K.COMM_ERROR, K.CUDA_OOM, K.COMM_ERROR], "retry", (1, "cuda_oom"), id="oom-beats-peer-errors"),
        pytest.param([K.KILLED, K.COMM_TIMEOUT, K.HOST_OOM], "retry", (2, "host_oom"), id="host-oom-on-node-2"),
        pytest.param([K.CUDA_OOM, K.CUDA_OOM, None], "retry", (0, "cuda_oom"), id="tie-lowest-node"),
        pytest.param([K.COMM_ERROR, K.USER_ERROR, None], "stop", (1, "user_error"), id="user-error-stops"),
        pytest.param([K.INTERRUPTED, K.COMM_ERROR, K.COMM_ERROR], "stop", (0, "interrupted"), id="scancel"),
    ],
)
def test_most_severe_failure_wins(kinds: list[K | None], action: str, root: tuple[int, str] | None) -> None:
    decision = run([report(node, kind) for node, kind in enumerate(kinds)])
    assert decision.action == action
    assert (None if root is None else (decision.root_node, decision.root_kind)) == root


def test_retry_carries_one_plan_for_every_node() -> None:
    decision = run([report(0, K.COMM_ERROR), report(1, K.CUDA_OOM), report(2, K.COMM_ERROR)])
    assert decision.settings == replace(SETTINGS, micro_batch=2, grad_accum=4)
    assert decision.resume == RESUME
    assert decision.change and decision.change.startswith("per_device_train_batch_size 4 -> 2")


def test_missing_node_and_unshared_checkpoints_stop_the_job() -> None:
    assert "never reported" in run([report(0, K.CUDA_OOM), report(2, None)]).reason
    blind = run([report(0, K.CUDA_OOM), report(1, None, checkpoints=()), report(2, None)])
    assert blind.action == "stop" and "node(s) [1]" in blind.reason and "share" in blind.reason


def test_a_node_that_died_loading_the_checkpoint_gets_the_same_settings_from_the_one_before() -> None:
    """A user error on node 1 is a stop, unless it died loading the checkpoint: node 0's resume_for (which
    has set that checkpoint aside) names the one before it, and nothing else changes."""
    before = Resume("v0-a/checkpoint-2", 2, False, "")
    both = ("v0-a/checkpoint-2", "v0-a/checkpoint-3")
    died_loading = replace(report(1, K.USER_ERROR, checkpoints=both), load_failed=True)
    loaded = [report(0, K.COMM_ERROR, checkpoints=both), died_loading, report(2, None, checkpoints=both)]
    decision = decide("job-7", 1, loaded, 3, SETTINGS, [], max_attempts=5, resume_for=lambda s: before)
    assert (decision.action, decision.settings, decision.change, decision.resume) == (
        "retry",
        SETTINGS,
        "no change",
        before,
    )
    assert "failed to load on node(s) [1]" in decision.reason and "v0-a/checkpoint-2 (step 2)" in decision.reason
    from_zero = decide("job-7", 1, loaded, 3, SETTINGS, [], max_attempts=5, resume_for=lambda s: None)
    assert from_zero.action == "retry" and from_zero.resume is None and "from step 0" in from_zero.reason
    unshared = [*loaded[:2], report(2, None)]
    blind = decide("job-7", 1, unshared, 3, SETTINGS, [], max_attempts=5, resume_for=lambda s: before)
    assert blind.action == "stop" and "node(s) [2]" in blind.reason
    # a load failure that is not the root cause leaves the ladder to the root's kind
    oom_first = [replace(report(0, K.COMM_ERROR), load_failed=True), report(1, K.CUDA_OOM), report(2, None)]
    assert run(oom_first).change.startswith("per_device_train_batch_size 4 -> 2")  # type: ignore[union-attr]
    again = decode_report(encode(loaded[1]), "job-7", 1, 3)
    assert again.load_failed is True


def test_the_users_own_start_travels_without_a_path_and_each_node_reads_its_own(tmp_path: Path) -> None:
    """A --resume_from_checkpoint outside the output dir (a colleague's run) is no path inside it: node 0
    sends none, and each node resumes the checkpoint its own argument names (the nodes' arguments agree)."""
    from launcher.run.resume import relative_to, shared_resume
    from tests.unit.test_checkpoints import make

    theirs = make(tmp_path / "elsewhere" / "checkpoint-4")
    start = Resume(str(theirs), 4, True, "--resume_only_model true was given", start=True)
    sent = relative_to(start, tmp_path / "out")
    assert sent is not None and sent.checkpoint == ""
    decision = decide("job-7", 1, [report(0, K.CUDA_OOM, checkpoints=())], 1, SETTINGS, [], max_attempts=5,
                      resume_for=lambda s: sent)  # fmt: skip
    assert decision.action == "retry" and decode_decision(encode(decision), "job-7", 1).resume == sent
    assert shared_resume(sent, tmp_path / "out", str(theirs)) == start


def test_max_attempts_stops() -> None:
    assert run([report(0, K.CUDA_OOM), report(1, None), report(2, None)], max_attempts=1).action == "stop"


def test_round_trip() -> None:
    decision = run([report(0, K.CUDA_OOM), report(1, None), report(2, None)])
    assert decode_decision(encode(decision), "job-7", 1) == decision
    sent = report(1, K.CUDA_OOM)
    assert decode_report(encode(sent), "job-7", 1, 3) == sent


def tampered(message: NodeReport | Decision, **changes: object) -> str:
    data = json.loads(encode(message))
    data.update(changes)
    return json.dumps(data)


RETRY = Decision("job-7", 1, "retry", "why", 1, "cuda_oom", replace(SETTINGS, micro_batch=2, grad_accum=4), "c", RESUME)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("not json", "not JSON", id="garbage"),
        pytest.param(tampered(RETRY, run_id="job-8"), "another run", id="foreign-job"),
        pytest.param(tampered(RETRY, attempt=2), "attempt 2", id="wrong-attempt"),
        pytest.param(tampered(RETRY, action="exec"), "action 'exec'", id="unknown-action"),
        pytest.param(tampered(RETRY, command="rm -rf /"), "unknown fields ['command']", id="a-command-line"),
        pytest.param(
            tampered(RETRY, settings={**json.loads(encode(RETRY))["settings"], "micro_batch": 0}),
            "micro_batch=0",
            id="micro-batch-out-of-bounds",
        ),
        pytest.param(
            tampered(RETRY, settings={**json.loads(encode(RETRY))["settings"], "deepspeed": "/tmp/x.json"}),
            "not a known ZeRO",
            id="unknown-zero",
        ),
        pytest.param(
            tampered(RETRY, settings={**json.loads(encode(RETRY))["settings"], "dataloader_pin_memory": "yes"}),
            "not a boolean",
            id="not-a-bool",
        ),
        pytest.param(
            tampered(
                RETRY,
                resume={
                    "checkpoint": "../../etc/checkpoint-1",
                    "step": 1,
                    "weights_only": False,
                    "why_weights_only": "",
                    "start": False,
                },
            ),
            "not a checkpoint inside",
            id="path-escape",
        ),
        pytest.param(
            tampered(
                RETRY,
                resume={
                    "checkpoint": "/etc/x",
                    "step": 1,
                    "weights_only": False,
                    "why_weights_only": "",
                    "start": True,
                },
            ),
            "names a path for the user's own checkpoint",
            id="start-with-a-path",
        ),
        pytest.param(tampered(RETRY, settings=None), "retry decision without settings", id="retry-without-plan"),
        pytest.param(tampered(RETRY, type="NodeReport"), "not a Decision", id="wrong-type"),
    ],
)
def test_bad_decisions_are_rejected(text: str, message: str) -> None:
    with pytest.raises(ProtocolError) as err:
        decode_decision(text, "job-7", 1)
    assert message in err.value.message


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"node": 7}, "node=7", id="node-out-of-range"),
        pytest.param({"kind": "meltdown"}, "unknown failure kind", id="unknown-kind"),
        pytest.param({"checkpoints": ["/abs/checkpoint-3"]}, "not a checkpoint inside", id="absolute-path"),
        pytest.param({"run_id": "other"}, "another run", id="foreign"),
        pytest.param({"load_failed": "yes"}, "load_failed='yes' is not a boolean", id="load-failed-text"),
    ],
)
def test_bad_reports_are_rejected(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ProtocolError) as err:
        decode_report(tampered(report(1, K.CUDA_OOM), **changes), "job-7", 1, 3)
    assert message in err.value.message


def test_guided_ladder_decides_on_the_worst_nodes_figures() -> None:
    from launcher.plan.guided import Memory

    gib = 1 << 30

    def need(s: Settings) -> int:  # 20 GiB of model states at zero2, 1 GiB per sample of activations
        return int(({"zero2": 20, "zero3": 6, "zero3_offload": 1}[s.deepspeed or "zero2"] + s.micro_batch) * gib)

    roomy = replace(report(0, K.CUDA_OOM), capacity_bytes=80 * gib, peak_bytes=30 * gib)
    tight = replace(report(1, K.COMM_ERROR), capacity_bytes=24 * gib, peak_bytes=24 * gib)
    memory = Memory(need, 80 * gib, 30 * gib)

    def decide_on(reports: list[NodeReport]) -> Decision:
        return decide("job-7", 1, reports, 2, SETTINGS, [], max_attempts=5, resume_for=lambda s: RESUME, memory=memory)

    alone = decide_on([roomy, replace(tight, capacity_bytes=None, peak_bytes=None)])
    worst = decide_on([roomy, tight])
    assert alone.settings is not None and worst.settings is not None
    assert alone.settings.deepspeed == "zero2"  # 80 GiB: a smaller micro-batch is enough
    assert worst.settings.deepspeed == "zero3"  # node 1's 24 GiB: zero2's 20 GiB of states never fit
    assert worst.predicted_need_bytes is not None and worst.predicted_need_bytes <= 0.9 * 24 * gib
    again = decode_decision(encode(worst), "job-7", 1)
    assert again.predicted_need_bytes == worst.predicted_need_bytes
    assert decode_report(encode(tight), "job-7", 1, 2).capacity_bytes == 24 * gib
    with pytest.raises(ProtocolError):
        decode_report(encode(replace(tight, peak_bytes=-1)), "job-7", 1, 2)


def test_the_first_attempts_terms_name_the_first_option_two_nodes_differ_in() -> None:
    from launcher.plan.consensus import launch_terms, terms_difference

    node0 = launch_terms({"per_device_train_batch_size": "2", "model": "m"}, "zero2", 8, False, 5, 2)
    assert terms_difference(1, dict(node0), node0) is None
    node1 = launch_terms({"per_device_train_batch_size": "4", "model": "m"}, "zero2", 8, False, 5, 2)
    assert terms_difference(1, node1, node0) == (
        "the nodes would start differently: --per_device_train_batch_size is '2' on node 0, '4' on node 1"
    )
    extra = launch_terms({"per_device_train_batch_size": "2", "model": "m", "max_steps": "30"}, "zero2", 8, False, 5, 2)
    assert terms_difference(2, extra, node0) == (
        "the nodes would start differently: --max_steps is not given on node 0, '30' on node 2"
    )
    planned = launch_terms({"per_device_train_batch_size": "2", "model": "m"}, "zero3", 8, False, 5, 2)
    assert "the planned strategy is 'zero2' on node 0, 'zero3' on node 1" in str(terms_difference(1, planned, node0))
    resuming = launch_terms({"per_device_train_batch_size": "2", "model": "m"}, "zero2", 8, True, 5, 2)
    assert terms_difference(1, resuming, node0) == (
        "the nodes would start differently: safe-sft's --resume-latest is 'not given' on node 0, 'given' on node 1"
    )
    # a node that gives up after one attempt left node 0's retry waiting at the rendezvous (hostile43mn F3)
    fewer = launch_terms({"per_device_train_batch_size": "2", "model": "m"}, "zero2", 8, False, 1, 2)
    assert terms_difference(1, fewer, node0) == (
        "the nodes would start differently: safe-sft's --max-attempts is '5' on node 0, '1' on node 1"
    )
    # NNODES=3 on node 1 beside 2 on node 0: both trained, each reporting its own global batch (hostile43mn F2)
    three = launch_terms({"per_device_train_batch_size": "2", "model": "m"}, "zero2", 8, False, 5, 3)
    assert (
        terms_difference(1, three, node0) == "the nodes would start differently: NNODES is '2' on node 0, '3' on node 1"
    )


def test_a_config_files_values_are_terms_as_the_command_lines_are(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each node ran `safe-sft train.yaml` from its own home, the two files giving different batches: the
    terms held only the argv (`train.yaml` on both), and each node trained its own (hostile43mn F2)."""
    from launcher.model import Source, Sourced
    from launcher.plan.consensus import terms_difference
    from launcher.plan.swift_args import parse_swift_argv
    from launcher.prepare import first_attempt_terms

    def terms(batch: str, *cli: str) -> dict[str, str]:
        swift = parse_swift_argv(["train.yaml", *cli], config={"model": "m", "per_device_train_batch_size": batch})
        topology = SimpleNamespace(nproc_per_node=Sourced(1, Source.AUTO), nnodes=Sourced(2, Source.ENV))
        prepared = SimpleNamespace(swift=swift, plan=SimpleNamespace(strategy="zero2", topology=topology))
        return first_attempt_terms(prepared, False, 5)  # type: ignore[arg-type]

    node0 = terms("2")
    assert node0["--per_device_train_batch_size"] == "2"
    assert terms_difference(1, terms("4"), node0) == (
        "the nodes would start differently: --per_device_train_batch_size is '2' on node 0, '4' on node 1"
    )
    assert terms_difference(1, terms("4", "--per_device_train_batch_size", "2"), node0) is None  # the CLI wins


def test_a_stop_for_a_peers_interrupt_quotes_its_signal_for_the_other_nodes_to_exit_with() -> None:
    """A node whose peer got Ctrl-C had said `another node failed`, exited 1 and recorded `failed`
    (hostile43mn F5): the decision quotes the signal, and the other nodes exit 128 + it as interrupted."""
    from launcher.plan.consensus import peer_signal

    interrupted = replace(report(1, K.INTERRUPTED), evidence=("safe-sft received SIGINT",))
    decision = run([report(0, K.COMM_ERROR), interrupted], nnodes=2)
    assert (decision.action, decision.reason) == ("stop", "node 1 was interrupted (safe-sft received SIGINT)")
    assert peer_signal(decision) == "SIGINT"
    assert peer_signal(replace(decision, reason="node 1 was interrupted")) == "SIGTERM"  # not said: scancel's
