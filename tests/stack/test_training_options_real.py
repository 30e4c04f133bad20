"""TrainingArguments' option names, as safe-sft reads a `safe-sft torchrun` script's arguments without importing
transformers, held against the installed transformers.

launcher/backends/training_options.txt is written by scripts/training_options.py from transformers' own
parser (HfArgumentParser over TrainingArguments). A script parses its arguments with that parser (over its own
dataclass too), which takes an unambiguous prefix of an option; safe-sft reads the same field from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher.backends.hf_trainer import OPTIONS_FILE, training_options
from launcher.plan.swift_args import option_key

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from training_options import installed_options, render


def test_the_shipped_option_names_are_the_installed_transformers() -> None:
    assert OPTIONS_FILE.read_text() == render(installed_options()), "run scripts/training_options.py"


@pytest.mark.parametrize(
    "typed",
    ["--output_d", "--per_device_train_b", "--per-device-train", "--gradient_accum", "--deepsp", "--max",
     "--save_only", "--xyzzy", "--learning_ra", "--resume_from"],
)  # fmt: skip
def test_a_flag_reads_as_the_field_the_scripts_parser_sets(typed: str) -> None:
    from transformers import HfArgumentParser, TrainingArguments

    parser = HfArgumentParser([TrainingArguments])
    parser.exit_on_error = False
    try:
        namespace, rest = parser.parse_known_args([typed, "1"])  # "1": an int, a float, a true bool, a text
    except (Exception, SystemExit):  # argparse: ambiguous option
        namespace, rest = None, [typed]
    ours = option_key(typed, training_options())
    if rest:  # the parser does not take it as one option: safe-sft reads no field of TrainingArguments from it
        assert ours not in training_options()
    else:
        assert namespace is not None and getattr(namespace, ours) in ("1", 1, 1.0, ["1"], True), ours
