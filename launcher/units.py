"""Byte sizes: parse `24GiB` / `512G` / `7.6e9`-style user input and format bytes for people.

Pure functions; every parse error is a `SafeSftError` naming the value.
"""

from __future__ import annotations

import re

from launcher.errors import SafeSftError

GiB = 1024**3
MiB = 1024**2
KiB = 1024

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": KiB,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": MiB,
    "g": GiB,
    "gb": 1000**3,
    "gib": GiB,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
MAX_BYTES = 1024**6  # an exbibyte
BARE_BYTES_LEAST = MiB  # a bare number below this is a size typed without its unit
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text: str, what: str = "size") -> int:
    """`24GiB` -> bytes. A bare `G` means GiB, as people write GPU and RAM sizes."""
    match = _SIZE_RE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise SafeSftError(f"{what} {text!r} is not a size", "write it like 24GiB, 80G or 512GiB")
    value = float(match.group(1)) * _SIZE_UNITS[unit]
    if not value < MAX_BYTES:  # 1e999 is infinity
        raise SafeSftError(f"{what} {text!r} is out of range", "write it like 24GiB, 80G or 512GiB")
    if unit == "" and value < BARE_BYTES_LEAST:  # `8x80` for 80 GiB GPUs would plan for 80-byte ones
        number = match.group(1)
        fix = f"write {number}GiB" if value > 0 else "write it like 24GiB, 80G or 512GiB"  # 0GiB is no size either
        raise SafeSftError(f"{what} {text!r} is {number} bytes: its unit is missing", fix)
    return int(value)


def parse_count(text: str, what: str, least: int = 0, usable: int | None = None) -> int:
    """A whole number of at least `least` such as NPROC_PER_NODE=8, or a clear error naming the value and,
    in its fix, the least `usable` value (where a caller has its own words for the values in between)."""
    try:
        value = int(text.strip())
    except ValueError:
        raise SafeSftError(f"{what}={text!r} is not an integer", f"set {what} to a whole number") from None
    if value < least:
        below = "negative" if value < 0 else f"below {least}"
        raise SafeSftError(f"{what}={value} is {below}", f"set {what} to {least if usable is None else usable} or more")
    return value


MAX_PARAMS = 10**15
BARE_COUNT_LEAST = 10**4  # a bare count below this is a size in billions typed without its B


def parse_param_count(text: str) -> int:
    """`7.6e9`, `7B`, `500M` -> a parameter count."""
    match = re.match(r"^\s*(-?[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*([kmbt]?)\s*$", text, re.IGNORECASE)
    if not match:
        raise SafeSftError(f"parameter count {text!r} is not a number", "write it like 7.6e9 or 7B")
    scale = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}[match.group(2).lower()]
    value = float(match.group(1)) * scale
    if value < 1:
        raise SafeSftError(f"parameter count {text!r} is less than one parameter", "write the model's size like 7B")
    if scale == 1 and value < BARE_COUNT_LEAST:  # `7` for a 7B model would plan for seven parameters
        raise SafeSftError(
            f"parameter count {text!r} is {match.group(1)} parameters, not {match.group(1)} billion",
            f"write {match.group(1)}B for billions, or the exact count like 7.6e9",
        )
    if not 1 <= value <= MAX_PARAMS:  # 1e999 is infinity, and no model has a quadrillion parameters
        raise SafeSftError(f"parameter count {text!r} is out of range (1 to 1e15)", "write it like 7.6e9 or 7B")
    return int(value)


def fmt_bytes(n: int | None) -> str:
    """Bytes for people: `1.5 GiB`, `64 MiB`, `unknown`."""
    if n is None:
        return "unknown"
    if abs(n) >= 1024**6:  # no machine's: said so, in a width the plan's tables can hold
        return f"{n / 1024**5:.1e} PiB"
    for unit, size in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def fmt_params(n: int | None) -> str:
    """Parameter counts for people: `7.62B`, `494.0M`."""
    if n is None:
        return "unknown"
    if n >= 10**15:  # past any model: a number, not thousands of billions
        return f"{n:.2e}"
    if n >= 10**9:
        return f"{n / 10**9:.2f}B"
    if n >= 10**6:
        return f"{n / 10**6:.1f}M"
    return f"{n:,}"
