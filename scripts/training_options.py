"""Write launcher/backends/training_options.txt: every option of the installed transformers' TrainingArguments
as HfArgumentParser builds them, with the kind of value its parser takes.

A user's script (`safe-sft torchrun SCRIPT ARGS`) parses its arguments with HfArgumentParser over its own
dataclass and TrainingArguments; argparse takes an unambiguous prefix of an option there, `--output_d` for
`--output_dir`. safe-sft reads the script's arguments the same way, from this list, without importing
transformers, so that it guards and reports in the output dir the script really writes to. The script's
own fields are not known; a prefix of one of them stays itself. tests/stack/test_training_options_real.py
holds the file to the installed transformers.

    python scripts/training_options.py          # rewrite the file
"""

from __future__ import annotations

from pathlib import Path

import option_table

OUT = Path(__file__).resolve().parents[1] / "launcher" / "backends" / "training_options.txt"


def installed_options() -> dict[str, tuple[str, ...]]:
    """The installed TrainingArguments' option names, each with its kind and the values its parser allows."""
    from transformers import TrainingArguments

    return option_table.parser_options(TrainingArguments)


def render(options: dict[str, tuple[str, ...]]) -> str:
    import transformers

    trainer = f"TrainingArguments' options (transformers {transformers.__version__})"
    return option_table.render(trainer, "training_options.py", options)


def main() -> int:
    return option_table.write(OUT, render(installed_options()))


if __name__ == "__main__":
    raise SystemExit(main())
