"""Host RAM available to this process: psutil's view capped by the cgroup limit (v1 or v2).

In a container psutil reports the host's RAM; the cgroup limit minus the cgroup's usage is what the
training processes can really get.
"""

from __future__ import annotations

from pathlib import Path

import psutil

from launcher.model import HostMemory

UNLIMITED_CGROUP_V1 = 1 << 60  # v1 reports "no limit" as a huge page-aligned number


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def memory_cgroups(
    root: Path = Path("/sys/fs/cgroup"), proc_self: Path = Path("/proc/self/cgroup")
) -> list[tuple[int, Path]]:
    """This process's memory cgroup folders, in /proc/self/cgroup's order, with their version: v1's memory
    controller's folder (its mount's root where that folder is not there: a container that sees its own cgroup
    at the root), v2's unified one (`root` itself for v2's root cgroup)."""
    try:
        lines = proc_self.read_text().splitlines()
    except OSError:
        return []
    found: list[tuple[int, Path]] = []
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if "memory" in controllers.split(","):
            base = root / "memory" / rel
            found.append((1, base if base.exists() else root / "memory"))
        elif controllers == "":
            found.append((2, root / rel))
    return found


def cgroup_limit(
    root: Path = Path("/sys/fs/cgroup"), proc_self: Path = Path("/proc/self/cgroup")
) -> tuple[int | None, int | None]:
    """(limit, usage) in bytes of this process's memory cgroup; (None, None) where unlimited or unknown."""
    for version, base in memory_cgroups(root, proc_self):
        if version == 1:
            limit = _read_int(base / "memory.limit_in_bytes")
            if limit is not None and limit < UNLIMITED_CGROUP_V1:
                return limit, _read_int(base / "memory.usage_in_bytes")
        else:
            limit = _read_int(base / "memory.max")
            if limit is not None:
                return limit, _read_int(base / "memory.current")
    return None, None


def probe_memory(root: Path = Path("/sys/fs/cgroup"), proc_self: Path = Path("/proc/self/cgroup")) -> HostMemory:
    try:
        vm = psutil.virtual_memory()
    except Exception as err:
        return HostMemory(None, None, warnings=(f"cannot read host memory ({err}): RAM unknown",))
    limit, usage = cgroup_limit(root, proc_self)
    available = int(vm.available)
    if limit is not None:
        available = min(available, max(limit - (usage or 0), 0))
    return HostMemory(available_bytes=available, total_bytes=int(vm.total), cgroup_limit_bytes=limit)
