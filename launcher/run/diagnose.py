"""What helps diagnose a hang, collected before the hung attempt is stopped: each training process's
state (a stopped or uninterruptible rank shows here) and its Python stacks via py-spy.

py-spy is optional (`pip install safe-sft[diagnose]`); without it the report says so. The NCCL flight
recorder is torch's own: set TORCH_NCCL_TRACE_BUFFER_SIZE (and TORCH_NCCL_DUMP_ON_TIMEOUT=1) and it dumps
on a collective timeout.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

PY_SPY_TIMEOUT = 20
NOTABLE_STATES = {psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_DISK_SLEEP, psutil.STATUS_ZOMBIE}


# accelerate's retry of a smaller batch after a CUDA OOM (--auto_find_batch_size): on several ranks only the
# rank that ran out retries, and the others wait for it in their next collective
_OOM_RETRY_FRAME = "find_executable_batch_size"


def oom_retry_in_stacks(attempt_dir: Path) -> str | None:
    """What the hung attempt's stacks (stacks.txt) show caused the hang, where it was a CUDA OOM that
    accelerate caught on one rank; None otherwise."""
    try:
        stacks = (attempt_dir / "stacks.txt").read_text(errors="replace")
    except OSError:
        return None
    if _OOM_RETRY_FRAME not in stacks:
        return None
    return (
        f"a rank's stack is in accelerate's {_OOM_RETRY_FRAME}: it caught a CUDA OOM and retries a smaller batch "
        "on its own while the other ranks wait (--auto_find_batch_size)"
    )


def find_py_spy() -> str | None:
    """On PATH, or beside this interpreter (a virtual environment's bin/ that was never activated)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


def process_state(proc: Any) -> str:
    with contextlib.suppress(psutil.Error):
        return str(proc.status())
    return "gone"


def who(proc: Any) -> str:
    """`rank R (pid N)` for a process torchrun started for a rank (its RANK; a rank's own children, such as
    dataloader workers, inherit it), else `pid N` (torchrun itself)."""
    rank = None
    with contextlib.suppress(psutil.Error, OSError):
        rank = proc.environ().get("RANK")
    return f"rank {rank} (pid {proc.pid})" if rank else f"pid {proc.pid}"


def collect_stacks(processes: list[Any], attempt_dir: Path) -> list[str]:
    """Write each process's state and Python stack to attempt_dir/stacks.txt; return what was found."""
    states = {proc.pid: process_state(proc) for proc in processes}  # before py-spy pauses anything
    names = {proc.pid: who(proc) for proc in processes}
    found = [f"{names[pid]} is {state}" for pid, state in states.items() if state in NOTABLE_STATES]
    py_spy = find_py_spy()
    if py_spy is None:
        return [*found, "py-spy is not installed: no stacks collected (pip install py-spy)"]
    out = attempt_dir / "stacks.txt"
    unread: list[str] = []  # a stopped process cannot be paused to be read: its state says what there is
    with out.open("w") as handle:
        for proc in processes:
            handle.write(f"=== {names[proc.pid]} ({states[proc.pid]}) ===\n")
            try:
                dump = subprocess.run(
                    [py_spy, "dump", "--pid", str(proc.pid)], capture_output=True, text=True, timeout=PY_SPY_TIMEOUT
                )
                handle.write(dump.stdout + dump.stderr)
                if dump.returncode != 0:
                    unread.append(names[proc.pid])
            except subprocess.TimeoutExpired:
                handle.write("py-spy timed out\n")
                unread.append(names[proc.pid])
    read = len(processes) - len(unread)
    missing = f" ({', '.join(unread)}: its stack could not be read)" if unread else ""
    return [*found, f"python stacks of {read} of {len(processes)} processes{missing}: {out}"]
