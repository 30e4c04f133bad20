"""The format of launcher/backends/*_options.txt, shared by the scripts that write them (swift_options.py,
llamafactory_options.py): a comment line naming the trainer, its version and the script, then one line per
option: its name, its kind of value, and the values allowed where only some are."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path


def render(trainer: str, script: str, options: Mapping[str, tuple[str, ...]]) -> str:
    head = f"# {trainer}: name, kind of value, allowed values where only some are; written by scripts/{script}\n"
    return head + "".join(" ".join((name, *kind)) + "\n" for name, kind in options.items())


def write(path: Path, text: str) -> int:
    path.write_text(text)
    print(f"wrote {path}", file=sys.stderr)
    return 0
