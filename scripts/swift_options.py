"""Write launcher/backends/swift_options.txt: every option name of the installed ms-swift's `swift sft`, and
the values swift's parser allows where it allows only some.

swift's parser (transformers' HfArgumentParser over SftArguments) takes an unambiguous prefix of an option,
`--max_len` for `--max_length`, as argparse does; safe-sft reads the user's arguments the same way, from this
list, without importing swift. A `Literal` field (`--torch_dtype`, `--quant_bits`) becomes an argparse
choice, which swift's parser checks in every rank after torchrun has started them; safe-sft checks it before
anything starts. One line per option: its name, then its allowed values where it has such a list.
tests/stack/test_swift_options_real.py holds the file to the installed swift.

    python scripts/swift_options.py          # rewrite the file
"""

from __future__ import annotations

import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "launcher" / "backends" / "swift_options.txt"


def installed_options() -> dict[str, tuple[str, ...]]:
    """The installed swift's `swift sft` option names (with `_` for `-`), each with the values its parser
    allows as text (`str` of each choice, as HfArgumentParser's choice type reads them), or () for any."""
    from swift.arguments import SftArguments
    from transformers import HfArgumentParser

    parser = HfArgumentParser([SftArguments])
    options: dict[str, tuple[str, ...]] = {}
    for flag, action in parser._option_string_actions.items():
        if flag.startswith("--"):
            options[flag[2:].replace("-", "_")] = tuple(str(choice) for choice in action.choices or ())
    return dict(sorted(options.items()))


def render(options: dict[str, tuple[str, ...]]) -> str:
    import swift

    head = (
        f"# swift sft's option names (ms-swift {swift.__version__}), each with the values swift's parser allows "
        "where it allows only some; written by scripts/swift_options.py\n"
    )
    return head + "".join(" ".join((name, *choices)) + "\n" for name, choices in options.items())


def main() -> int:
    OUT.write_text(render(installed_options()))
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
