"""The `swift sft` command lines of 57 real scripts from public repositories (tests/data/swift_scripts/,
captured as bash passes them by scripts/capture_swift_scripts.py) read as `safe-sft ARGS` reads them:
each one is read, or refused in one line that names the value; none ends in a traceback.
tests/stack/test_real_swift_scripts_real.py holds the reading to swift's own parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.backends.swift import SWIFT, read
from launcher.errors import SafeSftError
from launcher.prepare import check_swift_options

DATA = Path(__file__).resolve().parents[1] / "data" / "swift_scripts"
CAPTURED = [json.loads(line) for line in (DATA / "captured.jsonl").read_text().splitlines()]


def read_as_safe_sft(argv: list[str]) -> str | None:
    """None where safe-sft takes the arguments; else the one-line error it stops on."""
    try:
        swift = read(list(argv)).args
        swift.check_values()
        check_swift_options(swift, SWIFT)
    except SafeSftError as err:
        assert "\n" not in err.message and err.hint
        return err.message
    return None


def test_the_scripts_are_real_and_most_were_captured() -> None:
    index = [json.loads(line) for line in (DATA / "index.jsonl").read_text().splitlines()]
    assert len(index) >= 50 and len({row["repo"] for row in index}) >= 20
    assert len(CAPTURED) >= 45 and {row["file"] for row in CAPTURED} <= {row["file"] for row in index}


@pytest.mark.parametrize("row", [pytest.param(row, id=row["file"].removeprefix("files/")) for row in CAPTURED])
def test_a_real_scripts_command_is_read_or_refused_in_one_line(row: dict) -> None:  # type: ignore[type-arg]
    read_as_safe_sft(row["argv"])
