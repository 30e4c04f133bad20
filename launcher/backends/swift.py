"""The swift backend: `swift sft`'s argv and YAML/JSON config, swift's sft entry under @record
(launcher/worker.py). Today's behaviour: every knob of the ladder, swift's v<N>-<time> run dirs. An option
is read as swift's parser reads it, an unambiguous prefix included, and a value swift's parser would not
convert (a number, a truthy word, a Literal field's choice) is refused before anything starts
(swift_options.txt holds the names and their kinds of value)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path

from launcher.backends.base import WORKER_DIR, Backend, BackendArgs
from launcher.errors import SafeSftError
from launcher.plan.swift_args import ValueKind, parse_swift_argv

OPTIONS_FILE = Path(__file__).with_name("swift_options.txt")  # scripts/swift_options.py writes it


@cache
def _option_table() -> dict[str, ValueKind]:
    """Each option's name and what swift's parser takes as its value, as the file lists them."""
    lines = OPTIONS_FILE.read_text(encoding="utf-8").splitlines()
    rows = (line.split() for line in lines if line and not line.startswith("#"))
    return {name: ValueKind(kind, tuple(choices)) for name, kind, *choices in rows}


@cache
def swift_options() -> frozenset[str]:
    """`swift sft`'s option names (ms-swift 4.6), read without importing swift."""
    return frozenset(_option_table())


def swift_value_kinds() -> Mapping[str, ValueKind]:
    """What swift's parser takes as each option's value: int, float, bool, text, flag, a Literal's choices."""
    return _option_table()


def read(argv: list[str]) -> BackendArgs:
    from launcher.swift_config import load_swift_config

    if not argv:
        raise SafeSftError("no swift arguments given", "use it as `safe-sft --model M --dataset D ...`")
    return BackendArgs((), parse_swift_argv(argv, load_swift_config(argv), swift_options(), swift_value_kinds()))


SWIFT = Backend(
    name="swift", command="safe-sft", worker=WORKER_DIR / "worker.py", read=read, trainer=("swift", "ms-swift")
)
