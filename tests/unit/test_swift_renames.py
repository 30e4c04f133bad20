"""An earlier ms-swift's option is named with what ms-swift 4 takes instead (launcher.plan.swift_renames),
held to the option table read from swift 4.6's own parser (launcher/backends/swift_options.txt)."""

from __future__ import annotations

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
