"""The run report: report.json (schema 1) after every attempt, and the closing summary on the terminal.

The summary puts the root cause first (kind, rank, exit code, the proving line), then the ladder that was
tried, then where the report is. Environment values whose names look secret are masked.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from launcher.plan.estimate import corrected
from launcher.render import mask
from launcher.run.lost_work import Lost, gpu_hours, lost_work
from launcher.run.records import AttemptRecord, RunResult

REPORT_SCHEMA = 1


def attempt_json(record: AttemptRecord, lost: Lost | None = None) -> dict[str, Any]:
    s = record.settings
    failure = record.failure
    return {
        "number": record.number,
        "started": record.started,
        "ended": record.ended,
        "duration_s": record.duration_s,
        "settings": {
            "per_device_train_batch_size": s.micro_batch,
            "gradient_accumulation_steps": s.grad_accum,
            "world_size": s.world_size,
            "global_batch": s.global_batch,
            "deepspeed": s.deepspeed,
            "gradient_checkpointing": s.gradient_checkpointing,
            "save_only_model": s.save_only_model,
            "dataloader_num_workers": s.dataloader_num_workers,
            "pin_memory": s.pin_memory,
            "max_pixels": s.max_pixels,
            "max_length": s.max_length,
        },
        "change": None if record.change is None else {"what": record.change, "why": record.change_reason},
        "predicted_need_bytes": record.predicted_need_bytes,  # the guided ladder's per-GPU prediction
        "resumed_from": None
        if record.resumed_from is None
        else {
            **asdict(record.resumed_from),
            "optimizer_state_reset": record.resumed_from.weights_only,
        },
        "skipped_incomplete_checkpoints": record.skipped_incomplete,
        "deepspeed_config_written": record.deepspeed_config_written,
        "env_set": {name: mask(name, value) for name, value in record.env_set.items()},
        "command": record.command,
        "exit_code": record.exit_code,
        "failure": None if failure is None else failure.to_json(),
        "last_step": record.last_step,
        "step_seen_s": {str(k): v for k, v in sorted(record.step_seen_s.items())},
        "lost": None
        if lost is None
        else {
            "steps": lost.steps,
            "seconds": lost.seconds,
            "reload_seconds": lost.reload_seconds,
            "back_to_step": lost.kept_step,
        },
        "log": record.log_path,
        "memory": None if record.memory is None else record.memory.to_json(),
        "estimate": estimate_json(record),
        "diagnostics": record.diagnostics,
        "decision": record.decision,
    }


def estimate_json(record: AttemptRecord) -> dict[str, Any] | None:
    """The estimate for the attempt's settings beside its measured per-GPU peak (after an OOM: the peak when
    it died), and measured / estimate: the correction a later estimate for this run can apply."""
    est = record.estimate
    if est is None:
        return None
    peak = max(record.memory.gpu_peak.values(), default=0) if record.memory is not None else 0
    oom = record.failure is not None and record.failure.kind.value.startswith("cuda_oom")
    return {
        "strategy": est.strategy.value,
        "gpu_need_bytes": est.gpu_need_bytes,
        "parts": {k: v for k, v in est.parts.items() if k.startswith("gpu_")},
        "measured_peak_bytes": peak or None,
        "measured_over_estimate": round(peak / est.gpu_need_bytes, 3) if peak and est.gpu_need_bytes else None,
        "correction": round(record.estimate_correction, 3),
        "corrected_gpu_need_bytes": corrected(est, record.estimate_correction).gpu_need_bytes,
        "oom": oom,  # died of a CUDA OOM: the peak is where it died
    }


def report_json(attempts: list[AttemptRecord], result: RunResult | None, argv: list[str]) -> dict[str, Any]:
    root = next((a.failure for a in attempts if a.failure is not None), None)
    lost = lost_work(attempts)
    by_attempt = {x.attempt: x for x in lost}
    return {
        "schema": REPORT_SCHEMA,
        "outcome": "running" if result is None else result.outcome,
        "exit_code": None if result is None else result.exit_code,
        "give_up_reason": None if result is None else result.give_up_reason,
        "safe_sft_argv": argv,
        "root_cause": None if root is None else {"kind": root.kind.value, "evidence": list(root.evidence)},
        "lost_work": lost_json(lost, attempts),
        "attempts": [attempt_json(a, by_attempt.get(a.number)) for a in attempts],
    }


def lost_json(lost: list[Lost], attempts: list[AttemptRecord]) -> dict[str, Any]:
    """The failures' lost steps and seconds summed; GPU-hours where the attempts used GPUs."""
    used = any(a.memory is not None and a.memory.gpu_peak for a in attempts)
    return {
        "failures": len(lost),
        "steps": sum(x.steps for x in lost),
        "seconds": round(sum(x.seconds for x in lost), 3),
        "gpu_hours": gpu_hours(lost, attempts, used),
    }


def write_report(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a reader never sees half a report."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def summary(result: RunResult, report_path: Path) -> str:
    attempts = result.attempts
    lines = [f"safe-sft: {result.outcome} after {len(attempts)} attempt(s)"]
    failed = [a for a in attempts if a.failure is not None]
    if failed:
        first = failed[0]
        assert first.failure is not None
        f = first.failure
        code = f", exit code {f.exit_code}" if f.exit_code is not None else ""
        lines.append(f"  root cause (attempt {first.number}): {f.headline()}{code}")
        for line in f.evidence[:3]:
            lines.append(f"    {line[:300]}")
        for line in first.diagnostics:
            lines.append(f"    {line}")
        agreed = first.decision
        if agreed and agreed.get("root_kind"):
            lines.append(f"  across the nodes (node 0's decision): {agreed['root_kind']} on node {agreed['root_node']}")
    ladder = [a for a in attempts if a.change or a.resumed_from]
    if ladder:
        lines.append("  ladder:")
        for a in ladder:
            what = a.change or "no change"
            resumed = ""
            if a.resumed_from:
                resumed = f"; resumed from step {a.resumed_from.step}"
                if a.resumed_from.weights_only:
                    resumed += " (weights only, optimizer state reset)"
            outcome = a.failure.kind.value if a.failure else "finished"
            lines.append(f"    attempt {a.number}: {what}{resumed} -> {outcome}")
    for a in attempts:
        imbalance = a.memory.imbalance() if a.memory else None
        if imbalance:
            lines.append(f"  attempt {a.number}: {imbalance}")
    lost = lost_json(lost_work(attempts), attempts)
    if lost["failures"]:
        hours = f", {lost['gpu_hours']:.2f} GPU-hours" if lost["gpu_hours"] is not None else ""
        lines.append(f"  lost to failures: {lost['steps']} steps, {lost['seconds']:.0f} s{hours}")
    if result.give_up_reason:
        lines.append(f"  gave up: {result.give_up_reason}")
    lines.append(f"  report: {report_path}")
    return "\n".join(lines)
