"""Show a Plan: as text for people, and as JSON in the documented schema (docs/plan-json.md)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from launcher.model import ModelFacts, Plan, Sourced, Topology
from launcher.run.memlock import MemlockStatus
from launcher.units import fmt_bytes, fmt_params

PLAN_SCHEMA = 1
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


def mask(name: str, value: str) -> str:
    return "****" if any(marker in name.upper() for marker in SECRET_MARKERS) else value


def env_diff(plan: Plan, current: Mapping[str, str]) -> dict[str, Any]:
    added, changed, unchanged = {}, {}, []
    for setting in plan.env:
        old = current.get(setting.name)
        if old is None:
            added[setting.name] = mask(setting.name, setting.value)
        elif old != setting.value:
            changed[setting.name] = {"old": mask(setting.name, old), "new": mask(setting.name, setting.value)}
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
                "gpu_free_bytes": e.gpu_free_bytes,
                "cpu_need_bytes": e.cpu_need_bytes,
                "cpu_free_bytes": e.cpu_free_bytes,
                "fits": e.fits,
                "parts": e.parts,
            }
            for e in plan.estimates
        },
        "env": {s.name: mask(s.name, s.value) for s in plan.env},
        "env_reasons": {s.name: s.reason for s in plan.env},
        "env_diff": env_diff(plan, current_env),
        "command": list(plan.command),
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
        lines += ["", f"memlock: soft limit {soft}" + (" (raised)" if memlock.raised else "")]
        if memlock.problem:
            lines.append(f"  {memlock.problem}")

    lines += ["", "Command", "  " + shlex.join(plan.command)]
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    for note in plan.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
