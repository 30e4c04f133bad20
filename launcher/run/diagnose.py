"""What helps diagnose a hang, collected before the hung attempt is stopped: Python stacks via py-spy.

py-spy is optional (`pip install py-spy`); without it the report says so. The NCCL flight recorder is
torch's own: set TORCH_NCCL_TRACE_BUFFER_SIZE (and TORCH_NCCL_DUMP_ON_TIMEOUT=1) and it dumps on a
collective timeout.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

PY_SPY_TIMEOUT = 20


def collect_stacks(processes: list[Any], attempt_dir: Path) -> list[str]:
    """Dump each training process's Python stack into attempt_dir/stacks.txt; return what was done."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        return ["py-spy is not installed: no stacks collected (pip install py-spy)"]
    out = attempt_dir / "stacks.txt"
    with out.open("w") as handle:
        for proc in processes:
            handle.write(f"=== pid {proc.pid} ===\n")
            try:
                dump = subprocess.run(
                    [py_spy, "dump", "--pid", str(proc.pid)], capture_output=True, text=True, timeout=PY_SPY_TIMEOUT
                )
                handle.write(dump.stdout or dump.stderr)
            except subprocess.TimeoutExpired:
                handle.write("py-spy timed out\n")
    return [f"python stacks of {len(processes)} processes: {out}"]
