"""The installed ms-swift's model types, registered names, architectures and templates, and the names its
registries hold for its name-valued options, read from
swift_models.txt (scripts/swift_models.py writes it from swift itself; its docstring gives the format).

Contract: `swift_models()` parses the file once per process into a SwiftModels; nothing imports swift.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

TABLE_FILE = Path(__file__).with_name("swift_models.txt")


@dataclass(frozen=True)
class SwiftModels:
    """swift's registry, as its model and template lookup reads it."""

    version: str  # the ms-swift version the table was written from
    templates_of: dict[str, tuple[str | None, tuple[str, ...]]]  # type: (its template, its candidate templates)
    names: dict[str, tuple[str, str | None]]  # a registered id's last part, lower case: (type, group template)
    arch_types: dict[str, tuple[str, ...]]  # architecture (`null`: none given): the types registered for it
    system_chars: dict[str, tuple[int, int, int, int]]  # template: its default system's (latin, wide, digits, other)
    registered: dict[str, tuple[str, ...]]  # a name-valued option (optimizer, callbacks, ...): the names it takes
    loss_scale_bases: tuple[str, ...] = ()  # the base strategies a --loss_scale may begin with


def _or_none(text: str) -> str | None:
    return None if text == "-" else text


def parse(text: str) -> SwiftModels:
    """The table's text as a SwiftModels."""
    found = re.search(r"ms-swift ([\d.]+)", text.partition("\n")[0])
    models = SwiftModels(found.group(1) if found else "", {}, {}, {}, {}, {})
    bases: tuple[str, ...] = ()
    for line in text.splitlines():
        kind, *fields = line.split()
        if kind == "type":
            name, template, candidates = fields
            models.templates_of[name] = (_or_none(template), tuple(c for c in candidates.split(",") if c != "-"))
        elif kind == "name":
            name, model_type, template = fields
            models.names[name] = (model_type, _or_none(template))
        elif kind == "arch":
            models.arch_types[fields[0]] = tuple(fields[1:])
        elif kind == "template":
            latin, wide, digits, other = map(int, fields[1:])
            models.system_chars[fields[0]] = (latin, wide, digits, other)
        elif kind == "registered":
            models.registered[fields[0]] = tuple(fields[1:])
        elif kind == "loss_scale_base":
            bases = tuple(fields)
    return replace(models, loss_scale_bases=bases)


@cache
def swift_models() -> SwiftModels:
    return parse(TABLE_FILE.read_text(encoding="utf-8"))


def installed_swift_like(table: str) -> str | None:
    """The installed ms-swift's version where it is the major.minor a table of safe-sft's was read from
    (another version may differ: the checks built on the table stand down), else None."""
    import importlib.metadata

    try:
        installed = importlib.metadata.version("ms-swift")
    except importlib.metadata.PackageNotFoundError:
        return None
    return installed if installed.split(".")[:2] == table.split(".")[:2] else None
