"""An earlier ms-swift's option is named with what ms-swift 4 takes instead (launcher.plan.swift_renames),
held to the option table read from swift 4.6's own parser (launcher/backends/swift_options.txt), and to the
options real users were refused (tests/data/swift_argv_errors)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from launcher.backends.swift import swift_options
from launcher.plan.swift_args import unknown_flag_warning
from launcher.plan.swift_renames import EARLIER_OPTIONS

OPTIONS = swift_options()


@pytest.mark.parametrize(("old", "now"), sorted(EARLIER_OPTIONS.items()))
def test_an_earlier_option_is_gone_and_its_successor_is_there(old: str, now: str) -> None:
    assert old not in OPTIONS
    assert now.split()[0].removeprefix("--") in OPTIONS


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("--use_flash_attn", "(an earlier ms-swift's option: write --attn_impl flash_attn)"),  # not --use_flash_ckpt
        ("--lora_target_modules", "write --target_modules (ALL is now all-linear)"),  # not --galore_target_modules
        ("--sft_type", "write --tuner_type"),
        ("--num_train_epoch", "(did you mean --num_train_epochs?)"),  # a typo keeps the nearest option
    ],
)
def test_the_warning_names_what_to_write(flag: str, said: str) -> None:
    assert said in unknown_flag_warning(flag, OPTIONS)


def test_another_trainers_options_are_not_read_as_swifts() -> None:
    assert "earlier ms-swift" not in unknown_flag_warning("--batch_size", frozenset({"batch_size_x"}), "finetune.py")


ERRORS = Path(__file__).resolve().parents[1] / "data" / "swift_argv_errors" / "cases.jsonl"
CASES = [json.loads(line) for line in ERRORS.read_text().splitlines() if line.strip()]


def _refused_options(error: str) -> list[str]:
    """The options in a `remaining_argv: [...]` error, as swift printed them."""
    found = re.search(r"remaining_argv: (\[.*\])", error)
    return [token for token in ast.literal_eval(found.group(1)) if token.startswith("--")] if found else []


def test_real_users_earlier_options_are_named_with_their_successor() -> None:
    """Of the options real users were refused, those an earlier ms-swift had: safe-sft says what to write."""
    named = {}
    for case in CASES:
        for flag in _refused_options(case["error"]):
            now = EARLIER_OPTIONS.get(flag.removeprefix("--"))
            if now is not None:
                assert f"write {now}" in unknown_flag_warning(flag, OPTIONS), case["url"]
                named[flag] = now.split()[0]
    assert named == {"--sft_type": "--tuner_type", "--train_type": "--tuner_type", "--use_flash_attn": "--attn_impl"}
