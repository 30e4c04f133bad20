"""One training process tree: spawn it in its own session, relay its output, signal it, and end it.

The output goes to the terminal byte for byte and to the attempt's console.log, and the last few hundred
KiB stay in memory for the classifier. torchrun starts its workers in sessions of their own, so a
process-group signal does not reach them: safe-sft becomes a child subreaper (orphans stay in its tree)
and signals every descendant. If safe-sft itself is SIGKILLed, PR_SET_PDEATHSIG takes torchrun down, and
the worker entry point (launcher/worker.py) asks for the same from torchrun.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, BinaryIO

import psutil

from launcher.streams import mute

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CHUNK = 1 << 20
PIPE_BYTES = 1 << 20  # a larger pipe lets a chatty child run ahead while the relay copies in big chunks
F_SETPIPE_SZ = 1031
TAIL_BYTES = 1 << 19


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def become_subreaper() -> None:
    """Orphaned descendants (torchrun's workers after torchrun dies) are re-parented to us, not to init."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _ignore_usr1() -> None:
    """SIGUSR1 is a notice (launcher/run/notice.py); its default action kills, so a Slurm notice sent to
    every process of the step would end torchrun. Ignored across exec; the ranks install their handler."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(signal.SIGUSR1, 1)  # SIG_IGN


def _child_setup() -> None:
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _ignore_usr1()


class _Relay(threading.Thread):
    """Copy one pipe to a terminal stream and the shared log, keeping a bounded tail."""

    def __init__(
        self,
        source: IO[bytes],
        sink: BinaryIO,
        log: BinaryIO,
        lock: threading.Lock,
        tail: deque[bytes],
        muted: threading.Event,
        line_open: list[bool],
    ):
        super().__init__(daemon=True)
        self.source, self.sink, self.log, self.lock, self.tail = source, sink, log, lock, tail
        self.muted = muted  # set: the terminal gets no more of this output; the log and the tail still do
        self.line_open = line_open  # shared by both relays: the terminal's last line has no end yet
        self.tail_size = 0

    def _log(self, chunk: bytes) -> None:
        """A log that cannot be written (a full disk) is given up; the terminal and the tail go on."""
        if self.log.closed:
            return
        try:
            self.log.write(chunk)
            self.log.flush()  # the watchdog reads console.log for progress bars: no lag behind the terminal
        except (OSError, ValueError):
            with contextlib.suppress(OSError, ValueError):
                self.log.close()

    def run(self) -> None:
        fd = self.source.fileno()
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        sink_fd = self.sink.fileno()
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            view = memoryview(chunk)
            while view and not self.muted.is_set():
                try:
                    written = os.write(sink_fd, view)
                except OSError:  # the terminal's reader or disk is gone: keep draining into the log and tail
                    mute(sink_fd)
                    break
                view = view[written:]
            if not self.muted.is_set():
                self.line_open[0] = not chunk.endswith(b"\n")  # a progress bar redraws its line with \r
            with self.lock:
                self._log(chunk)
                self.tail.append(chunk)
                self.tail_size += len(chunk)
                while self.tail_size > TAIL_BYTES and len(self.tail) > 1:
                    self.tail_size -= len(self.tail.popleft())


class TrainingProcess:
    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        stdout: BinaryIO,
        stderr: BinaryIO,
    ) -> None:
        self.log = log_path.open("ab")
        self.lock = threading.Lock()
        self.tail: deque[bytes] = deque()
        self.popen = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_child_setup,  # only prctl and signal(2): safe between fork and exec
        )
        assert self.popen.stdout is not None and self.popen.stderr is not None
        self.muted = threading.Event()
        self.line_open = [False]
        self.relays = [
            _Relay(self.popen.stdout, stdout, self.log, self.lock, self.tail, self.muted, self.line_open),
            _Relay(self.popen.stderr, stderr, self.log, self.lock, self.tail, self.muted, self.line_open),
        ]
        for relay in self.relays:
            relay.start()
        self.known: dict[int, float] = {}  # pid -> create_time of every descendant seen

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        self._remember_descendants()
        return self.popen.poll()

    def _remember_descendants(self) -> None:
        try:
            for proc in psutil.Process(self.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self.known.setdefault(proc.pid, proc.create_time())
        except psutil.Error:
            pass

    def alive_descendants(self) -> list[psutil.Process]:
        """Every process of this tree still running (checked against pid reuse)."""
        self._remember_descendants()
        alive = []
        for pid, created in self.known.items():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        return alive

    def mute_terminal(self) -> None:
        """From now on the output goes to the log (and the tail) only: after the user's own Ctrl-C, the
        ranks' KeyboardInterrupt tracebacks and torchrun's are no news to them. A line the output left open
        (a progress bar) is ended, so what safe-sft says next starts a line of its own."""
        self.muted.set()
        if self.line_open[0]:
            self.line_open[0] = False
            with contextlib.suppress(OSError):
                os.write(self.relays[1].sink.fileno(), b"\n")

    def signal_all(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)
        for proc in self.alive_descendants():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signum)

    def finish(self) -> tuple[int, str]:
        """Wait for the output to drain; (exit code, the tail of the output as text)."""
        code = self.popen.wait()
        for relay in self.relays:
            relay.join(timeout=10)
            if not relay.is_alive():  # drained: its pipe is done with (one still read by a relay stays open)
                with contextlib.suppress(OSError):
                    relay.source.close()
        reap_orphans()
        with contextlib.suppress(OSError):  # the last buffered bytes, on a full disk
            self.log.close()
        with self.lock:
            tail = b"".join(self.tail).decode("utf-8", errors="replace")
        return code, tail


def reap_orphans() -> None:
    """Collect exit statuses of re-parented descendants so no zombie stays behind."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
