from dataclasses import replace

import pytest

from launcher.errors import SafeSftError
from launcher.plan.swift_args import BatchFields, ValueKind, parse_swift_argv, unknown_flag_warning


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
        args.check_values()
    fine = parse_swift_argv(["--max_length", "None", "--dataloader_num_workers", "0", "--quant_bits", "float8"])
    fine.check_values()  # None is unset, 0 workers is valid, and quant_bits takes float8
    assert fine.get_int("max_length", 7) == 7 and fine.get_int("dataloader_num_workers") == 0


OPTIONS = frozenset({"max_length", "per_device_train_batch_size", "per_device_eval_batch_size", "model"})


def test_a_prefix_of_one_option_reads_as_that_option_as_swifts_parser_takes_it() -> None:
    args = parse_swift_argv(["cfg.yaml", "--max_len", "100", "--per-device-train", "4"], {"mod": "m"}, OPTIONS)
    assert (args.get_int("max_length"), args.get_int("per_device_train_batch_size"), args.get("model")) == (100, 4, "m")
    changed = args.with_values({"per_device_train_batch_size": "2"})  # the user's own flag, in place
    assert changed.argv() == ("--mod", "m", "--max_len", "100", "--per-device-train", "2")
    ambiguous = parse_swift_argv(["--per_device", "4"], None, OPTIONS)  # argparse refuses it: not read
    assert ambiguous.get_int("per_device_train_batch_size", 1) == 1
    assert ambiguous.unknown_flags() == ("--per_device",)
    assert parse_swift_argv(["--max_len", "100"]).get("max_length") is None  # no option list: names only


def test_an_unknown_option_is_named_with_what_it_is_closest_to() -> None:
    args = parse_swift_argv(["--max_lenght", "1", "--per_device", "2", "--xyzzy", "3", "--max_len", "4"], None, OPTIONS)
    assert args.unknown_flags() == ("--max_lenght", "--per_device", "--xyzzy")
    warnings = [unknown_flag_warning(flag, OPTIONS) for flag in args.unknown_flags()]
    tail = ": swift stops on it unless --ignore_args_error true is given"
    assert warnings == [
        "--max_lenght is no option of swift sft (did you mean --max_length?)" + tail,
        "--per_device is no option of swift sft (did you mean --per_device_eval_batch_size or "
        "--per_device_train_batch_size?)" + tail,
        "--xyzzy is no option of swift sft" + tail,
    ]
    ignored = parse_swift_argv(["--xyzzy", "3", "--ignore_args_error", "true"], None, OPTIONS | {"ignore_args_error"})
    assert ignored.unknown_flags() == ()


def test_batch_fields_are_typed_once_and_a_changed_copy_reads_its_own() -> None:
    config = {"gradient_accumulation_steps": 4}
    args = parse_swift_argv(["t.yaml", "--per_device_train_batch", "8", "--max_length", "None"], config)
    args = replace(args, options=frozenset({"per_device_train_batch_size", "max_length"}))
    assert args.batch == BatchFields(micro_batch=8, grad_accum=4, max_length=None, sequence_parallel=1)
    halved = args.with_values({"per_device_train_batch_size": "4", "max_length": "1024"})
    assert (halved.batch.micro_batch, halved.batch.max_length) == (4, 1024)
    assert args.batch.micro_batch == 8  # the original's reading is its own
    with pytest.raises(SafeSftError, match="--sequence_parallel_size '0' is below 1"):
        _ = parse_swift_argv(["--sequence_parallel_size", "0"]).batch


KINDS = {
    "torch_dtype": ValueKind("choice", ("bfloat16", "float16", "float32", "None")),
    "quant_bits": ValueKind("choice", ("1", "2", "4", "8", "float8")),
    "max_length": ValueKind("int"),
    "save_steps": ValueKind("int"),
    "learning_rate": ValueKind("float"),
    "gradient_checkpointing": ValueKind("bool"),
    "freeze_parameters_ratio": ValueKind("float"),
    "target_modules": ValueKind("text+"),
    "layers_to_transform": ValueKind("int+"),
    "model": ValueKind("text"),
}


REFUSED = {  # id: (argv, config file, the start of the error)
    "not-a-choice": (["--torch_dtype", "int4"], None, "--torch_dtype 'int4' is not one of swift's choices: "),
    "through-a-prefix": (["--torch_dt", "bf16"], None, "--torch_dtype 'bf16' is not one of"),
    "a-number-not-listed": (["--quant_bits", "3.5"], None, "--quant_bits '3.5' is not one of"),
    "in-the-config-file": (["c.yaml"], {"torch_dtype": "BF16"}, "--torch_dtype 'BF16' is not one of"),
    "two-values": (["--torch_dtype", "bfloat16", "float16"], None, "--torch_dtype 'bfloat16' takes one value, and is"),
    # what swift's parser leaves over, and stops on (remaining_argv) in every rank
    "a-stray-word": (["--model", "m", "junk"], None, "--model 'm' takes one value, and is followed by 'junk'"),
    # argparse gives `--flag=value` that one value, a list's option too: the words after it are left over
    "equals-then-a-second-file": (
        ["--model", "m", "--dataset=a.jsonl", "b.jsonl"],
        None,
        "--dataset='a.jsonl' takes one value written with =, and is followed by 'b.jsonl': swift leaves the words",
    ),
    "equals-then-a-word": (["--output_dir=runs", "junk"], None, "--output_dir='runs' takes one value written with ="),
    "a-config-file-last": (["--model", "m", "c.yml"], None, "--model 'm' takes one value, and is followed by 'c.yml'"),
    "an-em-dash": (
        ["--model", "m", "\u2014max_length", "5"],
        None,
        "--model 'm' takes one value, and is followed by '\u2014max",
    ),
    "a-single-dash": (
        ["--model", "m", "-max_length", "0"],
        None,
        "--model 'm' takes one value, and is followed by '-max",
    ),
    "a-double-dash": (
        ["--model", "m", "--", "--save_steps", "5"],
        None,
        "a `--` among swift's arguments, followed by '--save_steps 5': swift's parser ends its options there",
    ),
    # the value before it is fine: it had been quoted as '4 --' (audit42 F9)
    "a-double-dash-after-a-number": (
        ["--max_length", "4", "--", "--ignore_args_error", "true"],
        None,
        "a `--` among swift's arguments, followed by '--ignore_args_error true'",
    ),
    "a-double-dash-last": (["--model", "m", "--"], None, "a `--` among swift's arguments, at their end"),
    "a-list-in-the-config": (["c.yaml"], {"model": ["a", "b"]}, "--model 'a' takes one value, and is followed by 'b'"),
    "a-bool-and-a-word": (
        ["--gradient_checkpointing", "true", "x"],
        None,
        "--gradient_checkpointing 'true' takes one value",
    ),
    "no-value": (["--max_length"], None, "--max_length needs a value"),
    "float": (["--learning_rate", "abc"], None, "--learning_rate 'abc' is not a number"),
    "int": (["--save_steps", "1e3"], None, "--save_steps '1e3' is not a whole number"),
    "yaml-null-number": (["c.yaml"], {"max_length": None}, "--max_length 'None' is not a whole number"),
    "bool-on": (["--gradient_checkpointing", "on"], None, "--gradient_checkpointing 'on' is not true or false"),
    "int-list": (["--layers_to_transform", "0", "x"], None, "--layers_to_transform '0 x' is not a whole number"),
}
TAKEN = {  # id: (argv, config file)
    "choices-allowed": (["--torch_dtype", "float16", "--quant_bits", "float8"], None),
    "the-cli-wins": (["c.yaml", "--torch_dtype", "None"], {"torch_dtype": "x"}),
    "yaml-types": (["c.yaml"], {"torch_dtype": None, "quant_bits": 4, "gradient_checkpointing": True}),
    "numbers": (["--learning_rate", "1e-4", "--save_steps", "+50", "--gradient_checkpointing"], None),
    "truthy-list": (["--gradient_checkpointing", "T", "--target_modules", "q_proj", "v_proj"], None),
    "text-unknown": (["--layers_to_transform", "0", "1", "--model", "None", "--xyz", "abc"], None),
    "a-bare-bool": (["--gradient_checkpointing", "--model", "m"], None),
    "left-over-let-through": (["--model", "m", "junk", "--ignore_args_error", "true"], None),
    "a-mapping-in-the-config": (["c.yaml"], {"model": {"a": 1}}),
}


@pytest.mark.parametrize(
    ("argv", "config", "refused"),
    [pytest.param(*case, id=name) for name, case in REFUSED.items()]
    + [pytest.param(argv, config, None, id=name) for name, (argv, config) in TAKEN.items()],
)
def test_a_value_swifts_parser_would_not_convert_stops_before_anything(
    argv: list[str], config: dict[str, object] | None, refused: str | None
) -> None:
    args = parse_swift_argv(argv, config, frozenset(KINDS), KINDS)
    if refused is None:
        args.check_values()
        return
    with pytest.raises(SafeSftError) as error:
        args.check_values()
    assert error.value.message.startswith(refused)
    assert error.value.hint.startswith(("set --", "leave --", "give --"))


def test_none_for_a_number_names_why_and_a_trainers_own_null_stays_unset() -> None:
    with pytest.raises(SafeSftError) as error:
        parse_swift_argv(["--max_length", "None"], None, frozenset(KINDS), KINDS).check_values()
    assert "takes no None" in error.value.hint
    assert parse_swift_argv(["c.yaml"], {"max_length": None}).get_int("max_length", 7) == 7  # no kinds: not swift's


TWIN_KINDS = {
    "gradient_checkpointing": ValueKind("bool"),
    "no_gradient_checkpointing": ValueKind("flag"),
    "add_version": ValueKind("bool"),
    "no_add_version": ValueKind("flag"),
    "ignore_args_error": ValueKind("bool"),
}


def _twins(argv: list[str], config: dict[str, object] | None = None):  # type: ignore[no-untyped-def]
    return parse_swift_argv(argv, config, frozenset(TWIN_KINDS), TWIN_KINDS)


@pytest.mark.parametrize(
    ("argv", "config", "expected"),
    [
        pytest.param(["--no_gradient_checkpointing"], None, False, id="the-twin"),
        pytest.param(["--no_grad"], None, False, id="a-prefix-of-the-twin"),
        pytest.param(["--no_gradient_checkpointing", "--gradient_checkpointing", "true"], None, True, id="later-wins"),
        pytest.param(["--gradient_checkpointing", "true", "--no_gradient_checkpointing"], None, False, id="twin-later"),
        pytest.param(["c.yaml"], {"no_gradient_checkpointing": True}, False, id="in-the-config"),
        pytest.param(["c.yaml", "--gradient_checkpointing", "true"], {"no_gradient_checkpointing": True}, True,
                     id="the-cli-beats-the-config"),
        pytest.param([], None, True, id="neither"),
    ],
)  # fmt: skip
def test_a_bools_no_twin_sets_it_false_as_swifts_parser_does(
    argv: list[str], config: dict[str, object] | None, expected: bool
) -> None:
    args = _twins(argv, config)
    assert args.get_bool("gradient_checkpointing", True) is expected
    assert args.has("gradient_checkpointing") is (argv != [] or config is not None)


def test_no_add_version_is_read_so_no_attempt_saves_over_a_checkpoint() -> None:
    """--no_add_version writes into output_dir itself: the supervisor's overwrite guard must see it."""
    args = _twins(["--no_add_version"])
    assert args.has("add_version") and not args.get_bool("add_version", True)


def test_the_ladder_turns_a_twin_into_the_fields_own_flag_in_place() -> None:
    args = _twins(["--no_gradient_checkpointing", "--model", "m"])
    changed = args.with_values({"gradient_checkpointing": "true"})
    assert changed.argv() == ("--gradient_checkpointing", "true", "--model", "m")
    assert changed.get_bool("gradient_checkpointing", False) is True


def test_a_twin_given_a_value_is_refused_unless_swift_ignores_leftovers() -> None:
    with pytest.raises(SafeSftError) as error:
        _twins(["--no_gradient_checkpointing", "false"]).check_values()
    assert error.value.message == "--no_gradient_checkpointing 'false' takes no value"
    assert error.value.hint == "write --no_gradient_checkpointing alone (it sets --gradient_checkpointing false)"
    _twins(["--no_gradient_checkpointing", "false", "--ignore_args_error", "true"]).check_values()
    _twins(["--no_gradient_checkpointing", "--model", "m"]).check_values()


@pytest.mark.parametrize(("env", "refused"), [(["A=1"], True), ("A=1", True), (None, False), ([], False)])
def test_a_config_files_env_block_is_a_mapping_or_nothing_as_swift_reads_it(env: object, refused: bool) -> None:
    """swift pops ENV and calls .items() on anything truthy: a list stopped swift; it read as an unknown --ENV."""
    if not refused:
        args = parse_swift_argv(["c.yaml"], {"ENV": env, "model": "m"})
        assert (dict(args.config_env), "--ENV" in args.argv()) == ({}, False)
        return
    with pytest.raises(SafeSftError) as err:
        parse_swift_argv(["c.yaml"], {"ENV": env, "model": "m"})
    assert err.value.message.startswith("the config file's ENV is ") and "not a mapping" in err.value.message


def test_a_lone_space_after_a_value_is_named_as_a_scripts_backslash_space() -> None:
    """Two of 57 public swift scripts end a line in a backslash and a space: bash passes a lone space and
    ends the command there, dropping every line after it."""
    args = parse_swift_argv(["--model", "m", " "], None, frozenset(KINDS), KINDS)
    with pytest.raises(SafeSftError) as error:
        args.check_values()
    assert error.value.message == "--model 'm' takes one value, and is followed by ' '"
    assert error.value.hint.startswith("remove the space after the backslash that ends the line")


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        pytest.param(["--split_dataset_ratio", "1.5"], "'1.5' is above 1", id="above-one"),
        pytest.param(["--split_dataset_ratio", "1"], "'1' leaves no row to train on", id="one"),
        pytest.param(["--split_dataset_ratio", "-0.1"], "'-0.1' is below 0", id="negative"),
        pytest.param(["--split_dataset_ratio", "0.1"], None, id="a-tenth"),
        pytest.param(["--split_dataset_ratio", "1.5", "--val_dataset", "v.jsonl"], None, id="set-to-0-for-val"),
        pytest.param(["--split_dataset_ratio", "1.5", "--eval_strategy", "no"], None, id="never-evaluates"),
        pytest.param(["--split_dataset_ratio", "1", "--save_strategy", "no"], None, id="eval-follows-save"),
        pytest.param(["--split_dataset_ratio", "1.5", "--streaming", "true"], None, id="streams"),
    ],
)
def test_a_split_ratio_swift_asserts_on_after_loading_is_refused_where_swift_uses_it(
    argv: list[str], refused: str | None
) -> None:
    """swift asserts 0 <= split_dataset_ratio <= 1 once the model has loaded, and 1 leaves no row to train on;
    it sets the ratio to 0 itself where a --val_dataset is given, where it streams or never evaluates, and
    those runs go on (hostile47data F8)."""
    from launcher.backends.swift import SWIFT

    args = SWIFT.read(["--model", "m", "--dataset", "d.jsonl", *argv]).args
    if refused is None:
        args.check_values()
        return
    with pytest.raises(SafeSftError) as err:
        args.check_values()
    assert err.value.message.startswith(f"--split_dataset_ratio {refused}")
