"""The format of launcher/backends/*_options.txt, shared by the scripts that write them (swift_options.py,
training_options.py, llamafactory_options.py): a comment line naming the trainer, its version and the
script, then one line per option: its name, its kind of value, and the values allowed where only some are.
parser_options reads them from transformers' HfArgumentParser over the trainer's dataclasses."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def render(trainer: str, script: str, options: Mapping[str, tuple[str, ...]]) -> str:
    head = f"# {trainer}: name, kind of value, allowed values where only some are; written by scripts/{script}\n"
    return head + "".join(" ".join((name, *kind)) + "\n" for name, kind in options.items())


def write(path: Path, text: str) -> int:
    path.write_text(text)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _kind(action: Any) -> str:
    """How the parser converts this option's value, in the file's words."""
    if action.nargs == 0:
        return "flag"
    name = getattr(action.type, "__name__", "")
    kind = {"int": "int", "float": "float", "string_to_bool": "bool"}.get(name, "text")
    return kind + "+" if action.nargs == "+" else kind


def parser_options(*dataclass_types: Any) -> dict[str, tuple[str, ...]]:
    """The option names (with `_` for `-`) of transformers' HfArgumentParser over these dataclasses, each with
    its kind and the values its parser allows as text (`str` of each choice, as the choice type reads them)."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(list(dataclass_types))
    options: dict[str, tuple[str, ...]] = {}
    for flag, action in parser._option_string_actions.items():
        if flag.startswith("--"):
            choices = tuple(str(choice) for choice in action.choices or ())
            options[flag[2:].replace("-", "_")] = ("choice" if choices else _kind(action), *choices)
    return dict(sorted(options.items()))
