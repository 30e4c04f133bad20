"""Gather what an attempt left behind: per-rank error files, kernel OOM counters, swift's step log.

Reads only; each source is parsed here once into the typed values launcher.run.classify consumes.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil

from launcher.probe.memory import cgroup_limit, memory_cgroups
from launcher.run import resolved
from launcher.run.checkpoints import run_dirs
from launcher.run.classify import RankFailure
from launcher.units import fmt_bytes

_VMSTAT = Path("/proc/vmstat")
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_PROC_SELF_CGROUP = Path("/proc/self/cgroup")


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


@dataclass(frozen=True)
class OomKills:
    """The kernel's count of OOM kills, and where it was read: this process's memory cgroup's own counter
    (its ranks live there), else /proc/vmstat's, which counts every process on the host."""

    count: int
    source: Path
    own_cgroup: bool


def oom_kill_count(cgroup_root: Path = _CGROUP_ROOT, proc_self: Path = _PROC_SELF_CGROUP) -> OomKills | None:
    """The OOM kills counted where this run's processes live: this process's memory cgroup and those below it
    (a rank may be moved into one), from v2's `memory.events` (which counts both) or v1's `memory.oom_control`
    (each counts its own processes: summed over the subtree); where neither can be read (no memory cgroup, the
    root one of v2), /proc/vmstat's host-wide count. A neighbour's OOM kill (another container, another job's
    step) must not turn a rank's unrelated SIGKILL into a host OOM."""
    for counter in _own_cgroup_counters(cgroup_root, proc_self):
        count = _subtree_oom_kills(counter) if counter.name == "memory.oom_control" else _oom_kill_line(counter)
        if count is not None:
            return OomKills(count, counter, own_cgroup=True)
    count = _oom_kill_line(_VMSTAT)
    return None if count is None else OomKills(count, _VMSTAT, own_cgroup=False)


_SUBTREE_LIMIT = 4096  # cgroups read below this one at most (a v1 root cgroup holds every container's)


def _subtree_oom_kills(counter: Path) -> int | None:
    """v1's `oom_kill` of a cgroup and of every cgroup below it, which v1 does not add up itself."""
    total = _oom_kill_line(counter)
    if total is None:
        return None
    for seen, (folder, _, files) in enumerate(os.walk(counter.parent)):
        if seen > _SUBTREE_LIMIT:
            break
        if Path(folder) != counter.parent and counter.name in files:
            total += _oom_kill_line(Path(folder) / counter.name) or 0
    return total


def _own_cgroup_counters(cgroup_root: Path, proc_self: Path) -> list[Path]:
    """This process's memory cgroup's OOM-kill counter files: v1's memory controller first (in a hybrid
    layout it is the one that counts), then v2's unified one."""
    v1, v2 = [], []
    for version, base in memory_cgroups(cgroup_root, proc_self):
        if version == 1:
            v1.append(base / "memory.oom_control")
        elif base != cgroup_root:  # the root cgroup of v2 has no memory.events
            unified = cgroup_root / "unified" / base.relative_to(cgroup_root)
            v2 += [base / "memory.events", unified / "memory.events"]
    return v1 + v2


def _oom_kill_line(path: Path) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def kernel_oom_evidence(
    before: OomKills | None, after: OomKills | None, cgroup_limit_bytes: int | None = None
) -> tuple[str, ...]:
    """What the kernel's OOM-kill counter says of an attempt: nothing where it did not move (or was read in two
    places); with the run's memory cgroup's limit where that cgroup's own counter moved (a container's or a
    job's memory limit, not the host's RAM, was what ran out)."""
    if before is None or after is None or before.source != after.source or after.count <= before.count:
        return ()
    count = after.count - before.count
    if not after.own_cgroup:
        where = f"{after.source} oom_kill {before.count} -> {after.count}: host-wide, any process's"
        return (f"kernel OOM killer ran {count} time(s) during the attempt ({where})",)
    said = f"kernel OOM killer ran {count} time(s) in this run's memory cgroup during the attempt"
    lines = [f"{said} ({after.source} oom_kill {before.count} -> {after.count})"]
    if cgroup_limit_bytes is not None:
        lines.append(
            f"that cgroup's memory limit is {fmt_bytes(cgroup_limit_bytes)}, below the host's RAM: most likely "
            "the container's or the job's limit ran out (docker run --memory, the pod's resources.limits.memory, "
            "Slurm's --mem): raise it, or need less"
        )
    return tuple(lines)


def memory_cgroup_limit() -> int | None:
    """This process's memory cgroup's limit where it is below the host's RAM (else None: the host's RAM
    itself is the limit)."""
    limit, _ = cgroup_limit()
    try:
        total = psutil.virtual_memory().total
    except Exception:  # psutil's view is optional here: without it the limit is not compared
        return None
    return limit if limit is not None and limit < total else None


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


def attempt_step(run_dir: Path | None, skip_bytes: int, attempt_dir: Path) -> int | None:
    """An attempt's last logged step: swift's in its run dir (after the first `skip_bytes`), else, for a
    trainer that keeps no step log of its own, the worker's in the attempt's folder (launcher/hf_worker.py)."""
    step = last_logged_step(run_dir, skip_bytes)
    return step if step is not None else last_logged_step(attempt_dir)


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
