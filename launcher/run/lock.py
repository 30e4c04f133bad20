"""One safe-sft run per output dir: an flock on `<output_dir>/safe-sft/lock`, held for the whole run.

The lock file records its holder (pid, host, start time, run id) as JSON, so a refused run can name it.
The kernel drops an flock when its holder dies, however it dies; a record still in the file then (the
holder was SIGKILLed, or its host went down) is a stale lock: it is taken over with a warning naming the
old holder. A clean end empties the record. An flock belongs to the file, not its name: while the run
lasts, `keep` checks twice a second that the name still leads to the held file, and takes the lock
again where someone removed it (or the whole safe-sft/ folder), so that a second run cannot start beside
this one unnoticed; where one already has, both are told. The descriptor is not inherited by the training processes
(Python opens files close-on-exec), so a torchrun left running never holds it.

Several nodes of one run share the output dir: only node 0 takes the lock (the other nodes join node 0's
run, which check_shared_output_dir proves). On Linux NFS, flock is carried by the server's byte-range
locks, so the lock holds across hosts. Where a filesystem has no locks at all, the record alone decides:
a holder on this host is alive or gone (its pid), a holder on another host is trusted to be alive.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import SafeSftError
from launcher.run.evidence import now_iso

LOCK_NAME = "lock"
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started: str
    run_id: str | None = None

    def describe(self) -> str:
        run = f", run id {self.run_id}" if self.run_id else ""
        return f"pid {self.pid} on {self.host}, started {self.started}{run}"

    def to_json(self) -> str:
        return json.dumps({"pid": self.pid, "host": self.host, "started": self.started, "run_id": self.run_id})


def _parse(text: str) -> Holder | None:
    try:
        data = json.loads(text)
        return Holder(int(data["pid"]), str(data["host"]), str(data["started"]), data.get("run_id"))
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class OutputDirLock:
    """The held lock; `stale` is the dead holder whose lock was taken over, if any."""

    def __init__(self, path: Path, fd: int, holder: Holder, stale: Holder | None) -> None:
        self.path, self.fd, self.holder, self.stale = path, fd, holder, stale
        self._mutex = threading.Lock()  # `keep`'s thread and release() never touch the descriptor at once
        self._ended = threading.Event()
        self._told_of: Holder | None = None

    def keep(self, warn: Callable[[str], None], interval: float = 0.5) -> None:
        """Until release(): every `interval` seconds, take the lock again if its file was removed or replaced."""
        thread = threading.Thread(target=self._keep, args=(warn, interval), name="safe-sft-lock", daemon=True)
        thread.start()

    def _keep(self, warn: Callable[[str], None], interval: float) -> None:
        while not self._ended.wait(interval):
            message = self.retake()
            if message:
                warn(message)

    def retake(self) -> str | None:
        """Where the lock's name no longer leads to the held file, take a new one there: what to tell the user
        (taken again, or another run took it first, said once), else None."""
        with self._mutex:
            if self.fd < 0:
                return None
            try:
                if os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                    return None
            except FileNotFoundError:
                pass
            except OSError:
                return None
            gone = f"the lock {self.path} was removed while this run held it"
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                return f"safe-sft: warning: {gone}, and cannot be made again ({err.strerror or err})"
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = _read(fd)
                os.close(fd)
                if other is not None and other == self._told_of:
                    return None
                self._told_of = other
                who = other.describe() if other else "a process that has not written its record yet"
                return (
                    f"safe-sft: warning: {gone}, and another safe-sft run ({who}) took it: both now write into "
                    f"{self.path.parent.parent}; stop one of them, or its checkpoints may overwrite the other's"
                )
            except OSError as err:
                if err.errno not in _NO_LOCKS:
                    os.close(fd)
                    return None
            with contextlib.suppress(OSError):
                os.pwrite(fd, self.holder.to_json().encode(), 0)
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = fd
            return f"safe-sft: warning: {gone}; taken again"

    def release(self) -> None:
        """Empty the record, then unlock: the next run starts without a stale-lock warning."""
        self._ended.set()
        with self._mutex:
            if self.fd < 0:
                return
            # a record left behind only makes the next run say it took over a stale lock
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _read(fd: int) -> Holder | None:
    os.lseek(fd, 0, os.SEEK_SET)
    return _parse(os.read(fd, 4096).decode("utf-8", errors="replace"))


def _refuse(output_dir: Path, path: Path, holder: Holder | None, why: str = "") -> SafeSftError:
    who = holder.describe() if holder else "a process that has not written its record yet"
    return SafeSftError(
        f"another safe-sft run is using the output dir {output_dir} ({who}){why}",
        f"wait for it to end, or give this run its own --output_dir (lock: {path})",
    )


def records_not_a_folder(output_dir: Path) -> SafeSftError | None:
    """A file of the user's where safe-sft keeps its records (`<output_dir>/safe-sft/`): named as such, not as
    an output dir that cannot be written to."""
    records = output_dir / "safe-sft"
    if not records.exists() or records.is_dir():
        return None
    return SafeSftError(
        f"{records} is a file: safe-sft keeps its records (lock, reports) in a folder of that name",
        f"move {records} away (the output dir itself is fine)",
    )


# what safe-sft's deepest record adds to the output dir's path: safe-sft/<run>-node<N>/attempt-<N>/torchelastic/
# <torchelastic's run id>/attempt_0/<rank>/error.json, with room to spare
RECORDS_DEPTH = 128
PATH_MAX = 4096  # Linux's limit on a path, where the file system does not say its own


def path_too_long(output_dir: Path) -> SafeSftError | None:
    """An output dir whose path leaves no room for safe-sft's records under it: torchrun had failed on its log
    dir with its traceback (ENAMETOOLONG), read as an unknown failure and retried."""
    try:
        limit = os.pathconf(next(p for p in (output_dir, *output_dir.parents) if p.exists()), "PC_PATH_MAX")
    except (OSError, ValueError, StopIteration):
        limit = PATH_MAX
    length = len(os.fsencode(output_dir))
    if length + RECORDS_DEPTH < limit:
        return None
    return SafeSftError(
        f"the output dir's path is {length} bytes: safe-sft's records under it (safe-sft/<run>/attempt-<N>/"
        f"torchelastic/...) need about {RECORDS_DEPTH} more, past the file system's {limit}-byte limit on a path",
        "give a shorter --output_dir",
    )


def _cannot_write(output_dir: Path, err: OSError, path: Path) -> SafeSftError:
    """Why the lock could not be made, in what ran out or what refused: a disk with space but no free files
    (inodes) had been told to choose a dir it can write to, and a read-only records folder was called the
    output dir."""
    from launcher.probe.disk import free_words

    records = output_dir / "safe-sft"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return SafeSftError(
            f"cannot write to the output dir {output_dir}: {err.strerror} ({output_dir} has {free_words(output_dir)})",
            f"free space and files in {output_dir}, or choose another --output_dir",
        )
    if records.is_dir() and os.access(output_dir, os.W_OK):
        return SafeSftError(
            f"cannot write to safe-sft's records folder {records}: {err.strerror or err} ({path}); the output dir "
            "itself is writable",
            f"make {records} writable (chmod, chattr -i), or move it away",
        )
    return SafeSftError(
        f"cannot write to the output dir {output_dir}: {err.strerror or err} ({path})",
        "choose a --output_dir this user can write to",
    )


def acquire(output_dir: Path, run_id: str | None = None, *, host: str | None = None) -> OutputDirLock:
    """Take the output dir's lock, or raise a SafeSftError naming the holder."""
    if (too_long := path_too_long(output_dir)) is not None:
        raise too_long
    path = output_dir / "safe-sft" / LOCK_NAME
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise records_not_a_folder(output_dir) or _cannot_write(output_dir, err, path) from None
    me = Holder(os.getpid(), host or socket.gethostname(), now_iso(), run_id)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        locks = True
    except BlockingIOError:
        holder = _read(fd)
        os.close(fd)
        raise _refuse(output_dir, path, holder) from None
    except OSError as err:
        if err.errno not in _NO_LOCKS:
            os.close(fd)
            raise
        locks = False
    previous = _read(fd)
    if previous is not None and not locks and previous.pid != me.pid:
        gone = previous.host == me.host and not _pid_alive(previous.pid)
        if not gone:
            os.close(fd)
            where = "" if previous.host == me.host else f"; {path} has no file locks to prove it ended"
            raise _refuse(output_dir, path, previous, where)
    with contextlib.suppress(OSError):  # a full disk: the lock holds without its record (a refused run cannot name us)
        os.ftruncate(fd, 0)
        os.pwrite(fd, me.to_json().encode(), 0)
    return OutputDirLock(path, fd, me, previous)
