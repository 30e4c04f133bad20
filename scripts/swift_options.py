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
from typing import Any

import option_table

OUT = Path(__file__).resolve().parents[1] / "launcher" / "backends" / "swift_options.txt"


def _kind(action: Any) -> str:
    """How the parser converts this option's value, in the file's words."""
    if action.nargs == 0:
        return "flag"
    name = getattr(action.type, "__name__", "")
    kind = {"int": "int", "float": "float", "string_to_bool": "bool"}.get(name, "text")
    return kind + "+" if action.nargs == "+" else kind


def installed_options() -> dict[str, tuple[str, ...]]:
    """The installed swift's `swift sft` option names (with `_` for `-`), each with its kind and the values its
    parser allows as text (`str` of each choice, as HfArgumentParser's choice type reads them)."""
    from swift.arguments import SftArguments
    from transformers import HfArgumentParser

    parser = HfArgumentParser([SftArguments])
    options: dict[str, tuple[str, ...]] = {}
    for flag, action in parser._option_string_actions.items():
        if flag.startswith("--"):
            choices = tuple(str(choice) for choice in action.choices or ())
            options[flag[2:].replace("-", "_")] = ("choice" if choices else _kind(action), *choices)
    return dict(sorted(options.items()))


def render(options: dict[str, tuple[str, ...]]) -> str:
    import swift

    return option_table.render(f"swift sft's options (ms-swift {swift.__version__})", "swift_options.py", options)


def main() -> int:
    return option_table.write(OUT, render(installed_options()))


if __name__ == "__main__":
    raise SystemExit(main())
