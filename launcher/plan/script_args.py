"""What safe-sft sets in a user's script's TrainingArguments (the torchrun backend) through the worker in every
rank (launcher/hf_worker.py), not on the script's command line: the plan's DeepSpeed config and accumulation,
the ladder's knobs, the resume point and a fresh output dir. A script's own parser (argparse) may refuse any
option it does not know, and a script may build its TrainingArguments in code from options of its own; both
still get what safe-sft chose. The script's command line stays as the user typed it. Pure.

The values travel as one JSON object in SCRIPT_ARGS_ENV, typed as TrainingArguments' fields are.
"""

from __future__ import annotations

import json

from launcher.model import EnvSetting
from launcher.plan.swift_args import SwiftArgs

SCRIPT_ARGS_ENV = "SAFE_SFT_TRAINING_ARGS"  # launcher/hf_worker.py reads it
# the name of the dir the worker writes to inside a script's own output dir that holds earlier checkpoints
FRESH_DIR_ENV = "SAFE_SFT_FRESH_DIR"
# the newest complete checkpoint of a script's output dir, where this attempt's fresh dir hides it from the
# script's own get_last_checkpoint
LAST_CHECKPOINT_ENV = "SAFE_SFT_LAST_CHECKPOINT"

# the TrainingArguments fields safe-sft writes for a script, with their types
FIELDS: dict[str, type] = {
    "per_device_train_batch_size": int,
    "gradient_accumulation_steps": int,
    "per_device_eval_batch_size": int,
    "dataloader_num_workers": int,
    "gradient_checkpointing": bool,
    "save_only_model": bool,
    "dataloader_pin_memory": bool,
    "ignore_data_skip": bool,
    "deepspeed": str,
    "resume_from_checkpoint": str,
    "output_dir": str,
}

WHY = "what safe-sft chose (plan, ladder, resume), set in the script's TrainingArguments by its worker"


def _typed(kind: type, value: str) -> int | bool | str:
    if kind is bool:
        return value.strip().lower() in ("true", "1", "yes")
    if kind is int:
        return int(value)
    return value


def script_args(user: SwiftArgs, chosen: SwiftArgs) -> dict[str, int | bool | str]:
    """The FIELDS `chosen` (the user's arguments with what safe-sft added or changed) sets otherwise than the
    user did, typed."""
    out: dict[str, int | bool | str] = {}
    for key, kind in FIELDS.items():
        value = chosen.given(key)
        if value is not None and value != user.given(key):
            out[key] = _typed(kind, value)
    return out


def script_args_env(user: SwiftArgs, chosen: SwiftArgs) -> tuple[EnvSetting, ...]:
    """SCRIPT_ARGS_ENV for what `chosen` sets otherwise than the user; nothing where it is the same."""
    found = script_args(user, chosen)
    return (EnvSetting(SCRIPT_ARGS_ENV, json.dumps(found, sort_keys=True), WHY),) if found else ()
