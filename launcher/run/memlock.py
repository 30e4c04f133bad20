"""Raise RLIMIT_MEMLOCK in the launcher before spawning, so every training process inherits it.

Unlimited where the process may; else the soft limit up to the hard one. When the hard limit is finite,
the status carries the fix, because pinned host memory (DeepSpeed offload, NCCL) needs more.
"""

from __future__ import annotations

import os
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


# root that still cannot raise it: a container without CAP_SYS_RESOURCE, where `ulimit -l` fails as well
ROOT_MEMLOCK_FIX = (
    "this process runs as root and still cannot raise it: the container lacks CAP_SYS_RESOURCE, so raise it "
    "where the container starts: `docker run --ulimit memlock=-1` (or `--cap-add SYS_RESOURCE`); Kubernetes: "
    "the container runtime's default ulimits (containerd's or CRI-O's config); Slurm: PropagateResourceLimits=ALL "
    "in slurm.conf and LimitMEMLOCK=infinity in slurmd's systemd unit"
)


@dataclass(frozen=True)
class MemlockStatus:
    before: Rlimit
    after: Rlimit
    problem: str | None  # set when the hard limit stays finite
    as_root: bool = False  # the process that could not raise it was root

    @property
    def raised(self) -> bool:
        return self.before != self.after

    @property
    def fix(self) -> str | None:
        if self.problem is None:
            return None
        return ROOT_MEMLOCK_FIX if self.as_root else MEMLOCK_FIX


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
    return MemlockStatus(before, after, problem, as_root=os.geteuid() == 0)
