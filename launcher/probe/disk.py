"""Free disk space where the checkpoints will be written (the nearest existing parent of output_dir)."""

from __future__ import annotations

import shutil
from pathlib import Path


def disk_free(path: Path) -> int | None:
    probe = path.resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None
