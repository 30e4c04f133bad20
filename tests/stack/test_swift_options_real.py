"""swift sft's option names and allowed values, as safe-sft reads them without importing swift, held against
the installed swift.

launcher/backends/swift_options.txt is written by scripts/swift_options.py from swift's own parser
(transformers' HfArgumentParser over SftArguments). That parser takes an unambiguous prefix of an option
(argparse's allow_abbrev), and safe-sft reads the user's arguments the same way: a plan made for
`--max_len 4096` must plan for 4096 tokens, as swift will train. A Literal field (`--torch_dtype`) is an
argparse choice there: safe-sft refuses exactly the values swift's parser refuses, before anything starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher.backends.swift import OPTIONS_FILE, SWIFT_TUNERS, swift_options, swift_value_kinds
from launcher.errors import SafeSftError
from launcher.plan.swift_args import LEAST_INT, option_key, parse_swift_argv

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from swift_options import installed_options, render


def test_the_shipped_option_names_are_the_installed_swifts() -> None:
    assert OPTIONS_FILE.read_text() == render(installed_options()), "run scripts/swift_options.py"


def test_the_tuners_safe_sft_knows_are_the_installed_swifts() -> None:
    from swift.arguments.base_args.base_args import get_supported_tuners

    assert set(get_supported_tuners()) == SWIFT_TUNERS


@pytest.mark.parametrize(
    "typed",
    ["--max_len", "--per_device_train_batch", "--per-device-train", "--gradient_accum", "--deepsp", "--per_device",
     "--max", "--lora_r", "--xyzzy", "--model", "--learning_ra"],
)  # fmt: skip
def test_a_flag_reads_as_the_field_swifts_parser_sets(typed: str) -> None:
    from swift.arguments import SftArguments
    from transformers import HfArgumentParser

    parser = HfArgumentParser([SftArguments])
    parser.exit_on_error = False
    try:
        namespace, rest = parser.parse_known_args([typed, "7"])
    except Exception:  # argparse: ambiguous option (it exits; exit_on_error=False makes it raise)
        namespace, rest = None, [typed]
    except SystemExit:
        namespace, rest = None, [typed]
    ours = option_key(typed, swift_options())
    if rest:  # swift does not take it: safe-sft reads no field from it
        assert ours not in swift_options()
    else:
        assert namespace is not None and getattr(namespace, ours) in ("7", 7, 7.0, ["7"], True), ours


def _swift_takes(flag: str, value: str) -> bool:
    """Whether swift's own parser takes `flag value` (no error, nothing left over)."""
    from swift.arguments import SftArguments
    from transformers import HfArgumentParser

    parser = HfArgumentParser([SftArguments])
    parser.exit_on_error = False
    try:
        _, rest = parser.parse_known_args([flag, value])
    except (Exception, SystemExit):  # argparse: invalid choice
        return False
    return not rest


def _safe_sft_takes(flag: str, value: str) -> bool:
    args = parse_swift_argv([flag, value], None, swift_options(), swift_value_kinds())
    try:
        args.check_values()
    except SafeSftError:
        return False
    return True


CHOICES = sorted(name for name, kind in swift_value_kinds().items() if kind.choices)
# For each kind of value: values swift's parser takes and values it refuses (a near miss of each sort)
TAKES = {
    "int": ("7", "+7", "1_000"),
    "float": ("1e-4", "0.5", "3", "inf"),
    "bool": ("true", "False", "YES", "n", "t", "1"),
}
REFUSES = {"int": ("None", "1.5", "1e3", "4k", ""), "float": ("None", "abc", "1,5"), "bool": ("on", "off", "2", "None")}


@pytest.mark.parametrize("name", CHOICES)
def test_a_choice_field_refuses_what_swifts_parser_refuses(name: str) -> None:
    """Every allowed value is taken by both; a value outside the list (a near miss) is refused by both."""
    flag, allowed = f"--{name}", swift_value_kinds()[name].choices
    for value in allowed:
        assert _swift_takes(flag, value) and _safe_sft_takes(flag, value), value
    for value in ("not-a-choice", allowed[0].upper() + "x"):
        assert not _swift_takes(flag, value) and not _safe_sft_takes(flag, value), value


@pytest.mark.parametrize("kind", sorted(TAKES))
def test_a_typed_field_takes_and_refuses_what_swifts_parser_does(kind: str) -> None:
    """For every option of this kind, on values of each sort, safe-sft agrees with swift's parser."""
    names = sorted(name for name, k in swift_value_kinds().items() if k.kind == kind)
    assert len(names) >= 30, names
    for name in names:
        flag = f"--{name}"
        for value in TAKES[kind]:
            if name in RANGED and not RANGED[name](value):
                continue  # a deliberate difference, held below
            assert _swift_takes(flag, value) and _safe_sft_takes(flag, value), (flag, value)
        for value in REFUSES[kind]:
            assert not _swift_takes(flag, value) and not _safe_sft_takes(flag, value), (flag, value)


@pytest.mark.parametrize("name", sorted(LEAST_INT))
def test_a_number_no_run_can_use_is_refused_though_swifts_parser_takes_it(name: str) -> None:
    """The one deliberate difference: swift's parser takes `--per_device_train_batch_size 0` and fails at the
    first step, after the model has loaded; safe-sft refuses it before anything starts."""
    flag, below = f"--{name}", str(LEAST_INT[name] - 1)
    assert _swift_takes(flag, below) and not _safe_sft_takes(flag, below)
    assert _safe_sft_takes(flag, str(LEAST_INT[name]))


# The fields swift's parser takes any number for and swift asserts a range on once the model has loaded
RANGED = {"split_dataset_ratio": lambda value: 0 <= float(value) < 1}


def test_a_split_ratio_swift_asserts_on_is_refused_though_swifts_parser_takes_it() -> None:
    """The other deliberate difference: swift's parser takes `--split_dataset_ratio 3` and asserts 0 <= it <= 1
    once the model has loaded (1 leaves no row to train on); safe-sft refuses them before anything starts."""
    for value in ("3", "1", "-0.5", "inf"):
        assert _swift_takes("--split_dataset_ratio", value) and not _safe_sft_takes("--split_dataset_ratio", value)
    assert _safe_sft_takes("--split_dataset_ratio", "0.5") and _safe_sft_takes("--split_dataset_ratio", "0")


TWINS = sorted(name for name, kind in swift_value_kinds().items() if kind.kind == "flag" and name.startswith("no_"))


@pytest.mark.parametrize("twin", TWINS)
def test_a_no_twin_sets_its_bool_false_as_swifts_parser_does(twin: str) -> None:
    """`--no_<field>` (a bool field defaulting to true) sets the field false; a later `--<field> true` wins."""
    from swift.arguments import SftArguments
    from transformers import HfArgumentParser

    field_ = twin.removeprefix("no_")
    parser = HfArgumentParser([SftArguments])
    for argv, expected in (([f"--{twin}"], False), ([f"--{twin}", f"--{field_}", "true"], True)):
        namespace, rest = parser.parse_known_args(argv)
        assert not rest and getattr(namespace, field_) is expected, argv
        ours = parse_swift_argv(argv, None, swift_options(), swift_value_kinds())
        assert ours.get_bool(field_, not expected) is expected, argv


def _swift_takes_tokens(tokens: list[str]) -> bool:
    """Whether swift's own parser takes these tokens whole (no error, nothing left over)."""
    from swift.arguments import SftArguments
    from transformers import HfArgumentParser

    parser = HfArgumentParser([SftArguments])
    parser.exit_on_error = False
    try:
        _, rest = parser.parse_known_args(tokens)
    except (Exception, SystemExit):  # argparse: expected one argument
        return False
    return not rest


def _safe_sft_takes_tokens(tokens: list[str]) -> bool:
    try:
        parse_swift_argv(tokens, None, swift_options(), swift_value_kinds()).check_values()
    except SafeSftError:
        return False
    return True


GOOD = {"int": "7", "float": "0.5", "bool": "true", "text": "x"}


@pytest.mark.parametrize("kind", [*sorted(GOOD), "choice"])
def test_a_word_left_over_after_a_value_is_refused_as_swifts_parser_leaves_it(kind: str) -> None:
    """`--output_dir out junk`, a config file placed last, an em-dash pasted for `--`: swift's parser leaves
    the extra word over and swift stops on it in every rank. A list field (`--dataset a b`) takes them all."""
    kinds = swift_value_kinds()
    names = sorted(
        n for n, k in kinds.items() if (k.choices and kind == "choice") or (k.kind == kind and not k.choices)
    )
    checked = 0
    for name in names:
        flag = f"--{name}"
        value = kinds[name].choices[0] if kind == "choice" else GOOD[kind]
        if not _swift_takes_tokens([flag, value]):  # a field with a parser of its own (JSON: liger_kernel_config)
            continue
        checked += 1
        assert _safe_sft_takes_tokens([flag, value]), (flag, value)
        extra = [flag, value, "extra.yaml"]
        assert not _swift_takes_tokens(extra) and not _safe_sft_takes_tokens(extra), extra
        if kind != "bool":  # a bool given bare is true
            assert not _swift_takes_tokens([flag]) and not _safe_sft_takes_tokens([flag]), flag
    assert checked >= min(len(names), 10), (kind, checked, len(names))


def test_a_list_field_takes_every_word_after_it_as_swifts_parser_does() -> None:
    names = sorted(n for n, k in swift_value_kinds().items() if k.kind == "text+")
    assert "dataset" in names
    taken = [name for name in names if _swift_takes_tokens([f"--{name}", "a", "b", "c"])]
    assert len(taken) >= len(names) // 2 and "dataset" in taken  # others have choices of their own (--debug)
    for name in taken:
        tokens = [f"--{name}", "a", "b", "c"]
        assert _safe_sft_takes_tokens(tokens), tokens


def test_the_default_output_dirs_model_name_is_swifts_own() -> None:
    """swift names `output/<model>` with get_model_name (hub cache snapshots, modelscope's `___`); safe-sft puts
    its lock and report under the dir swift will write, so it must name it the same way."""
    from swift.model.model_meta import get_model_name

    from launcher.plan.build import swift_model_name
    from tests.unit.test_plan_data_cli import MODEL_NAMES

    for model, _ in MODEL_NAMES:
        assert swift_model_name(model) == get_model_name(model), model
