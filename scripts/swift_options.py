"""Write launcher/backends/swift_options.txt: every option name of the installed ms-swift's `swift sft`.

swift's parser (transformers' HfArgumentParser over SftArguments) takes an unambiguous prefix of an option,
`--max_len` for `--max_length`, as argparse does; safe-sft reads the user's arguments the same way, from this
list, without importing swift. tests/stack/test_swift_options_real.py holds the file to the installed swift.

    python scripts/swift_options.py          # rewrite the file
"""

from __future__ import annotations

import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "launcher" / "backends" / "swift_options.txt"


def installed_options() -> list[str]:
    """The installed swift's `swift sft` option names, with `_` for `-`, sorted."""
    from swift.arguments import SftArguments
    from transformers import HfArgumentParser

    parser = HfArgumentParser([SftArguments])
    return sorted({s[2:].replace("-", "_") for s in parser._option_string_actions if s.startswith("--")})


def render(names: list[str]) -> str:
    import swift

    head = f"# swift sft's option names (ms-swift {swift.__version__}), written by scripts/swift_options.py\n"
    return head + "".join(f"{name}\n" for name in names)


def main() -> int:
    OUT.write_text(render(installed_options()))
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
