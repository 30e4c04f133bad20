"""Show a Plan: as text for people, and as JSON in the documented schema (docs/plan-json.md)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from launcher.masking import mask_argv, mask_env
from launcher.model import DeviceMapLayout, GlobalBatch, ModelFacts, Plan, Sourced, Topology
from launcher.plan.batch import describe as describe_batch
from launcher.run.memlock import MemlockStatus
from launcher.units import fmt_bytes, fmt_params

PLAN_SCHEMA = 1


def env_diff(plan: Plan, current: Mapping[str, str]) -> dict[str, Any]:
    added, changed, unchanged = {}, {}, []
    for setting in plan.env:
        old = current.get(setting.name)
        if old is None:
            added[setting.name] = mask_env(setting.name, setting.value)
        elif old != setting.value:
            changed[setting.name] = {"old": mask_env(setting.name, old), "new": mask_env(setting.name, setting.value)}
        else:
            unchanged.append(setting.name)
    return {"added": added, "changed": changed, "unchanged": unchanged}


def topology_rows(topo: Topology) -> tuple[tuple[str, Sourced[Any] | None], ...]:
    """The launch variables in the order people read them (lower-case, as in the JSON schema)."""
    return (
        ("nproc_per_node", topo.nproc_per_node),
        ("nnodes", topo.nnodes),
        ("node_rank", topo.node_rank),
        ("master_addr", topo.master_addr),
        ("master_port", topo.master_port),
        ("cuda_visible_devices", topo.visible_devices),
    )


def _rlimit(value: int | None) -> int | str:
    return "unlimited" if value is None else value


def batch_to_json(batch: GlobalBatch | None) -> dict[str, Any] | None:
    if batch is None:
        return None
    return {
        "per_device_train_batch_size": batch.micro_batch,
        "gradient_accumulation_steps": batch.grad_accum,
        "world_size": batch.world_size,
        "global_batch": batch.global_batch,
        "swift_world_size": batch.swift_world_size,
        "swift_gradient_accumulation_steps": batch.swift_accum,
        "swift_global_batch": batch.swift_global_batch,
        "kept": batch.kept,
        "text": describe_batch(batch),
    }


def device_map_to_json(layout: DeviceMapLayout | None) -> dict[str, Any] | None:
    """The device_map split (launcher.plan.device_map), per GPU in CUDA_VISIBLE_DEVICES order."""
    if layout is None:
        return None
    return {
        "layers": list(layout.layers),
        "embeddings_gpu": layout.first_gpu,
        "head_gpu": layout.head_gpu,
        "max_memory": list(layout.max_memory),
        "need_bytes": list(layout.need_bytes),
        "free_bytes": list(layout.free_bytes),
    }


def plan_to_json(
    plan: Plan, model: ModelFacts | None, current_env: Mapping[str, str], memlock: MemlockStatus | None
) -> dict[str, Any]:
    topo = plan.topology
    return {
        "schema": PLAN_SCHEMA,
        "strategy": plan.strategy,
        "strategy_reason": plan.strategy_reason,
        "fits": plan.fits,
        "deepspeed_arg": plan.deepspeed_arg,
        "ddp_timeout_arg": plan.ddp_timeout_arg,
        "topology": {
            name: {"value": None, "source": "unchanged", "note": "left as it is"}
            if value is None
            else {"value": value.value, "source": value.source.value, "note": value.note}
            for name, value in topology_rows(topo)
        },
        "gpus": [
            {"index": g.index, "name": g.name, "total_bytes": g.total_bytes, "free_bytes": g.free_bytes}
            for g in topo.gpus
        ],
        "model": None
        if model is None
        else {
            "name": model.name,
            "total_params": model.total_params,
            "source": model.source,
            "largest_layer_params": model.largest_layer_params,
            "dtype": model.dtype,
            "is_multimodal": model.is_multimodal,
        },
        "estimates": {
            e.strategy.value: {
                "gpu_need_bytes": e.gpu_need_bytes,
                "gpu_fixed_bytes": e.gpu_fixed_bytes,
                "gpu_free_bytes": e.gpu_free_bytes,
                "cpu_need_bytes": e.cpu_need_bytes,
                "cpu_free_bytes": e.cpu_free_bytes,
                "fits": e.fits,
                "fixed_fits": e.fixed_fits,
                "parts": e.parts,
                "levers": [{"change": text, "saves_bytes": saved} for text, saved in e.levers],
            }
            for e in plan.estimates
        },
        "device_map": device_map_to_json(plan.device_map),
        "max_memory_arg": plan.max_memory_arg,
        "batch": batch_to_json(plan.batch),
        "env": {s.name: mask_env(s.name, s.value) for s in plan.env},
        "env_reasons": {s.name: s.reason for s in plan.env},
        "env_diff": env_diff(plan, current_env),
        "command": mask_argv(plan.command),
        "assumed_machine": plan.assumed_machine,
        "memlock": None
        if memlock is None
        else {
            "soft_before": _rlimit(memlock.before.soft),
            "soft": _rlimit(memlock.after.soft),
            "hard": _rlimit(memlock.after.hard),
            "problem": memlock.problem,
        },
        "warnings": list(plan.warnings),
        "notes": list(plan.notes),
    }


def render_plan(
    plan: Plan, model: ModelFacts | None, current_env: Mapping[str, str], memlock: MemlockStatus | None
) -> str:
    topo = plan.topology
    lines = ["Topology"]
    rows = [
        (name.upper(), "(as it is)" if value is None else str(value.value), value)
        for name, value in topology_rows(topo)
    ]
    width = max(18, *(len(shown) + 2 for _, shown, _ in rows))  # a long value never runs into its source
    for name, shown, value in rows:
        if value is None:
            lines.append(f"  {name:<22}{shown:<{width}}not used for CPU training")
            continue
        note = f": {value.note}" if value.note else ""
        lines.append(f"  {name:<22}{shown:<{width}}{value.source.value}{note}")
    for gpu in topo.gpus:
        lines.append(f"  GPU {gpu.index}: {gpu.name}, {fmt_bytes(gpu.free_bytes)} free of {fmt_bytes(gpu.total_bytes)}")

    if model is not None:
        lines += ["", "Model"]
        lines.append(
            f"  {model.name}: {fmt_params(model.total_params)} parameters"
            + (
                f" ({model.total_params:,} exact, from safetensors headers)"
                if model.source == "safetensors" and model.total_params
                else f" (from {model.source})"
            )
        )
        if model.largest_layer_params:
            lines.append(f"  largest layer {fmt_params(model.largest_layer_params)}, dtype {model.dtype or 'unknown'}")

    if plan.estimates:
        lines += ["", "Memory (per GPU; host RAM per node)"]
        lines.append(f"  {'strategy':<15}{'GPU need':>12}{'GPU free':>12}{'host need':>12}{'host free':>12}  fits")
        for e in plan.estimates:
            lines.append(
                f"  {e.strategy.value:<15}{fmt_bytes(e.gpu_need_bytes):>12}{fmt_bytes(e.gpu_free_bytes):>12}"
                f"{fmt_bytes(e.cpu_need_bytes):>12}{fmt_bytes(e.cpu_free_bytes):>12}  {'yes' if e.fits else 'no'}"
            )
    lines += ["", f"Strategy: {plan.strategy or 'none'}", f"  {plan.strategy_reason}"]
    if plan.batch is not None:
        lines += ["", "Batch", f"  {describe_batch(plan.batch)}"]

    diff = env_diff(plan, current_env)
    reasons = {s.name: s.reason for s in plan.env}
    lines += ["", "Environment (against yours)"]
    for name, value in diff["added"].items():
        lines.append(f"  + {name}={value}  ({reasons[name]})")
    for name, change in diff["changed"].items():
        lines.append(f"  ~ {name}={change['new']} (was {change['old']})  ({reasons[name]})")
    for name in diff["unchanged"]:
        lines.append(f"  = {name} unchanged")

    if memlock is not None:
        soft = "unlimited" if memlock.after.soft is None else fmt_bytes(memlock.after.soft)
        where = " (of this machine; the assumed machine's is unknown)" if plan.assumed_machine else ""
        lines += ["", f"memlock{where}: soft limit {soft}" + (" (raised)" if memlock.raised else "")]
        if memlock.problem:
            lines.append(f"  {memlock.problem}")

    lines += ["", "Command", "  " + shlex.join(mask_argv(plan.command))]
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    for note in plan.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


PART_ORDER = (
    "gpu_weights",
    "gpu_zero3_live_params",
    "gpu_zero3_persistent",
    "gpu_gradients",
    "gpu_optimizer",
    "gpu_zero_buckets",
    "gpu_activations",
    "gpu_attention_scores",
    "gpu_logits",
    "gpu_vision",
    "gpu_moe_experts",
    "gpu_sequence_parallel",
    "gpu_cuda_context",
    "gpu_fragmentation_margin",
    "cpu_model_states",
    "cpu_processes",
)


def render_memory(plan: Plan) -> str:
    """`plan --explain-memory`: every part of every strategy's estimate as one table, and the largest levers."""
    if not plan.estimates:
        return "Memory: no estimate (model size unknown, or no GPU)"
    names = [e.strategy.value for e in plan.estimates]
    header = [f"{name}{' *' if name == plan.strategy else ''}" for name in names]
    keys: list[str] = []
    for est in plan.estimates:
        keys.extend(k for k in est.parts if k not in keys)
    keys.sort(key=lambda k: PART_ORDER.index(k) if k in PART_ORDER else len(PART_ORDER))
    gpu_keys = [k for k in keys if k.startswith("gpu_")]
    cpu_keys = [k for k in keys if not k.startswith("gpu_")]
    width = max(len(k) for k in keys) + 2
    lines = [
        "Memory per GPU, by part (* the chosen strategy)",
        "  " + " " * width + "".join(f"{h:>16}" for h in header),
    ]

    def row(label: str, values: list[int | None]) -> str:
        cells = "".join(f"{'-' if v is None else fmt_bytes(v):>16}" for v in values)
        return f"  {label:<{width}}{cells}"

    for key in gpu_keys:
        lines.append(row(key.removeprefix("gpu_"), [e.parts.get(key) for e in plan.estimates]))
    lines.append(row("= need per GPU", [e.gpu_need_bytes for e in plan.estimates]))
    lines.append(row("  of it fixed", [e.gpu_fixed_bytes for e in plan.estimates]))
    lines.append(row("  free per GPU", [e.gpu_free_bytes for e in plan.estimates]))
    lines += ["", "Host RAM per node, by part"]
    for key in cpu_keys:
        lines.append(row(key.removeprefix("cpu_"), [e.parts.get(key) for e in plan.estimates]))
    lines.append(row("= need per node", [e.cpu_need_bytes for e in plan.estimates]))
    lines.append(row("  available", [e.cpu_free_bytes for e in plan.estimates]))
    lines += ["", "Largest levers (what one change saves per GPU)"]
    for est in plan.estimates:
        fits = "fits" if est.fits else "does not fit"
        if est.levers:
            text, saved = est.levers[0]
            others = ", ".join(f"{t} {fmt_bytes(s)}" for t, s in est.levers[1:3])
            more = f" (then: {others})" if others else ""
            lines.append(f"  {est.strategy.value} ({fits}): {text} saves {fmt_bytes(saved)} per GPU{more}")
        else:
            lines.append(f"  {est.strategy.value} ({fits}): no single setting change saves memory")
    return "\n".join(lines)
