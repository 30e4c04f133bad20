"""swift sft's option names, as safe-sft reads them without importing swift, held against the installed swift.

launcher/backends/swift_options.txt is written by scripts/swift_options.py from swift's own parser
(transformers' HfArgumentParser over SftArguments). That parser takes an unambiguous prefix of an option
(argparse's allow_abbrev), and safe-sft reads the user's arguments the same way: a plan made for
`--max_len 4096` must plan for 4096 tokens, as swift will train.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher.backends.swift import OPTIONS_FILE, swift_options
from launcher.plan.swift_args import option_key

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from swift_options import installed_options, render


def test_the_shipped_option_names_are_the_installed_swifts() -> None:
    assert OPTIONS_FILE.read_text() == render(installed_options()), "run scripts/swift_options.py"


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
