"""The run report: report.json (schema 1) after every attempt, and the closing summary on the terminal.

The summary puts the root cause first (kind, rank, exit code, the proving line), then the ladder that was
tried, then where the report is. Secrets are masked (launcher.masking) in the command lines, the
environment and the failure's evidence.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from launcher.masking import mask_argv, mask_env, mask_text
from launcher.model import Failure, FailureKind, GlobalBatch
from launcher.plan.batch import describe as describe_batch
from launcher.plan.degrade import offloads
from launcher.plan.estimate import corrected
from launcher.probe.disk import disk_free
from launcher.run.checkpoints import is_version_dir
from launcher.run.lost_work import Lost, gpu_hours, lost_line, lost_work
from launcher.run.records import REPORT_SCHEMA, AttemptRecord, RunResult, reason_line, set_aside_line
from launcher.units import fmt_bytes


def masked_failure(failure: Failure) -> dict[str, Any]:
    """A failure as report.json holds it: its evidence lines (log lines) with secrets hidden."""
    data = failure.to_json()
    data["evidence"] = [mask_text(line) for line in failure.evidence]
    return data


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
            "dataloader_pin_memory": s.dataloader_pin_memory,
            "offload_pin_memory": s.offload_pin_memory if offloads(s) else None,  # no offload: nothing pinned
            "per_device_eval_batch_size": s.eval_batch,
            "vision_env": s.vision_env,
            "vision_budget": s.vision_budget,
            "max_length": s.max_length,
            "device_map": s.device_map,
            "max_memory": list(s.max_memory) or None,
        },
        "change": None if record.change is None else {"what": record.change, "why": record.change_reason},
        "predicted_need_bytes": record.predicted_need_bytes,  # the guided ladder's per-GPU prediction
        "resumed_from": _resumed_json(record),
        "skipped_incomplete_checkpoints": list(record.skipped_incomplete),
        "skipped_why": record.skipped_incomplete,
        "set_aside_checkpoint": record.set_aside,
        "versioned_because": record.versioned_because,
        "deepspeed_config_written": record.deepspeed_config_written,
        "env_set": {name: mask_env(name, value) for name, value in record.env_set.items()},
        "command": mask_argv(record.command),
        "exit_code": record.exit_code,
        "failure": None if failure is None else masked_failure(failure),
        "failed_at_exit": None if record.failed_at_exit is None else masked_failure(record.failed_at_exit),
        "last_step": record.last_step,
        "run_dir": record.run_dir,
        "swift": None if record.resolved is None else record.resolved.to_json(),
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
        "gpu_evenness": evenness_json(record),
        "diagnostics": record.diagnostics,
        "decision": record.decision,
        "preempted": record.preempted,
    }


def _resumed_json(record: AttemptRecord) -> dict[str, Any] | None:
    """The resume point safe-sft chose, and what swift did with it (from swift's resolved arguments)."""
    resume = record.resumed_from
    if resume is None:
        return None
    reset = bool(record.optimizer_state_reset())
    why = resume.why_weights_only
    if reset and not resume.weights_only:
        why = "your arguments set resume_only_model true (a config file's value counts): swift loaded the weights only"
    return {
        **asdict(resume),
        "weights_only": reset,
        "why_weights_only": why,
        "optimizer_state_reset": reset,
        "reported_by_swift": record.resolved is not None,
        "started_over": record.started_over,  # why, where the trainer trained from step 0 instead
    }


def evenness_json(record: AttemptRecord) -> dict[str, Any] | None:
    """How even the GPUs' measured peaks were (NVML indices): the highest over the lowest, and which GPU was
    highest. What a device_map run's --max_memory is for (seed 001); None with fewer than two GPUs measured."""
    peaks = record.memory.gpu_peak if record.memory is not None else {}
    if len(peaks) < 2:
        return None
    high = max(peaks, key=lambda i: peaks[i])
    low = min(peaks, key=lambda i: peaks[i])
    return {
        "device_map": record.settings.device_map,
        "max_over_min": round(peaks[high] / peaks[low], 3) if peaks[low] else None,
        "highest_gpu": high,
        "highest_peak_bytes": peaks[high],
        "lowest_gpu": low,
        "lowest_peak_bytes": peaks[low],
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


def report_json(
    attempts: list[AttemptRecord],
    result: RunResult | None,
    argv: list[str],
    process: dict[str, Any] | None = None,
    batch: GlobalBatch | None = None,
    backend: str = "swift",
) -> dict[str, Any]:
    """`process`: the safe-sft process writing it (pid, host, started), so a reader can tell a killed run.
    `backend`: the trainer (launcher/backends)."""
    lost = lost_work(attempts)
    by_attempt = {x.attempt: x for x in lost}
    return {
        "schema": REPORT_SCHEMA,
        "backend": backend,
        "outcome": "running" if result is None else result.outcome,
        "process": process,
        "exit_code": None if result is None else result.exit_code,
        "give_up_reason": None if result is None else result.give_up_reason,
        "safe_sft_argv": mask_argv(argv),
        "global_batch": None
        if batch is None
        else {
            "value": batch.global_batch,
            "swift_global_batch": batch.swift_global_batch,
            "world_size": batch.world_size,
            "swift_world_size": batch.swift_world_size,
            "text": describe_batch(batch),
        },
        "root_cause": root_cause(attempts),
        "final_run_dir": attempts[-1].run_dir if attempts else None,
        # where --resume-latest goes on, for a run that did not finish
        "go_on_from": found[0]
        if result is not None
        and result.outcome in ("failed", "interrupted")
        and attempts
        and (found := go_on_from(attempts[-1])) is not None
        else None,
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


def write_report(path: Path, text: str) -> None:
    """Atomically: a reader never sees half a report."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# Disk space held beside report.json while a run is running: a run that fills the disk (its checkpoints)
# would leave no room to record how it ended, so the reserve is given up for the report's own writes. It
# holds twice the report (the new report is written beside the old one before it replaces it).
MIN_RESERVE_BYTES = 64 * 1024
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def reserve_path(path: Path) -> Path:
    return path.with_name("report.reserve")


def save_report(path: Path, data: dict[str, Any]) -> str | None:
    """write_report, or the one line that says why it could not be written (a full disk, say).

    While the run is running a reserve is kept beside the report (where the disk has room for it); a write
    that finds the disk full gives it up and tries once more, and the final report (any outcome but
    `running`) gives it up after writing. When nothing can be written the report from before stays as it
    was: a reader sees the last state that could be written.
    """
    text = json.dumps(data, indent=2) + "\n"
    reserve = reserve_path(path)
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # a records folder removed while the run lasted
            write_report(path, text)
        except OSError as err:
            if err.errno not in _DISK_FULL or not _give_up(reserve):
                raise
            write_report(path, text)
    except OSError as err:
        with contextlib.suppress(OSError):
            path.with_suffix(".json.tmp").unlink()
        free = fmt_bytes(disk_free(path.parent))
        return f"cannot write the report {path}: {err.strerror or err} ({path.parent} has {free} free)"
    finally:
        if data.get("outcome") != "running":
            _give_up(reserve)
        else:
            _hold(reserve, max(MIN_RESERVE_BYTES, 2 * len(text.encode())))
    return None


def _hold(reserve: Path, size: int) -> None:
    """Keep `size` bytes in the reserve; best effort: a disk too full for it runs without one."""
    try:
        if reserve.stat().st_size >= size:
            return
    except OSError:
        pass
    with contextlib.suppress(OSError):  # what could be written still holds that much
        reserve.write_bytes(bytes(size))


def _give_up(reserve: Path) -> bool:
    """Free the reserve; whether there was one."""
    try:
        reserve.unlink()
    except OSError:
        return False
    return True


# the weights a trainer saves at its output dir's root at the end (transformers' save_model: a full model,
# sharded or not, or a PEFT adapter)
FINAL_MODEL_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
    "adapter_model.safetensors", "adapter_model.bin",
)  # fmt: skip


def earlier_model(output_dir: Path) -> str | None:
    """The final-model file an earlier run left at `output_dir`'s root, where this run's went to a versioned
    dir below it: whatever loads `output_dir` (from_pretrained, an export, an eval script) gets that one."""
    for name in FINAL_MODEL_FILES:
        with contextlib.suppress(OSError):
            if (output_dir / name).is_file():
                return name
    return None


def went_on_from(attempt: AttemptRecord) -> str:
    """Where an attempt's training went on from, for the summary: its checkpoint's step, or step 0."""
    resumed = attempt.resumed_from
    if resumed is None:
        return "from step 0 (no complete checkpoint before it)" if attempt.number > 1 else "from step 0"
    if attempt.started_over:
        return f"told to resume from step {resumed.step}, trained from step 0"
    weights_only = " (weights only: the optimizer and the learning-rate schedule started over)"
    return f"resumed from step {resumed.step}" + (weights_only if attempt.optimizer_state_reset() else "")


def _root_elsewhere(attempt: AttemptRecord) -> tuple[str, int | None] | None:
    """(kind, node) of the root cause node 0's decision named for this failed attempt, where it is not this
    node's own failure (a rank killed on node 1 is a lost connection on node 0); None otherwise."""
    agreed, failure = attempt.decision or {}, attempt.failure
    kind = agreed.get("root_kind")
    if failure is None or not kind or kind == failure.kind.value:
        return None
    node = agreed.get("root_node")
    return str(kind), node if isinstance(node, int) else None


def root_cause(attempts: list[AttemptRecord]) -> dict[str, Any] | None:
    """report.json's root_cause: the first failure's kind and evidence; on several nodes, the kind and node
    node 0's decision named where this node's failure only followed from it (its reason as the evidence)."""
    first = next((a for a in attempts if a.failure is not None), None)
    if first is None or first.failure is None:
        return None
    elsewhere = _root_elsewhere(first)
    if elsewhere is not None:
        reason = str((first.decision or {}).get("reason") or "")
        return {"kind": elsewhere[0], "node": elsewhere[1], "evidence": [mask_text(reason)] if reason else []}
    return {"kind": first.failure.kind.value, "evidence": masked_failure(first.failure)["evidence"]}


def summary(result: RunResult, report_path: Path, batch: GlobalBatch | None = None, unsaved: str | None = None) -> str:
    attempts = result.attempts
    lines = [f"safe-sft: {result.outcome} after {len(attempts)} attempt(s)"]
    if batch is not None and batch.changed:
        lines.append(f"  {describe_batch(batch)}")
    failed = [a for a in attempts if a.failure is not None]
    if failed:
        first = failed[0]
        assert first.failure is not None
        f = first.failure
        code = f", exit code {f.exit_code}" if f.exit_code is not None else ""
        agreed = first.decision
        elsewhere = _root_elsewhere(first)
        if elsewhere is not None:  # this node's failure followed from another node's: node 0's decision names it
            lines.append(
                f"  root cause (attempt {first.number}, node 0's decision): {elsewhere[0]} on node {elsewhere[1]}"
            )
            lines.append(f"  on this node: {f.headline()}{code}")
        else:
            lines.append(f"  root cause (attempt {first.number}): {f.headline()}{code}")
        for line in f.evidence[:3]:
            lines.append(f"    {mask_text(line)[:300]}")
        for line in first.diagnostics:
            lines.append(f"    {line}")
        if agreed and agreed.get("root_kind") and elsewhere is None:
            lines.append(f"  across the nodes (node 0's decision): {agreed['root_kind']} on node {agreed['root_node']}")
    if attempts and attempts[0].resumed_from:
        lines.append(f"  attempt 1: {went_on_from(attempts[0])}")
    if len(attempts) > 1:
        lines.append("  ladder:")
        for a in attempts[1:]:
            outcome = a.failure.kind.value if a.failure else "finished"
            lines.append(f"    attempt {a.number}: {a.change or 'no change'}; {went_on_from(a)} -> {outcome}")
    for a in attempts:
        if a.set_aside:
            lines.append(set_aside_line(a.number, a.set_aside))
    for a in attempts:
        imbalance = a.memory.imbalance() if a.memory else None
        if imbalance:
            lines.append(f"  attempt {a.number}: {imbalance}")
    for a in attempts:
        if a.failed_at_exit is not None:
            f = a.failed_at_exit
            code = f", exit code {f.exit_code}" if f.exit_code is not None else ""
            lines.append(
                f"  attempt {a.number}: training returned on every rank, then {f.headline()} at exit{code}: "
                "its checkpoints and outputs were already written, so it counts as finished"
            )
    for a in attempts:
        if a.preempted:
            lines.append(f"  preempted at step {a.preempted['step']}: checkpoint {a.preempted['checkpoint']}")
    lost = lost_json(lost_work(attempts), attempts)
    if lost["failures"]:
        lines.append(lost_line(lost, interrupted=result.outcome == "interrupted"))
    if result.give_up_reason:
        lines.append(reason_line(result.outcome, result.give_up_reason))
    last = attempts[-1] if attempts else None
    if last is not None and last.run_dir:
        # a script that sets its output dir in code writes where it always does, whatever dir it was given
        versioned = last.versioned_because and is_version_dir(Path(last.run_dir).name)
        why = f" (a versioned dir: {last.versioned_because})" if versioned else ""
        lines.append(f"  run dir: {last.run_dir}{why}")
        stale = earlier_model(Path(last.run_dir).parent) if versioned else None
        if stale is not None:
            lines.append(
                f"  note: {Path(last.run_dir).parent / stale} is an earlier run's model, not this run's: "
                "load this run's from the run dir"
            )
        pointer = Path(last.run_dir).parent / "last-checkpoint"
        if versioned and (pointer.is_symlink() or pointer.exists()) and result.outcome == "succeeded":
            # swift's pointer at the output dir's root names an earlier attempt's (or run's) checkpoint
            lines.append(
                f"  note: {pointer} and {pointer.parent / 'args.json'} are an earlier attempt's or run's, not this "
                f"run's final ones: load its model from {last.run_dir}"
            )
    if result.outcome in ("failed", "interrupted") and attempts:
        go_on = go_on_line(attempts[-1])
        if go_on.strip() not in (result.give_up_reason or ""):  # a full disk's give-up line says it already
            lines.append(go_on)
    # never a path to a report that was not written: `unsaved` says why the last write failed
    lines.append(f"  report: {report_path}" if unsaved is None else f"  report: not written: {unsaved}")
    return "\n".join(lines)


def go_on_from(last: AttemptRecord) -> tuple[str, int] | None:
    """Where a rerun with --resume-latest goes on after a run that did not finish: the newest complete
    checkpoint its last attempt saved, else the one that attempt resumed from (the run dir it last wrote may
    hold no checkpoint at all)."""
    if last.saved_step is not None and last.saved_step > last.went_on_from():
        saved = [p for p in last.checkpoints_written if Path(p).name == f"checkpoint-{last.saved_step}"]
        if saved:
            return saved[-1], last.saved_step
    if last.resumed_from is not None and last.started_over is None:
        return last.resumed_from.checkpoint, last.resumed_from.step
    return None


def go_on_line(last: AttemptRecord) -> str:
    """Where a rerun goes on from; after an error a rerun meets again (a user error), once it is fixed."""
    found = go_on_from(last)
    fixed = last.failure is not None and last.failure.kind is FailureKind.USER_ERROR
    once = ", once the error above is fixed," if fixed else ""
    if found is None:
        return f"  no complete checkpoint was saved: a rerun{once} starts from step 0"
    return f"  go on: rerun{once} with --resume-latest; it resumes from {found[0]} (step {found[1]})"
