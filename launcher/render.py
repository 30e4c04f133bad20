"""Show a Plan: as text for people, and as JSON in the documented schema (docs/plan-json.md)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from launcher.masking import mask_argv, mask_env
from launcher.model import DataLengths, DeviceMapLayout, GlobalBatch, ModelFacts, Plan, SampleStatus, Sourced, Topology
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


def data_lengths_to_json(lengths: DataLengths | None) -> dict[str, Any] | None:
    if lengths is None:
        return None
    return {
        "estimated_from": "characters",
        "complete": lengths.complete,
        "datasets": [
            {
                "dataset": d.spec,
                "status": d.status.value,
                "path": d.path,
                "take": d.take,
                "rows_sampled": len(d.rows) + d.too_long,
                "rows_malformed": d.malformed,
                "rows_in_file": d.rows_in_file,
                "rows_in_file_exact": d.rows_in_file_exact,
                "bytes_read": d.bytes_read,
                "note": d.note,
            }
            for d in lengths.datasets
        ],
        "rows_sampled": lengths.rows_sampled,
        "rows_malformed": lengths.rows_malformed,
        "max_length": lengths.max_length,
        "truncation_strategy": lengths.truncation_strategy,
        "max_length_assumed": lengths.max_length_assumed,
        "longer_than_max_length": lengths.longer_than_max_length,
        "tokens_per_sample": {f"p{p}" if p < 100 else "max": n for p, n in lengths.tokens_per_sample} or None,
        "image_tokens": lengths.image_tokens,
        "default_system_tokens": lengths.default_system_tokens,
        "micro_batch": {
            "mode": lengths.mode,
            "size": lengths.micro_batch,
            "percentile": lengths.percentile,
            "tokens": lengths.batch_tokens,
            "longest_sample": lengths.batch_longest,
            "images": lengths.batch_images,
            "label_tokens": lengths.batch_label_tokens,
            "worst_case_tokens": lengths.worst_case_tokens,
        },
        "text": render_data_lengths(lengths),
    }


_MODE_TEXT = {
    "padded": "padded to its longest sample",
    "padding_free": "padding-free: its samples' sum",
    "packing": "packing: every sample max_length",
}


def render_data_lengths(lengths: DataLengths) -> list[str]:
    """The Data section's lines: what was sampled, tokens per sample, one micro-batch at the percentile."""
    lines = []
    for d in lengths.datasets:
        if d.status is SampleStatus.SAMPLED:
            rows = len(d.rows) + d.too_long
            total = "" if d.rows_in_file is None else f" of {'' if d.rows_in_file_exact else '~'}{d.rows_in_file:,}"
            bad = f", {d.malformed} malformed skipped" if d.malformed else ""
            long = f", {d.too_long} over the read limit counted as max_length" if d.too_long else ""
            lines.append(f"{d.spec}: {rows:,}{total} rows sampled{bad}{long} ({d.note})")
        else:
            lines.append(f"{d.spec}: {d.note}")
    if lengths.tokens_per_sample:
        shown = ", ".join(f"{'p' + str(p) if p < 100 else 'max'} {n:,}" for p, n in lengths.tokens_per_sample)
        lines.append(f"tokens per sample (estimated from characters, no tokenizer): {shown}")
        if lengths.default_system_tokens:
            lines.append(
                f"each row without a system prompt of its own: {lengths.default_system_tokens:,} tokens more for "
                "the one swift writes into it (--system, else the template's default)"
            )
        if lengths.longer_than_max_length and lengths.max_length_assumed:
            lines.append(
                f"{lengths.longer_than_max_length:,} sampled rows longer than the {lengths.max_length:,} tokens "
                "assumed for the unset --max_length: counted at that length (swift's own limit is the model's)"
            )
        elif lengths.longer_than_max_length:
            fate = {"delete": "swift drops them", "split": "swift splits them"}.get(
                lengths.truncation_strategy, "swift truncates them"
            )
            lines.append(
                f"{lengths.longer_than_max_length:,} sampled rows longer than max_length {lengths.max_length:,}: "
                f"{fate} (--truncation_strategy {lengths.truncation_strategy})"
            )
    if lengths.batch_tokens is not None:
        images = f", {lengths.batch_images} images" if lengths.batch_images else ""
        lines.append(
            f"one micro-batch of {lengths.micro_batch} ({_MODE_TEXT[lengths.mode]}): p{lengths.percentile} "
            f"{lengths.batch_tokens:,} tokens{images}; worst case {lengths.worst_case_tokens:,} "
            f"({lengths.micro_batch} x max_length {lengths.max_length:,})"
        )
    if lengths.batch_label_tokens is not None:
        lines.append(
            f"of them the assistant's (labels: logits with use_logits_to_keep): p{lengths.percentile} "
            f"{lengths.batch_label_tokens:,} tokens"
        )
    if not lengths.complete:
        lines.append("memory estimated at the max_length worst case only: not every dataset was sampled")
    return lines


def plan_to_json(
    plan: Plan, model: ModelFacts | None, current_env: Mapping[str, str], memlock: MemlockStatus | None
) -> dict[str, Any]:
    topo = plan.topology
    return {
        "schema": PLAN_SCHEMA,
        "backend": plan.backend,
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
                "gpu_need_at_data_bytes": e.gpu_need_at_data_bytes,
                "fits_at_data": e.fits_at_data if e.gpu_need_at_data_bytes is not None else None,
                "parts_at_data": e.parts_at_data,
                "levers": [{"change": text, "saves_bytes": saved} for text, saved in e.levers],
            }
            for e in plan.estimates
        },
        "device_map": device_map_to_json(plan.device_map),
        "max_memory_arg": plan.max_memory_arg,
        "batch": batch_to_json(plan.batch),
        "data_lengths": data_lengths_to_json(plan.data_lengths),
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
            "fix": memlock.fix,
        },
        "warnings": list(plan.warnings),
        "notes": list(plan.notes),
    }


def _count_source(model: ModelFacts) -> str:
    if model.source == "safetensors" and model.total_params:
        return f"{model.total_params:,} exact, from safetensors headers"
    if model.source == "weights_size":
        return f"from the .bin weights' bytes at {model.dtype}"
    return f"from {model.source}"


def render_plan(
    plan: Plan, model: ModelFacts | None, current_env: Mapping[str, str], memlock: MemlockStatus | None
) -> str:
    topo = plan.topology
    lines = [] if plan.backend == "swift" else [f"Backend: {plan.backend}", ""]
    lines.append("Topology")
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
        lines.append(f"  {model.name}: {fmt_params(model.total_params)} parameters ({_count_source(model)})")
        if model.largest_layer_params:
            lines.append(f"  largest layer {fmt_params(model.largest_layer_params)}, dtype {model.dtype or 'unknown'}")

    if plan.data_lengths is not None:
        lines += ["", "Data"] + [f"  {line}" for line in render_data_lengths(plan.data_lengths)]

    if plan.estimates:
        at_data = any(e.gpu_need_at_data_bytes is not None for e in plan.estimates)
        lines += ["", "Memory (per GPU; host RAM per node)"]
        data_head = f"{'at data':>12}" if at_data else ""
        lines.append(
            f"  {'strategy':<15}{'GPU need':>12}{data_head}{'GPU free':>12}{'host need':>12}{'host free':>12}  fits"
        )
        for e in plan.estimates:
            data_cell = f"{fmt_bytes(e.gpu_need_at_data_bytes):>12}" if at_data else ""
            fits = "yes" if e.fits else "at data" if at_data and e.fits_at_data else "no"
            lines.append(
                f"  {e.strategy.value:<15}{fmt_bytes(e.gpu_need_bytes):>12}{data_cell}{fmt_bytes(e.gpu_free_bytes):>12}"
                f"{fmt_bytes(e.cpu_need_bytes):>12}{fmt_bytes(e.cpu_free_bytes):>12}  {fits}"
            )
        if at_data and plan.data_lengths is not None:
            lines.append(
                f"  GPU need: at the max_length worst case; at data: at the data's p{plan.data_lengths.percentile} "
                "micro-batch (lengths estimated from characters)"
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
        pins = plan.uses_gpus or "offload" in (plan.strategy or "")
        if memlock.problem and not pins:  # gloo and no offload: nothing in this run locks host memory
            lines.append(f"  {memlock.problem} (not by this run: CPU training without DeepSpeed offload pins none)")
        elif memlock.problem:
            lines += [f"  {memlock.problem}", f"  fix: {memlock.fix}"]

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
    "gpu_step_gradients",
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
    """`plan --explain-memory`: every part of every strategy's estimate as one table, whose measured layer
    the activations are counted as, and the largest levers."""
    if not plan.estimates:
        return "Memory: no estimate (model size unknown, or no GPU)"
    names = [e.strategy.value for e in plan.estimates]
    header = [f"{name}{' *' if name == plan.estimated_as else ''}" for name in names]
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
    lengths = plan.data_lengths
    if lengths is not None and any(e.parts_at_data for e in plan.estimates):
        lines += [
            "",
            f"At the data's lengths (p{lengths.percentile} micro-batch: {lengths.batch_tokens:,} tokens, "
            f"worst case {lengths.worst_case_tokens:,}; estimated from characters): the parts that change",
        ]
        for key in gpu_keys:
            values = [(e.parts_at_data or {}).get(key) for e in plan.estimates]
            if values != [e.parts.get(key) for e in plan.estimates]:
                lines.append(row(key.removeprefix("gpu_"), values))
        lines.append(row("= need per GPU at data", [e.gpu_need_at_data_bytes for e in plan.estimates]))
    if plan.activations:
        lines += ["", *(f"  {line}" for line in plan.activations)]
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
