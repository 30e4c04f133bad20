"""Raise the open-files soft limit (RLIMIT_NOFILE) to its hard limit before the ranks start, so they inherit it.

A soft limit below the hard one is a shell's or a container's default (often 1024): DataLoader workers pass
each batch's tensors as file descriptors, and NCCL, the hub's downloads and safe-sft's own logs open more.
Raising a soft limit up to the hard one needs no privilege, as `ulimit -n $(ulimit -Hn)` does; the hard limit
itself is left as it is (what remains too low is a user error the classifier names, with its fix).
"""

from __future__ import annotations

import contextlib
import resource

NR_OPEN = 1 << 20  # the kernel's default fs.nr_open: no soft limit may exceed it, however unlimited the hard one


def raise_open_files() -> tuple[int, int]:
    """The soft limit before and after (the hard one where it could be raised to it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NR_OPEN if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        # a hard limit above fs.nr_open refuses it: the soft one then stays, as plain swift would run it
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
