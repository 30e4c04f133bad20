"""Process limits that break distributed training: RLIMIT_MEMLOCK, RLIMIT_NOFILE, and /dev/shm's size."""

from __future__ import annotations

import os
import resource
from pathlib import Path

from launcher.model import Limits, Rlimit


def _rlimit(which: int) -> Rlimit:
    soft, hard = resource.getrlimit(which)
    return Rlimit(
        soft=None if soft == resource.RLIM_INFINITY else soft,
        hard=None if hard == resource.RLIM_INFINITY else hard,
    )


def shm_size(path: Path = Path("/dev/shm")) -> int | None:
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_blocks * stats.f_frsize


def probe_limits(shm_path: Path = Path("/dev/shm")) -> Limits:
    warnings: list[str] = []
    memlock = _rlimit(resource.RLIMIT_MEMLOCK)
    nofile = _rlimit(resource.RLIMIT_NOFILE)
    shm = shm_size(shm_path)
    if shm is None:
        warnings.append(f"cannot read the size of {shm_path}: shared memory unknown")
    return Limits(memlock=memlock, nofile=nofile, shm_bytes=shm, warnings=tuple(warnings))
