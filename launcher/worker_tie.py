"""The first thing every rank does, before it imports torch: tie its life to its torchrun, and to this
run's safe-sft.

torchrun starts its workers in their own sessions. PR_SET_PDEATHSIG (SIGKILL when the parent dies) is the
tie, but it holds only from the moment it is asked for: a torchrun that died before then (safe-sft
SIGKILLed in the first second of an attempt, its PDEATHSIG taking torchrun down) leaves the rank
re-parented, to safe-sft (a subreaper) or to init, waiting in its process group's rendezvous for hours. So
the rank also checks, once the tie holds, that its parent is a torchrun whose own parent is the safe-sft
that started this attempt (SAFE_SFT_PID), and stops at once if not.

Standard library only: this file runs in the training processes, by path, before anything else.
"""

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
LAUNCHER_PID_ENV = "SAFE_SFT_PID"  # the same name as in launcher/run/supervisor.py


def parent_of(pid: int) -> int | None:
    """The parent of process `pid` (from /proc), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def still_tied(parent: int, launcher: str | None) -> bool:
    """Whether `parent` is this run's torchrun (its parent is the safe-sft named by `launcher`), or the
    safe-sft itself; True when no safe-sft is named (a rank started by hand)."""
    if not launcher or not launcher.isdigit():
        return True
    return int(launcher) in (parent, parent_of(parent))


def tie_to_torchrun() -> None:
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent or not still_tied(parent, os.environ.get(LAUNCHER_PID_ENV)):
        sys.exit(1)  # torchrun, or the safe-sft above it, died before the tie held: nobody waits for this rank
