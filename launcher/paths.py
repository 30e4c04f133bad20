"""Tests of a path a user's value makes: they answer, never raise.

Contract: `is_file(path)` is Path.is_file, False where the path cannot be a file's at all (a name longer than
the file system takes, inline JSON taken for a path, a NUL byte) instead of the OSError or ValueError.
"""

from __future__ import annotations

from pathlib import Path


def is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False
