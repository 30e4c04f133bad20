"""What safe-sft sets in a user's script's TrainingArguments through its worker: what it added or changed,
typed as the fields are; the user's own values are not sent again."""

import json

from launcher.backends.hf_trainer import _script_args
from launcher.plan.script_args import SCRIPT_ARGS_ENV, script_args, script_args_env


def test_what_safe_sft_changed_is_sent_typed_and_the_users_own_values_are_not() -> None:
    user = _script_args(["--output_dir", "out", "--per_device_train_batch_size", "4", "--bf16", "true"], "train.py")
    chosen = user.with_values(
        {
            "per_device_train_batch_size": "2",
            "gradient_accumulation_steps": "8",  # transformers' default was 1: not given by the user
            "gradient_checkpointing": "true",
            "deepspeed": "/cfg/zero2.json",
            "resume_from_checkpoint": "out/checkpoint-3",
        }
    )
    assert script_args(user, chosen) == {
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 8,
        "gradient_checkpointing": True,
        "deepspeed": "/cfg/zero2.json",
        "resume_from_checkpoint": "out/checkpoint-3",
    }
    (setting,) = script_args_env(user, chosen)
    assert setting.name == SCRIPT_ARGS_ENV and json.loads(setting.value)["gradient_accumulation_steps"] == 8


def test_a_value_equal_to_transformers_default_is_still_sent() -> None:
    """A script that ran 16 in its own code, halved by the ladder to 8, transformers' default: had it been
    compared with the default, the script would have gone on with its 16."""
    user = _script_args(["--output_dir", "out"], "train.py")
    chosen = user.with_values({"per_device_train_batch_size": "8", "save_only_model": "false"})
    assert script_args(user, chosen) == {"per_device_train_batch_size": 8, "save_only_model": False}


def test_nothing_changed_sends_nothing() -> None:
    user = _script_args(["--output_dir", "out", "--gradient_checkpointing", "true"], "train.py")
    assert script_args(user, user) == {} and script_args_env(user, user) == ()
