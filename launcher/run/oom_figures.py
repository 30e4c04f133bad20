"""The memory figures in PyTorch's CUDA OOM message: the GPU's capacity and what the process held.

Pure. PyTorch (2.1+) writes, on one line: `Tried to allocate 2.00 GiB. GPU 0 has a total capacity of
79.32 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.20 GiB memory in
use.` Either figure may be missing (older versions, a truncated line): None for that one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_SIZE = r"([0-9]+(?:\.[0-9]+)?) ?(bytes|B|KiB|MiB|GiB|TiB)"
_CAPACITY = re.compile(r"total capacity of " + _SIZE)
_IN_USE = re.compile(r"this process has " + _SIZE + r" memory in use")


@dataclass(frozen=True)
class OomFigures:
    capacity_bytes: int | None
    in_use_bytes: int | None


def oom_figures(lines: Iterable[str]) -> OomFigures:
    """The first capacity and in-use figures among `lines` (a failure's evidence)."""
    capacity = in_use = None
    for line in lines:
        capacity = capacity or _bytes(_CAPACITY.search(line))
        in_use = in_use or _bytes(_IN_USE.search(line))
    return OomFigures(capacity, in_use)


def _bytes(match: re.Match[str] | None) -> int | None:
    return None if match is None else int(float(match.group(1)) * _UNITS[match.group(2)])
