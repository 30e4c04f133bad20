"""One attempt, from spawn to verdict: start the process tree, sample its memory, watch its progress,
stop it when told to or when it hangs, and classify how it ended into the AttemptRecord.

The supervisor prepares the argv, the environment and the record, and decides what comes next; this
module runs what it is given. The spawner, clock and sleep are injected so it runs without processes.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from launcher.model import FailureKind, GpuInfo
from launcher.plan.settings import Resume
from launcher.run import evidence as ev
from launcher.run import resolved
from launcher.run.checkpoints import checkpoint_step, is_complete, load_failure_line, snapshot
from launcher.run.classify import AttemptEvidence, classify, merge_failures
from launcher.run.coord import CoordinationLost, Coordinator
from launcher.run.diagnose import collect_stacks, oom_retry_in_stacks
from launcher.run.gpumon import MemoryMonitor
from launcher.run.launcher_output import WATCHDOG_LINE, parse_launcher_output
from launcher.run.notice import give_notice, max_steps_of, stopping_step
from launcher.run.records import AttemptRecord, RunConfig
from launcher.run.resume import started_over
from launcher.run.watch import ProgressWatch

POLL_SECONDS = 0.2


class Process(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...
    def signal_all(self, signum: int) -> None: ...
    def mute_terminal(self) -> None: ...
    def alive_descendants(self) -> list[Any]: ...
    def finish(self) -> tuple[int, str]: ...


Spawn = Callable[[list[str], dict[str, str], Path], Process]


class AttemptRunner:
    def __init__(
        self,
        config: RunConfig,
        spawn: Spawn,
        *,
        output_dir: Path,
        gpus: Sequence[GpuInfo],
        node_rank: int,
        nproc_per_node: int,
        received: Callable[[], int | None],
        received_at: Callable[[], float | None] = lambda: None,
        notice: Callable[[], int | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        nvml: ModuleType | None = None,
        coordinator: Coordinator | None = None,
    ) -> None:
        self.config, self.spawn = config, spawn
        self.output_dir, self.gpus = output_dir, gpus
        self.node_rank, self.nproc_per_node = node_rank, nproc_per_node
        self.received = received  # the signal safe-sft got, if any: the attempt stops and is not retried
        self.received_at = received_at  # when (epoch seconds)
        self.notice = notice  # a notice safe-sft got: the ranks save a checkpoint and stop (launcher/run/notice.py)
        self.clock, self.sleep, self.nvml, self.coordinator = clock, sleep, nvml, coordinator

    def _interrupted_by(self, signalled: bool) -> str | None:
        """The signal that ended the attempt from outside: the user's or scheduler's where it came while the
        attempt ran (`signalled`; one that came after the training process had ended by itself stopped nothing
        of it: the run stops after it), or a SIGTERM notice (the ranks were stopped, saved or not, before the
        SIGKILL that follows it; a SIGUSR1 notice stops none)."""
        received, notice = self.received(), self.notice()
        if received is not None and signalled:
            return signal.Signals(received).name
        return "SIGTERM" if notice == signal.SIGTERM else None

    def run(
        self, record: AttemptRecord, argv: list[str], env: dict[str, str], attempt_dir: Path, resume: Resume | None
    ) -> None:
        """Run the attempt to its end and fill in the record: exit code, memory, last step, failure. A lost
        node's CoordinationLost stops it, and is raised once the record is filled in."""
        oom_before = ev.oom_kill_count()
        log_before = ev.log_size(self.output_dir)
        checkpoints_before = snapshot(self.output_dir)
        start = self.clock()
        process = self.spawn(argv, env, attempt_dir / "console.log")
        monitor = self._start_monitor(process.pid)
        watch = ProgressWatch(
            attempt_dir,
            start,
            self.config.hang_timeout,
            self.config.startup_timeout,
            output_dir=self.output_dir,
            log_bytes_before=log_before,
        )
        lost: CoordinationLost | None = None
        try:
            hang, signalled = self._wait(process, watch, attempt_dir, record)
        except CoordinationLost as err:  # the attempt was stopped: record how far it got, then end the run
            hang, signalled, lost = None, self.received() is not None, err
        code, tail = process.finish()
        record.memory = monitor.stop() if monitor else None
        record.duration_s = round(self.clock() - start, 3)
        record.ended = ev.now_iso()
        record.exit_code = code
        record.resolved = resolved.read(attempt_dir)
        run_dir = ev.attempt_run_dir(attempt_dir)
        record.run_dir = str(run_dir) if run_dir else None
        record.last_step = ev.attempt_step(run_dir, log_before if run_dir == self.output_dir else 0, attempt_dir)
        record.checkpoints_written = [
            str(path) for path, sig in snapshot(self.output_dir).items() if checkpoints_before.get(path) != sig
        ]
        saved = [checkpoint_step(Path(p)) for p in record.checkpoints_written if is_complete(Path(p))]
        record.saved_step = max((step for step in saved if step is not None), default=None)
        finished = ev.ranks_finished(attempt_dir, self.node_rank, self.nproc_per_node)
        record.preempted = preempted_at(code, attempt_dir, run_dir, finished)
        record.step_seen_s = dict(watch.step_seen)
        record.started_over = started_over(resume, record.checkpoints_written, record.step_seen_s)
        if record.last_step is not None and record.last_step not in record.step_seen_s:
            record.step_seen_s[record.last_step] = record.duration_s  # logged after the last look
        tail_lines = tail.splitlines()
        rank_failures = merge_failures(
            parse_launcher_output(tail_lines).rank_failures,
            ev.read_error_files(attempt_dir / "torchelastic", self.node_rank, self.nproc_per_node),
        )
        steps_seen = record.last_step is not None and (resume is None or record.last_step > resume.step)
        record.failure = classify(
            AttemptEvidence(
                exit_code=code,
                rank_failures=rank_failures,
                log_tail=tuple(tail_lines[-400:]),
                kernel_oom=ev.kernel_oom_evidence(oom_before, ev.oom_kill_count(), ev.memory_cgroup_limit()),
                interrupted_by=self._interrupted_by(signalled),
                interrupted_at=self.received_at(),
                hang=hang,
                hang_cause=oom_retry_in_stacks(attempt_dir) if hang else None,
                steps_seen=steps_seen,
            )
        )
        interrupted = record.failure is not None and record.failure.kind is FailureKind.INTERRUPTED
        if record.preempted is not None and record.failure is not None:
            # every rank had saved on the notice: a signal after that (another node's `scontrol requeue`
            # cancels the step) stopped nothing, and a rank's death at exit is no training failure
            record.failed_at_exit = None if interrupted else record.failure
            record.failure = None
        elif record.failure is not None and not interrupted and finished:
            # every rank's training had returned: a death at exit is not a training failure
            record.failed_at_exit, record.failure = record.failure, None
        if resume is not None and record.failure is not None and not steps_seen:
            record.load_failure = load_failure_line(tail_lines[-400:])
        if lost is not None:
            raise lost

    def _start_monitor(self, pid: int) -> MemoryMonitor | None:
        if self.config.sample_interval <= 0:
            return None
        indices = tuple(g.index for g in self.gpus)
        monitor = MemoryMonitor(pid, indices, self.config.sample_interval, self.nvml)
        monitor.start()
        return monitor

    def _wait(
        self, process: Process, watch: ProgressWatch, attempt_dir: Path, record: AttemptRecord
    ) -> tuple[str | None, bool]:
        """Until the attempt ends: the watchdog's finding when it stopped a hung attempt, else None; and whether
        a signal to safe-sft stopped it."""
        noticed_at: float | None = None
        while True:
            # the signal is read before the process: one seen only after the process had ended (a Ctrl-C just
            # after a rank died and torchrun gave up) stopped nothing, and the failure stays the attempt's
            received = self.received()
            code = process.poll()
            if received is not None:
                name, log = signal.Signals(received).name, attempt_dir / "console.log"
                process.mute_terminal()  # first: it ends a progress bar's open line
                sys.stderr.write(f"safe-sft: {name}: stopping the training processes (their last words: {log})\n")
                self._stop(process, received)
                return None, True
            notice = self.notice()
            if notice is not None and noticed_at is None:
                noticed_at = self.clock()
                give_notice(attempt_dir, signal.Signals(notice).name)
                sys.stderr.write(
                    f"safe-sft: notice ({signal.Signals(notice).name}): the ranks save a checkpoint at the step "
                    "in progress and stop\n"
                )
            late = noticed_at is not None and self.clock() > noticed_at + self.config.grace_seconds
            if notice == signal.SIGTERM and late and code is None:  # SIGKILL comes now: stop first
                self._stop(process, signal.SIGTERM)
                return None, False
            if code is not None:
                # torchrun is gone; anything it left behind goes too.
                if process.alive_descendants():
                    self._stop(process, signal.SIGTERM)
                return None, False
            if self.coordinator is not None:
                try:
                    peer_stop = self.coordinator.stop_requested(record.number)
                except CoordinationLost:
                    self._stop(process, signal.SIGTERM)
                    raise
                if peer_stop:
                    process.mute_terminal()  # first: it ends a progress bar's open line
                    sys.stderr.write("safe-sft: another node stopped its attempt; stopping this node's\n")
                    self._stop(process, signal.SIGTERM)
                    return None, False
            finding = watch.poll(self.clock())
            if finding is not None:
                record.diagnostics = collect_stacks(process.alive_descendants(), attempt_dir)
                process.mute_terminal()
                found = "".join(f"safe-sft:   {line}\n" for line in record.diagnostics)
                said = WATCHDOG_LINE.format(finding=finding)
                sys.stderr.write(f"{said}\n{found}")
                with contextlib.suppress(OSError), (attempt_dir / "console.log").open("a") as console:
                    console.write(f"\n{said}\n")  # for `safe-sft explain`: the SIGTERM that follows is the watchdog's
                self._stop(process, signal.SIGTERM)
                return finding, False
            self.sleep(POLL_SECONDS)

    def _stop(self, process: Process, signum: int) -> None:
        """Forward the signal to every training process; SIGKILL what is left after the grace period. What
        they print of a stop safe-sft made (torchrun's `Received 15 death signal` traceback) goes to the
        attempt's console.log only."""
        process.mute_terminal()
        process.signal_all(signum)
        process.signal_all(signal.SIGCONT)  # a stopped process only acts on SIGTERM once it runs again
        deadline = self.clock() + self.config.grace_seconds
        while self.clock() < deadline:
            if process.poll() is not None and not process.alive_descendants():
                return
            self.sleep(POLL_SECONDS)
        process.signal_all(signal.SIGKILL)


def preempted_at(code: int, attempt_dir: Path, run_dir: Path | None, finished: bool = False) -> dict[str, Any] | None:
    """The ranks stopped on a notice: they saved a complete checkpoint at the step they agreed on, before
    the last step, and exited 0, or every rank's training returned (`finished`: a rank may still die at its
    interpreter's exit, `terminate called without an active exception`). {"step", "checkpoint"}, else None
    (a finished or failed attempt)."""
    step = stopping_step(attempt_dir)
    if (code != 0 and not finished) or step is None or run_dir is None:
        return None
    checkpoint = run_dir / f"checkpoint-{step}"
    if not is_complete(checkpoint):
        return None
    max_steps = max_steps_of(checkpoint)
    if max_steps is not None and step >= max_steps:
        return None
    return {"step": step, "checkpoint": str(checkpoint)}
