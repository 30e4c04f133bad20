"""safe-sft's own terminal streams, kept from ending a run: a training run goes on whatever its stdout and
stderr do (their reader gone, `| head -1`; their file's disk full; closed by a daemon's `>&-`).

`guard_std_streams` (the console entry, before anything else): a closed fd 1 or 2 is opened on
/dev/null (Python leaves sys.stdout None there, and swift's ranks would inherit the hole), and
sys.stdout and sys.stderr become `Tolerant`: a write or flush that fails with an OSError mutes that fd
for the rest of the process, /dev/null put in its place, so what was still buffered, Python's flush at
exit and every later write go nowhere instead of raising (a run that succeeded exited 120 on its final
flush). The relay of the ranks' output (launcher/run/child.py) mutes the same way with `mute`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO


def mute(fd: int) -> None:
    """Point `fd` at /dev/null: its reader or its disk is gone, and nothing more is written to it."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


class Tolerant:
    """A text stream whose writes and flushes never raise OSError: the first that does mutes its fd."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _mute(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            mute(self._stream.fileno())

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            self._mute()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._mute()
            with contextlib.suppress(OSError):
                self._stream.flush()  # what was buffered goes to /dev/null now

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_std_streams() -> None:
    for fd, name in ((1, "stdout"), (2, "stderr")):  # a closed stdin is explain's to name (`explain - <&-`)
        try:
            os.fstat(fd)
        except OSError:  # closed: held on /dev/null, so nothing else is opened on its number
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            held = open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
            setattr(sys, name, held)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, Tolerant):
            setattr(sys, name, Tolerant(stream))
