"""The swift backend: `swift sft`'s argv and YAML/JSON config, swift's sft entry under @record
(launcher/worker.py). Today's behaviour: every knob of the ladder, swift's v<N>-<time> run dirs. An option
is read as swift's parser reads it, an unambiguous prefix included, and a value swift's parser refuses
(not one of a Literal field's choices) is refused before anything starts (swift_options.txt holds both)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from launcher.backends.base import WORKER_DIR, Backend, BackendArgs
from launcher.errors import SafeSftError
from launcher.plan.swift_args import parse_swift_argv

OPTIONS_FILE = Path(__file__).with_name("swift_options.txt")  # scripts/swift_options.py writes it


@cache
def _option_table() -> dict[str, tuple[str, ...]]:
    """Each option's name and the values swift's parser allows ((): any), as the file lists them."""
    lines = OPTIONS_FILE.read_text(encoding="utf-8").splitlines()
    rows = (line.split() for line in lines if line and not line.startswith("#"))
    return {name: tuple(choices) for name, *choices in rows}


@cache
def swift_options() -> frozenset[str]:
    """`swift sft`'s option names (ms-swift 4.6), read without importing swift."""
    return frozenset(_option_table())


@cache
def swift_choices() -> dict[str, tuple[str, ...]]:
    """The options whose values swift's parser limits (its Literal fields), with the values it allows."""
    return {name: choices for name, choices in _option_table().items() if choices}


def read(argv: list[str]) -> BackendArgs:
    from launcher.swift_config import load_swift_config

    if not argv:
        raise SafeSftError("no swift arguments given", "use it as `safe-sft --model M --dataset D ...`")
    return BackendArgs((), parse_swift_argv(argv, load_swift_config(argv), swift_options(), swift_choices()))


SWIFT = Backend(name="swift", command="safe-sft", worker=WORKER_DIR / "worker.py", read=read)
