"""The checkpoint steps a run saves, from its arguments (launcher/run/saves.py)."""

from __future__ import annotations

import pytest

from launcher.plan.swift_args import parse_swift_argv
from launcher.run.saves import steps_saved


@pytest.mark.parametrize(
    ("argv", "after", "saved"),
    [
        (["--max_steps", "7", "--save_steps", "3"], 0, {3, 6, 7}),  # and the last step, as swift's patcher saves
        (["--max_steps", "7", "--save_steps", "3"], 3, {6, 7}),  # resumed at 3: only what comes after
        (["--max_steps", "6", "--save_steps", "3"], 0, {3, 6}),
        (["--max_steps", "2"], 0, {2}),  # save_steps 500 by default: the end alone
        (["--save_strategy", "no", "--max_steps", "9"], 0, set()),
        (["--save_strategy", "NO"], 0, set()),
        (["--max_steps", "7", "--save_steps", "3"], 7, set()),  # nothing left to train
    ],
)
def test_the_steps_a_run_saves(argv: list[str], after: int, saved: set[int]) -> None:
    assert steps_saved(parse_swift_argv(["--model", "m", *argv]), after) == saved


@pytest.mark.parametrize(
    "argv",
    [
        ["--save_steps", "3"],  # epochs: the data decides the steps
        ["--max_steps", "-1", "--save_steps", "3"],
        ["--max_steps", "9", "--save_steps", "0.1"],  # a share of the total steps
        ["--max_steps", "9", "--save_strategy", "epoch"],
        ["--max_steps", "9", "--save_strategy", "best"],
        ["--max_steps", "9", "--save_total_limit", "2"],  # the trainer deletes other checkpoints too
        ["--max_steps", "nine"],
    ],
)
def test_steps_the_arguments_do_not_fix_are_unknown(argv: list[str]) -> None:
    assert steps_saved(parse_swift_argv(["--model", "m", *argv]), 0) is None
