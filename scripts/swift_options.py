"""Write launcher/backends/swift_options.txt: every option of the installed ms-swift's `swift sft`, with the
kind of value its parser takes, and the values it allows where it allows only some.

swift's parser (transformers' HfArgumentParser over SftArguments) takes an unambiguous prefix of an option,
`--max_len` for `--max_length`, as argparse does; safe-sft reads the user's arguments the same way, from this
list, without importing swift. The parser also converts each value (int, float, a truthy word, a Literal
field's choice) in every rank after torchrun has started them, and stops on one it cannot convert; safe-sft
checks the same before anything starts. One line per option: its name, its kind (int, float, bool, text,
flag: no value; `+` after a kind: one or more such values), then its allowed values where it has a list.
tests/stack/test_swift_options_real.py holds the file to the installed swift.

    python scripts/swift_options.py          # rewrite the file
"""

from __future__ import annotations

from pathlib import Path

import option_table

OUT = Path(__file__).resolve().parents[1] / "launcher" / "backends" / "swift_options.txt"


def installed_options() -> dict[str, tuple[str, ...]]:
    """The installed swift's `swift sft` option names, each with its kind and the values its parser allows."""
    from swift.arguments import SftArguments

    return option_table.parser_options(SftArguments)


def render(options: dict[str, tuple[str, ...]]) -> str:
    import swift

    return option_table.render(f"swift sft's options (ms-swift {swift.__version__})", "swift_options.py", options)


def main() -> int:
    return option_table.write(OUT, render(installed_options()))


if __name__ == "__main__":
    raise SystemExit(main())
