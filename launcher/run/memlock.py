"""Raise RLIMIT_MEMLOCK in the launcher before spawning, so every training process inherits it.

Unlimited where the process may; else the soft limit up to the hard one. When the hard limit is finite,
the status carries the fix, because pinned host memory (DeepSpeed offload, NCCL) needs more.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from launcher.model import Rlimit
from launcher.units import fmt_bytes

MEMLOCK_FIX = (
    "raise it where training starts: `ulimit -l unlimited` (as root, before safe-sft); for all logins, "
    "/etc/security/limits.conf lines `* soft memlock unlimited` and `* hard memlock unlimited`; "
    "Docker: `docker run --ulimit memlock=-1`; Slurm: PropagateResourceLimits=ALL in slurm.conf and "
    "LimitMEMLOCK=infinity in slurmd's systemd unit"
)


@dataclass(frozen=True)
class MemlockStatus:
    before: Rlimit
    after: Rlimit
    problem: str | None  # set when the hard limit stays finite

    @property
    def raised(self) -> bool:
        return self.before != self.after


def _read() -> Rlimit:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    inf = resource.RLIM_INFINITY
    return Rlimit(None if soft == inf else soft, None if hard == inf else hard)


def raise_memlock() -> MemlockStatus:
    before = _read()
    inf = resource.RLIM_INFINITY
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (inf, inf))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))
    after = _read()
    problem = None
    if after.hard is not None:
        problem = (
            f"RLIMIT_MEMLOCK hard limit is {fmt_bytes(after.hard)} and this process cannot raise it: "
            "pinned memory for DeepSpeed offload and NCCL can fail"
        )
    return MemlockStatus(before, after, problem)
