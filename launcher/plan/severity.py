"""How strongly a failure points at the root cause: the strongest of several ranks or nodes wins.

A peer's communication error follows another rank's death, and torchrun SIGTERMs the survivors, so
those rank below a primary cause (an OOM, a user error, a crash); a SIGKILL ranks between, since no
orderly shutdown sends SIGKILL first.
"""

from __future__ import annotations

from launcher.model import FailureKind

PRIMARY = 3.0
STOPPED = 2.7  # the launcher itself was signalled or the job cancelled: beats the SIGKILLs and SIGTERMs that follow
SIGKILLED = 2.5
SECONDARY = 2.0
WEAK = 1.0
# A peer's communication error, or a signal, after another rank exited with an error of its own: even an
# error no pattern names (unknown's 0.0) comes before it, as torchrun's own root cause does.
CONSEQUENCE = -1.0
_STRENGTH = {
    FailureKind.COMM_TIMEOUT: SECONDARY,
    FailureKind.COMM_ERROR: SECONDARY,
    FailureKind.KILLED: WEAK,
    FailureKind.INTERRUPTED: STOPPED,
    FailureKind.UNKNOWN: 0.0,
}


def strength(kind: FailureKind, exit_code: int | None = None) -> float:
    if kind is FailureKind.KILLED and exit_code == -9:
        return SIGKILLED
    return _STRENGTH.get(kind, PRIMARY)
