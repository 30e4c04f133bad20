import pytest

from launcher.errors import SafeSftError
from launcher.plan.swift_args import parse_swift_argv


def test_last_flag_wins_and_dash_alias() -> None:
    args = parse_swift_argv(["--max_steps", "10", "--max-steps", "20", "--dataset", "a.jsonl", "b.jsonl"])
    assert args.get("max_steps") == "20"
    assert args.get("dataset") == "a.jsonl b.jsonl"


def test_equals_form_and_bare_flag() -> None:
    args = parse_swift_argv(["--use_cpu=true", "--gradient_checkpointing"])
    assert args.get_bool("use_cpu", False) is True
    assert args.get_bool("gradient_checkpointing", False) is True


def test_config_values_lose_to_cli_and_env_block_is_kept() -> None:
    config = {"per_device_train_batch_size": 4, "dataset": ["x", "y"], "ENV": {"NPROC_PER_NODE": 2}}
    args = parse_swift_argv(["train.yaml", "--per_device_train_batch_size", "8"], config)
    assert args.config_file == "train.yaml"
    assert args.get_int("per_device_train_batch_size") == 8
    assert args.get("dataset") == "x y"
    assert args.config_env == {"NPROC_PER_NODE": "2"}


def test_config_file_expands_like_swift_does() -> None:
    config = {"model": "m", "dataset": ["a", "b"], "use_cpu": True, "deepspeed": {"zero": 2}, "ENV": {"X": 1}}
    args = parse_swift_argv(["cfg.yaml", "--max_steps", "3"], config)
    assert args.argv() == (
        "--model", "m", "--dataset", "a", "b", "--use_cpu", "True", "--deepspeed", '{"zero": 2}', "--max_steps", "3",
    )  # fmt: skip


def test_with_values_replaces_in_place_and_appends() -> None:
    args = parse_swift_argv(["cfg.yaml", "--per_device_train_batch_size", "4", "--model", "m"], {"seed": 1})
    changed = args.with_values({"per_device_train_batch_size": "2", "gradient_accumulation_steps": "8"})
    assert changed.argv() == (
        "--seed", "1", "--per_device_train_batch_size", "2", "--model", "m", "--gradient_accumulation_steps", "8",
    )  # fmt: skip
    assert args.get_int("per_device_train_batch_size") == 4  # the original is untouched


def test_with_values_none_removes() -> None:
    args = parse_swift_argv(["--resume_from_checkpoint", "old", "--model", "m"])
    assert args.with_values({"resume_from_checkpoint": None}).argv() == ("--model", "m")


def test_a_whole_number_field_swift_would_refuse_or_fail_on_is_named_as_given() -> None:
    args = parse_swift_argv(["cfg.yaml", "--gradient_accumulation_steps", "0"], {"max_length": "4k"})
    with pytest.raises(SafeSftError) as bad_length:
        args.get_int("max_length")
    assert (bad_length.value.message, bad_length.value.hint) == (
        "--max_length '4k' is not a whole number",
        "set --max_length to a whole number of at least 1",
    )
    with pytest.raises(SafeSftError, match="--gradient_accumulation_steps '0' is below 1"):
        args.check_whole_numbers()
    fine = parse_swift_argv(["--max_length", "None", "--dataloader_num_workers", "0", "--quant_bits", "float8"])
    fine.check_whole_numbers()  # None is unset, 0 workers is valid, and quant_bits takes float8
    assert fine.get_int("max_length", 7) == 7 and fine.get_int("dataloader_num_workers") == 0
