"""Many nodes, one decision: the messages between the nodes' safe-sft processes, and node 0's rule.

Pure. Messages carry data, never commands: every field is checked against a schema (known keys only,
settings within bounds, known ZeRO names, a checkpoint inside the output dir), and a message of another
run (a different run id or attempt) is rejected. The rule: the most severe failure of all nodes wins
(the same ranking that picks the root cause among ranks), and the ladder takes one step from there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from launcher.errors import SafeSftError
from launcher.model import Failure, FailureKind
from launcher.plan.degrade import GiveUp, Settings, next_step
from launcher.plan.ds_config import RUNG_NAMES
from launcher.plan.guided import Memory
from launcher.plan.settings import Resume
from launcher.plan.severity import strength
from launcher.plan.vision_budget import VISION_ENVS

PROTOCOL = 1
MAX_TEXT = 2000
MAX_EVIDENCE = 8
ACTIONS = ("finish", "retry", "stop")
SAME_VERSION = "run one safe-sft version on all nodes"  # the fix for any malformed message
_BOUNDS = {"micro_batch": (1, 1 << 16), "grad_accum": (1, 1 << 20), "world_size": (1, 1 << 20),
           "dataloader_num_workers": (0, 1024), "eval_batch": (1, 1 << 16), "vision_budget": (1, 1 << 40),
           "max_length": (1, 1 << 24), "rebalanced": (0, 1 << 10)}  # fmt: skip


class ProtocolError(SafeSftError):
    """A message that is malformed, out of bounds, or from another run."""


# ---- the first attempt's terms: what every node must start with -----------------------------------


def launch_terms(
    options: Mapping[str, str],
    strategy: str | None,
    nproc_per_node: int,
    resume_latest: bool,
    max_attempts: int,
    nnodes: int,
) -> dict[str, str]:
    """What the nodes' first attempts must agree on: the trainer's options as each node was given them, the
    ZeRO strategy its plan chose (free memory differs between nodes), its processes per node, whether
    it resumes from the newest checkpoint (one node at step 8 and one at 0 would hang at the first
    collective that differs), how many attempts it makes (a node that stops after fewer than node 0
    decides leaves node 0's next attempt waiting at the rendezvous), and how many nodes it was told of
    (NNODES: its plan's global batch and torchrun's world size follow it)."""
    return {**{f"--{key}": value for key, value in options.items()},
            "the planned strategy": strategy or "none", "processes per node": str(nproc_per_node),
            "safe-sft's --resume-latest": "given" if resume_latest else "not given",
            "safe-sft's --max-attempts": str(max_attempts), "NNODES": str(nnodes)}  # fmt: skip


def terms_difference(node: int, terms: Mapping[str, str], node0: Mapping[str, str]) -> str | None:
    """The first term in which `node`'s differ from node 0's, as a sentence; None when they agree."""
    for key in sorted(set(terms) | set(node0)):
        mine, theirs = terms.get(key), node0.get(key)
        if mine != theirs:
            shown = [f"{value!r} on node {n}" if value is not None else f"not given on node {n}"
                     for n, value in ((0, theirs), (node, mine))]  # fmt: skip
            return f"the nodes would start differently: {key} is {shown[0]}, {shown[1]}"
    return None


@dataclass(frozen=True)
class NodeReport:
    run_id: str
    attempt: int
    node: int
    kind: str | None  # a FailureKind value; None: this node's attempt succeeded
    exit_code: int | None
    evidence: tuple[str, ...]
    checkpoints: tuple[str, ...]  # complete checkpoints this node sees, relative to the output dir
    capacity_bytes: int | None = None  # after a GPU OOM: this node's smallest GPU room (the guided ladder)
    peak_bytes: int | None = None  # ... and its measured peak
    load_failed: bool = False  # this node's attempt died loading the checkpoint every node resumed from


@dataclass(frozen=True)
class Decision:
    run_id: str
    attempt: int  # the attempt this decides about
    action: str  # finish | retry | stop
    reason: str
    root_node: int | None = None
    root_kind: str | None = None
    settings: Settings | None = None  # for retry
    change: str | None = None
    resume: Resume | None = None  # checkpoint relative to the output dir
    predicted_need_bytes: int | None = None  # the guided ladder's prediction for `settings`


# ---- the rule --------------------------------------------------------------------------------------


def root_report(reports: Sequence[NodeReport]) -> NodeReport | None:
    """The most severe failure across nodes (None when every node succeeded); ties: the lowest node."""
    failed = [r for r in reports if r.kind is not None]
    if not failed:
        return None
    return max(failed, key=lambda r: (strength(FailureKind(r.kind), r.exit_code), -r.node))


def decide(
    run_id: str,
    attempt: int,
    reports: Sequence[NodeReport],
    nnodes: int,
    settings: Settings,
    history: Sequence[FailureKind],
    *,
    max_attempts: int,
    resume_for: Callable[[Settings], Resume | None],
    gpus_have_room_for_zero3: bool = False,
    memory: Memory | None = None,
) -> Decision:
    """Node 0's decision after an attempt; `resume_for(new_settings)` names the checkpoint to resume from.
    `memory` is node 0's view for the guided ladder; the nodes' reports replace its figures by the worst
    node's (the smallest GPU room, the highest peak)."""
    missing = sorted(set(range(nnodes)) - {r.node for r in reports})
    if missing:
        return Decision(run_id, attempt, "stop", f"node(s) {missing} never reported")
    root = root_report(reports)
    if root is None:
        return Decision(run_id, attempt, "finish", "every node finished")
    kind = FailureKind(root.kind)
    base = dict(root_node=root.node, root_kind=root.kind)
    if kind is FailureKind.INTERRUPTED:
        said = f" ({root.evidence[0]})" if root.evidence else ""  # `safe-sft received SIGINT`: peer_signal reads it
        return Decision(run_id, attempt, "stop", f"node {root.node} was interrupted{said}", **base)  # type: ignore[arg-type]
    if attempt >= max_attempts:
        return Decision(run_id, attempt, "stop", f"--max-attempts {max_attempts} reached", **base)  # type: ignore[arg-type]
    if root.load_failed:  # not the settings' fault: the same settings, from a checkpoint before that one
        return _past_an_unloadable_checkpoint(run_id, attempt, reports, root, settings, resume_for)
    step = next_step(
        settings, kind, history, gpus_have_room_for_zero3=gpus_have_room_for_zero3, memory=worst(memory, reports)
    )
    if isinstance(step, GiveUp):
        return Decision(run_id, attempt, "stop", step.reason, **base)  # type: ignore[arg-type]
    resume = resume_for(step.settings)
    unshared = _unshared(run_id, attempt, reports, root, resume)
    if unshared is not None:
        return unshared
    return Decision(
        run_id, attempt, "retry", step.reason, root.node, root.kind, step.settings, step.change, resume,
        step.predicted_need_bytes,
    )  # fmt: skip


def peer_signal(decision: Decision) -> str:
    """The signal that interrupted the node a `stop` decision names (its report's `safe-sft received SIGINT`,
    as `decide` quotes it), for the other nodes to exit as it did; SIGTERM where the decision does not say."""
    found = re.search(r"received (SIG[A-Z]+)", decision.reason)
    return found[1] if found else "SIGTERM"


def _past_an_unloadable_checkpoint(
    run_id: str,
    attempt: int,
    reports: Sequence[NodeReport],
    root: NodeReport,
    settings: Settings,
    resume_for: Callable[[Settings], Resume | None],
) -> Decision:
    """A retry with the same settings after a node died loading the checkpoint: `resume_for` (node 0's
    supervisor has set that checkpoint aside) names the newest complete one before it, or none."""
    resume = resume_for(settings)
    unshared = _unshared(run_id, attempt, reports, root, resume)
    if unshared is not None:
        return unshared
    nodes = [r.node for r in reports if r.load_failed]
    where = (
        f"resume from {resume.checkpoint} (step {resume.step}), the newest complete one before it"
        if resume
        else "no complete checkpoint is before it: from step 0"
    )
    reason = f"the checkpoint the attempt resumed from failed to load on node(s) {nodes}; {where}"
    return Decision(run_id, attempt, "retry", reason, root.node, root.kind, settings, "no change", resume)


def _unshared(
    run_id: str, attempt: int, reports: Sequence[NodeReport], root: NodeReport, resume: Resume | None
) -> Decision | None:
    """A stop when a node does not see the checkpoint to resume from."""
    # the user's own start is checked complete on every node before its first attempt
    blind = [
        r.node for r in reports if resume is not None and not resume.start and resume.checkpoint not in r.checkpoints
    ]
    if not blind:
        return None
    return Decision(
        run_id, attempt, "stop",
        f"node(s) {blind} do not see checkpoint {resume.checkpoint if resume else ''}: the output dir must be "
        "on a filesystem all nodes share", root.node, root.kind,
    )  # fmt: skip


def worst(memory: Memory | None, reports: Sequence[NodeReport]) -> Memory | None:
    """`memory` with the worst node's figures: the least GPU room and the highest measured peak."""
    if memory is None:
        return None
    rooms = [r.capacity_bytes for r in reports if r.capacity_bytes] + [memory.capacity_bytes or 0]
    peaks = [r.peak_bytes or 0 for r in reports] + [memory.peak_bytes or 0]
    return replace(memory, capacity_bytes=min(x for x in rooms if x) if any(rooms) else None,
                   peak_bytes=max(peaks) or None)  # fmt: skip


# ---- encoding and validation -------------------------------------------------------------------------


def encode(message: NodeReport | Decision) -> str:
    data = asdict(message)
    data["protocol"] = PROTOCOL
    data["type"] = type(message).__name__
    return json.dumps(data, sort_keys=True)


def _load(text: str, kind: str, run_id: str, attempt: int) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        raise ProtocolError(
            f"a {kind} message is not JSON: {text[:80]!r}", "check that only safe-sft uses this port"
        ) from None
    if not isinstance(data, dict) or data.get("type") != kind or data.get("protocol") != PROTOCOL:
        raise ProtocolError(f"not a {kind} message of protocol {PROTOCOL}: {text[:80]!r}", SAME_VERSION)
    if data.get("run_id") != run_id:
        raise ProtocolError(
            f"a {kind} message from another run ({data.get('run_id')!r}, this is {run_id!r})",
            "give every job its own MASTER_PORT or --coord-port",
        )
    if data.get("attempt") != attempt:
        raise ProtocolError(
            f"a {kind} message for attempt {data.get('attempt')!r}, expected {attempt}", "restart all nodes"
        )
    return data


def _check_keys(data: Mapping[str, Any], allowed: set[str], what: str) -> None:
    extra = set(data) - allowed
    if extra:
        raise ProtocolError(f"{what} has unknown fields {sorted(extra)}", SAME_VERSION)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ProtocolError(f"{what} is not a short text", SAME_VERSION)
    return value


def _int(value: Any, what: str, low: int, high: int, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f"{what}={value!r} is out of bounds [{low}, {high}]", SAME_VERSION)
    return value


def decode_report(text: str, run_id: str, attempt: int, nnodes: int) -> NodeReport:
    data = _load(text, "NodeReport", run_id, attempt)
    _check_keys(data, {f.name for f in fields(NodeReport)} | {"protocol", "type"}, "a node report")
    kind = _kind(data.get("kind"))
    evidence = data.get("evidence") or []
    checkpoints = data.get("checkpoints") or []
    if not isinstance(evidence, list) or len(evidence) > MAX_EVIDENCE or not isinstance(checkpoints, list):
        raise ProtocolError("a node report's evidence or checkpoints are malformed", SAME_VERSION)
    return NodeReport(
        run_id=run_id,
        attempt=attempt,
        node=_int(data.get("node"), "node", 0, nnodes - 1) or 0,
        kind=kind,
        exit_code=_int(data.get("exit_code"), "exit_code", -255, 255, optional=True),
        evidence=tuple(_text(e, "evidence") for e in evidence),
        checkpoints=tuple(_relative_path(c) for c in checkpoints),
        capacity_bytes=_int(data.get("capacity_bytes"), "capacity_bytes", 1, 1 << 50, optional=True),
        peak_bytes=_int(data.get("peak_bytes"), "peak_bytes", 1, 1 << 50, optional=True),
        load_failed=_bool(data.get("load_failed", False), "load_failed"),
    )


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(f"{what}={value!r} is not a boolean", SAME_VERSION)
    return value


def _kind(value: Any) -> str | None:
    if value is not None and value not in {k.value for k in FailureKind}:
        raise ProtocolError(f"unknown failure kind {value!r}", SAME_VERSION)
    return None if value is None else str(value)


def _relative_path(value: Any) -> str:
    path = _text(value, "a checkpoint path")
    parts = path.split("/")
    if path.startswith("/") or ".." in parts or not parts[-1].startswith("checkpoint-"):
        raise ProtocolError(
            f"checkpoint path {path!r} is not a checkpoint inside the output dir", "check the output dir"
        )
    return path


def _settings(data: Any) -> Settings:
    if not isinstance(data, dict):
        raise ProtocolError("a decision's settings are not an object", SAME_VERSION)
    names = {f.name for f in fields(Settings)}
    _check_keys(data, names, "the settings")
    if set(data) != names:
        raise ProtocolError(f"the settings lack {sorted(names - set(data))}", SAME_VERSION)
    for name, (low, high) in _BOUNDS.items():
        _int(data[name], name, low, high, optional=name in ("vision_budget", "max_length"))
    for name in ("gradient_checkpointing", "save_only_model", "dataloader_pin_memory", "offload_pin_memory",
                 "nccl_p2p_disable", "allow_shorter_max_length", "device_map"):  # fmt: skip
        _bool(data[name], name)
    if data["vision_env"] not in (None, *VISION_ENVS):
        raise ProtocolError(f"vision_env {data['vision_env']!r} is not an image budget variable", SAME_VERSION)
    deepspeed = data["deepspeed"]
    if deepspeed is not None and deepspeed not in RUNG_NAMES:
        raise ProtocolError(f"deepspeed {deepspeed!r} is not a known ZeRO strategy", SAME_VERSION)
    budgets = data["max_memory"]  # a device_map run's budgets (JSON has lists, Settings tuples)
    if not isinstance(budgets, list) or len(budgets) > 1024:
        raise ProtocolError(f"max_memory {budgets!r} is not a list of byte budgets", SAME_VERSION)
    for budget in budgets:
        _int(budget, "max_memory", 0, 1 << 50)
    return Settings(**{**data, "max_memory": tuple(budgets)})


def decode_decision(text: str, run_id: str, attempt: int) -> Decision:
    data = _load(text, "Decision", run_id, attempt)
    _check_keys(data, {f.name for f in fields(Decision)} | {"protocol", "type"}, "a decision")
    action = data.get("action")
    if action not in ACTIONS:
        raise ProtocolError(f"decision action {action!r} is not one of {ACTIONS}", SAME_VERSION)
    settings = _settings(data["settings"]) if data.get("settings") is not None else None
    if action == "retry" and settings is None:
        raise ProtocolError("a retry decision without settings", SAME_VERSION)
    resume = None
    if data.get("resume") is not None:
        raw = data["resume"]
        if not isinstance(raw, dict) or set(raw) != {"checkpoint", "step", "weights_only", "why_weights_only", "start"}:
            raise ProtocolError("a decision's resume point is malformed", SAME_VERSION)
        start = _bool(raw["start"], "start")  # the user's own start: every node's own argument names it
        if start and raw["checkpoint"] != "":
            raise ProtocolError("a decision names a path for the user's own checkpoint", SAME_VERSION)
        resume = Resume(
            "" if start else _relative_path(raw["checkpoint"]),
            _int(raw["step"], "step", 0, 1 << 40) or 0,
            _bool(raw["weights_only"], "weights_only"),
            _text(raw["why_weights_only"], "why_weights_only"),
            start,
        )
    kind = _kind(data.get("root_kind"))
    return Decision(
        run_id=run_id,
        attempt=attempt,
        action=action,
        reason=_text(data.get("reason", ""), "reason"),
        root_node=_int(data.get("root_node"), "root_node", 0, 1 << 16, optional=True),
        root_kind=kind,
        settings=settings,
        change=_text(data["change"], "change") if data.get("change") is not None else None,
        resume=resume,
        predicted_need_bytes=_int(data.get("predicted_need_bytes"), "predicted_need_bytes", 1, 1 << 50, optional=True),
    )


def failure_of(report: NodeReport) -> Failure | None:
    if report.kind is None:
        return None
    return Failure(FailureKind(report.kind), report.evidence, exit_code=report.exit_code)
