"""The disk where the checkpoints will be written: free space, and whether safe-sft and swift can write there;
after a full disk, which one it was.

Both look at the nearest existing parent of output_dir (the dir itself once it exists): that is where
swift's mkdir will land.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DiskFacts:
    path: str  # what was measured: the output dir, or its nearest existing parent
    free_bytes: int | None
    problem: str | None = None  # why nothing can be written there; None when it can


def nearest_existing(path: Path) -> Path:
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def disk_free(path: Path) -> int | None:
    try:
        return shutil.disk_usage(nearest_existing(path)).free
    except OSError:
        return None


FEW_FILES = 1000  # free inodes below this are named: a filesystem can run out of files with space to spare


def free_files(path: Path) -> int | None:
    """The files (inodes) this user can still create there; None where the filesystem does not count them."""
    try:
        stats = os.statvfs(nearest_existing(path))
    except OSError:
        return None
    return stats.f_favail if stats.f_files else None


def file_size_limit() -> int | None:
    """This process's RLIMIT_FSIZE (`ulimit -f`) in bytes, which its children inherit; None when unlimited. A
    write past it fails as a full disk does (EFBIG, a cut-short file) on a disk with room."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def free_words(path: Path) -> str:
    """`<free space> free`, and the files (inodes) still free where few are: what a full disk ran out of."""
    from launcher.units import fmt_bytes

    space, files = fmt_bytes(disk_free(path)), free_files(path)
    if files == 0:
        return f"{space} free, but no free files (inodes)"
    if files is not None and files < FEW_FILES:
        return f"{space} free, {files} free files (inodes)"
    return f"{space} free"


# where the ranks write besides the output dir: the hubs' caches, datasets' cache, temporary files
CACHE_VARIABLES = ("HF_DATASETS_CACHE", "HF_HOME", "HF_HUB_CACHE", "MODELSCOPE_CACHE", "TRITON_CACHE_DIR", "TMPDIR")
_QUOTED_PATH = re.compile(r"""['"](/[^'"]+)['"]""")
ROOMY = 1 << 30  # an output dir with more free than this is not the disk that filled
NEARLY_FULL = 256 << 20  # another disk with less free than this is


def which_disk_is_full(output_dir: Path, evidence: Sequence[str], env: Mapping[str, str]) -> str:
    """The words for a full disk's free space: the output dir's, and where it has room, the disk that has
    none among the paths the error names and the caches the ranks write to (a datasets cache on a full disk
    had been reported with the output dir's 60 GiB free, and no other disk named)."""
    said = f"{output_dir} has {free_words(output_dir)}"
    free, files = disk_free(output_dir), free_files(output_dir)
    if free is None or free < ROOMY or files == 0:
        return said
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    candidates = [Path(found) for line in evidence for found in _QUOTED_PATH.findall(line)]
    candidates += [Path(env[name]) for name in CACHE_VARIABLES if env.get(name)]
    candidates += [home / ".cache", Path("/tmp")]
    for path in candidates:
        room, left = disk_free(path), free_files(path)
        if (room is not None and room < NEARLY_FULL) or left == 0:
            return f"{said}; {nearest_existing(path)} has {free_words(path)}: that disk is the full one"
    caches = "HF_HOME, HF_DATASETS_CACHE, MODELSCOPE_CACHE, TMPDIR"
    return f"{said}: the full disk is another one (a cache the ranks write to: {caches})"


def probe_disk(output_dir: Path) -> DiskFacts:
    """Free space and writability at `output_dir` (read-only filesystems and files in the way named)."""
    where = nearest_existing(output_dir)
    free = disk_free(output_dir)
    problem = None
    blocker = _in_the_way(output_dir)
    if blocker is not None:
        problem = blocker
    elif _holds_no_blocks(where):
        problem = f"{where} is on a kernel filesystem (proc, sysfs), which holds no files"
    elif _read_only_fs(where):
        problem = f"{where} is on a read-only filesystem"
    elif not os.access(where, os.W_OK | os.X_OK):
        problem = f"{where} is not writable by this user"
    return DiskFacts(path=str(where), free_bytes=free, problem=problem)


def _in_the_way(path: Path) -> str | None:
    """What stops `path` being made as a folder: the first existing part of it, from the path up, that is
    not a folder, or a symlink that leads nowhere (a purged scratch dir, a loop: `exists()` is False for
    it, so the free space would be measured on the wrong filesystem)."""
    for part in (path.absolute(), *path.absolute().parents):
        if part.is_symlink() and not part.exists():
            try:
                target = f" ({os.readlink(part)})"
            except OSError:
                target = ""
            return f"{part} is a symlink that leads nowhere{target}"
        if part.exists():
            return None if part.is_dir() else f"{part} is {_kind(part)}, not a directory"
    return None


def _kind(path: Path) -> str:
    mode = path.stat().st_mode
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a file"


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _holds_no_blocks(path: Path) -> bool:
    """proc, sysfs and their kind report a size of 0 blocks: swift's mkdir there fails, whoever runs it."""
    try:
        return os.statvfs(path).f_blocks == 0
    except OSError:
        return False
