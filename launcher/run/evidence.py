"""Gather what an attempt left behind: per-rank error files, kernel OOM counters, swift's step log.

Reads only; each source is parsed here once into the typed values launcher.run.classify consumes.
"""

from __future__ import annotations

import json
import stat
from datetime import datetime
from pathlib import Path

from launcher.run import resolved
from launcher.run.checkpoints import run_dirs
from launcher.run.classify import RankFailure

_VMSTAT = Path("/proc/vmstat")


def ranks_finished(attempt_dir: Path, node_rank: int, nproc_per_node: int) -> bool:
    """Whether every rank of this node marked its training entry as returned (launcher/worker.py
    training_returned): then a rank that died, died at exit, its training done and saved."""
    first = node_rank * nproc_per_node
    return nproc_per_node > 0 and all(
        (attempt_dir / f"finished-rank-{rank}").exists() for rank in range(first, first + nproc_per_node)
    )


# Where torchelastic writes a rank's error file below its log dir (<run id>/attempt_<n>/<local rank>/), seen
# from that dir, from any folder of that layout, or from a safe-sft attempt's folder (which holds the log
# dir as torchelastic/): never a search of the whole tree, which for `explain ~` would never end and would
# take an unrelated old run's error file as this one's.
_ERROR_FILES = (
    "error.json", "*/error.json", "attempt_*/*/error.json", "*/attempt_*/*/error.json",
    "torchelastic/*/attempt_*/*/error.json",
)  # fmt: skip


def error_files(log_dir: Path) -> list[Path]:
    """The regular error.json files of torchelastic's layout below `log_dir` (a FIFO there would block)."""
    found: set[Path] = set()
    for pattern in _ERROR_FILES:
        try:
            found.update(path for path in log_dir.glob(pattern) if _regular(path))
        except OSError:  # a folder that cannot be listed holds nothing this can read
            continue
    return sorted(found)


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def read_error_files(log_dir: Path, node_rank: int, nproc_per_node: int) -> tuple[RankFailure, ...]:
    """torchelastic's error.json files (written by @record in launcher/worker.py), one per failed rank. A file
    of another shape (a user's own recorder, a hand-made copy) gives what text it holds, never an error."""
    failures = []
    for path in error_files(log_dir):
        try:
            data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError, RecursionError):
            continue
        message = data.get("message", data) if isinstance(data, dict) else data
        if isinstance(message, dict) and "message" in message:
            text = str(message.get("message", ""))
            extra = message.get("extraInfo")
            extra = extra if isinstance(extra, dict) else {}
            callstack = str(extra.get("py_callstack", ""))
            stamp = extra.get("timestamp")
        else:
            text, callstack, stamp = str(message), "", None
        local_rank = _whole_number(path.parent.name)
        rank = None if local_rank is None else node_rank * nproc_per_node + local_rank
        failures.append(
            RankFailure(
                rank=rank,
                exit_code=1,
                message=f"{callstack}\n{text}".strip(),
                timestamp=_whole_number(stamp),
            )
        )
    return tuple(failures)


def _whole_number(value: object) -> int | None:
    """A whole number written in ASCII digits (a rank's dir name, a timestamp), else None: `"²".isdigit()` is
    true, and int() refuses it."""
    text = str(value) if isinstance(value, str | int) else ""
    return int(text) if text.isascii() and text.isdigit() else None


def oom_kill_count() -> int | None:
    """The kernel's count of OOM kills (memory-cgroup kills included), from /proc/vmstat."""
    try:
        for line in _VMSTAT.read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def kernel_oom_evidence(before: int | None, after: int | None) -> tuple[str, ...]:
    if before is None or after is None or after <= before:
        return ()
    count = after - before
    return (f"kernel OOM killer ran {count} time(s) during the attempt (/proc/vmstat oom_kill {before} -> {after})",)


def run_dir_names(output_dir: Path) -> frozenset[str]:
    """The swift run dirs (v<N>-<timestamp>) there now: taken before an attempt starts."""
    return frozenset(p.name for p in run_dirs(output_dir))


def log_size(run_dir: Path) -> int:
    """How much of swift's logging.jsonl there is now: swift appends to it, so with --add_version false a
    new attempt's lines are those after this many bytes."""
    try:
        return (run_dir / "logging.jsonl").stat().st_size
    except OSError:
        return 0


def attempt_run_dir(attempt_dir: Path) -> Path | None:
    """The swift run dir an attempt writes (its logging.jsonl and checkpoints), as swift itself reported it
    (launcher/run/resolved.py); None until swift has parsed its arguments. Never derived from names or
    clocks: the one place the supervisor learns where an attempt writes."""
    args = resolved.read(attempt_dir)
    return args.run_dir if args is not None else None


def last_logged_step(run_dir: Path | None, skip_bytes: int = 0) -> int | None:
    """The last `global_step/max_steps` swift logged (rank 0's logging.jsonl) after its first `skip_bytes`."""
    if run_dir is None:
        return None
    path = run_dir / "logging.jsonl"
    try:
        with path.open("rb") as handle:
            handle.seek(skip_bytes)
            lines = handle.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        value = entry.get("global_step/max_steps") if isinstance(entry, dict) else None
        step = _whole_number(value.split("/")[0]) if isinstance(value, str) and "/" in value else None
        if step is not None:
            return step
    return None


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")
