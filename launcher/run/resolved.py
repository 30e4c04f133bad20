"""swift's own resolved arguments for one attempt, as launcher/worker.py wrote them inside swift.

swift names its output dir (`output/<model name>` by its own rules: a Hugging Face cache path gives the
repo's name, ModelScope's `___` becomes `.`) and its versioned run dir (`v<N>-<time>`) itself, fills in
defaults (gradient_accumulation_steps from the world size) and reads a config file's values. safe-sft
takes these from swift instead of re-deriving them: local rank 0 writes them to `swift-args.json` in the
attempt's folder as soon as swift has parsed its arguments. Read-only; parsed once into ResolvedArgs.
Before swift has parsed them (or when an attempt dies before), there is no file and `read` gives None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE_NAME = "swift-args.json"
ENV_NAME = "SAFE_SFT_RESOLVED_ARGS"  # the worker's side: launcher/worker.py RESOLVED_ENV


@dataclass(frozen=True)
class ResolvedArgs:
    output_dir: Path  # swift's output_dir before versioning
    run_dir: Path  # where this attempt writes args.json, logging.jsonl and its checkpoints
    add_version: bool
    world_size: int | None
    per_device_train_batch_size: int | None
    per_device_eval_batch_size: int | None
    gradient_accumulation_steps: int | None
    save_strategy: str | None
    save_steps: float | None
    save_only_model: bool
    resume_from_checkpoint: str | None
    resume_only_model: bool | None  # None: no such field (transformers loads whatever the checkpoint holds)
    max_length: int | None
    ddp_timeout: int | None
    deepspeed: Any  # swift's parsed config (a dict), or None
    gradient_checkpointing: bool | None = None  # where the worker reports it (a script's TrainingArguments)
    trained_from: str | None = None  # the checkpoint a script's own code passed its first train(), unasked

    def to_json(self) -> dict[str, Any]:
        """As report.json shows it: what swift itself ran with."""
        return {
            "output_dir": str(self.output_dir),
            "run_dir": str(self.run_dir),
            "add_version": self.add_version,
            "world_size": self.world_size,
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "per_device_eval_batch_size": self.per_device_eval_batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "save_strategy": self.save_strategy,
            "save_steps": self.save_steps,
            "save_only_model": self.save_only_model,
            "resume_from_checkpoint": self.resume_from_checkpoint,
            "resume_only_model": self.resume_only_model,
            "max_length": self.max_length,
            "ddp_timeout": self.ddp_timeout,
            "gradient_checkpointing": self.gradient_checkpointing,
            "deepspeed_stage": (self.deepspeed.get("zero_optimization") or {}).get("stage")
            if isinstance(self.deepspeed, dict)
            else None,
        }


def path_in(attempt_dir: Path) -> Path:
    return attempt_dir / FILE_NAME


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse(data: Any) -> ResolvedArgs | None:
    """The typed values, or None when the file is not what the worker writes."""
    if not isinstance(data, dict) or not _text(data.get("run_dir")) or not _text(data.get("output_dir")):
        return None
    steps = data.get("save_steps")
    return ResolvedArgs(
        output_dir=Path(data["output_dir"]),
        run_dir=Path(data["run_dir"]),
        add_version=data.get("add_version") is True,
        world_size=_int(data.get("world_size")),
        per_device_train_batch_size=_int(data.get("per_device_train_batch_size")),
        per_device_eval_batch_size=_int(data.get("per_device_eval_batch_size")),
        gradient_accumulation_steps=_int(data.get("gradient_accumulation_steps")),
        save_strategy=_text(data.get("save_strategy")),
        save_steps=float(steps) if isinstance(steps, int | float) and not isinstance(steps, bool) else None,
        save_only_model=data.get("save_only_model") is True,
        resume_from_checkpoint=_text(data.get("resume_from_checkpoint")),
        resume_only_model=only if isinstance(only := data.get("resume_only_model"), bool) else None,
        max_length=_int(data.get("max_length")),
        ddp_timeout=_int(data.get("ddp_timeout")),
        deepspeed=data.get("deepspeed"),
        gradient_checkpointing=gc if isinstance(gc := data.get("gradient_checkpointing"), bool) else None,
        trained_from=_text(data.get("trained_from")),
    )


def read(attempt_dir: Path) -> ResolvedArgs | None:
    """The attempt's resolved arguments, once swift has parsed them; None before (or if it never did)."""
    try:
        return parse(json.loads(path_in(attempt_dir).read_text()))
    except (OSError, ValueError):
        return None
