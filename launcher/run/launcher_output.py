"""What launchers print about a failure, read from text: a pure parser, apart from the failure patterns.

Input: the lines of a log (a terminal capture, torchrun's output, a Slurm .out file, a dmesg capture, in
any mix). Output: `LauncherOutput`, the facts the launchers state about the run, which `to_evidence` turns
into the same `AttemptEvidence` the supervisor builds from live exit statuses and error files, so a saved
log and a live run are classified by one function.

Read here, and only here:
- torchrun's `ChildFailedError` summary (`Failures:` / `Root Cause` blocks: time, host, rank, exitcode,
  error_file, traceback) and its agent line `failed (exitcode: -9) local_rank: 0 (pid: N)`;
- torchrun's own death signal (`Received Signals.SIGHUP death signal`, `SignalException ... got signal`);
- DeepSpeed's launcher (`[...'--local_rank=1'...] exits with return code = -9`);
- Python's subprocess as accelerate and llamafactory-cli use it (`returned non-zero exit status 1`,
  `died with <Signals.SIGKILL: 9>`);
- Slurm (`Detected 1 oom_kill event`, `Exceeded job memory limit`, `CANCELLED AT ... DUE TO TIME LIMIT`,
  `srun: error: node: task 0: Killed`), LSF's job report (`TERM_RUNLIMIT: job killed after reaching LSF
  run time limit.`, `TERM_MEMLIMIT: ...`), PBS (`PBS: job killed: walltime ...`) and the shell's `Killed`;
- the kernel's OOM killer lines, and container runtimes' `OOMKilled`;
- `[rankN]:` / `[defaultN]:` prefixes (the rank a line came from), and swift's step log (training began).
An exit status above 128 is read as 128 + a signal number, as shells and container runtimes report it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from launcher.run.classify import LAUNCHER_SIGNAL, AttemptEvidence, RankFailure

SIGNAL_NUMBERS = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGABRT": 6, "SIGBUS": 7, "SIGFPE": 8}
SIGNAL_NUMBERS |= {"SIGKILL": 9, "SIGSEGV": 11, "SIGPIPE": 13, "SIGTERM": 15, "SIGUSR1": 10, "SIGUSR2": 12}
SIGNAL_NAMES = {number: name for name, number in SIGNAL_NUMBERS.items()}


@dataclass(frozen=True)
class LauncherOutput:
    """What the launchers in a log said: failed ranks, signals, kernel and scheduler findings."""

    rank_failures: tuple[RankFailure, ...] = ()
    kernel_oom: tuple[str, ...] = ()  # kernel, cgroup, Slurm or container lines proving an OOM kill
    launcher_signal: tuple[str, str] | None = None  # (signal name, the line): the launcher itself was signalled
    scheduler_stop: str | None = None  # Slurm cancelled the job or step (time limit, preemption, scancel)
    exit_code: int | None = None  # the launcher's own exit status where the log states it
    steps_seen: bool = False
    finished: bool = False  # the log ends in a finished run
    # safe-sft's own watchdog stopped the attempt (the line it writes into the attempt's console.log): the
    # SIGTERM the launcher then reports is the watchdog's, not a user's
    watchdog_hang: str | None = None


WATCHDOG_LINE = "safe-sft: hang: {finding}; stopping the attempt"
_WATCHDOG = re.compile(r"^safe-sft: hang: (.+); stopping the attempt\s*$")


_RANK_PREFIX = re.compile(r"^\s*\[(?:default|rank)(\d+)\]:\s?")


def rank_of(line: str) -> int | None:
    """The rank a `[rank3]:` or `[default3]:` prefixed line came from."""
    match = _RANK_PREFIX.match(line)
    return int(match.group(1)) if match else None


def strip_rank(line: str) -> str:
    return _RANK_PREFIX.sub("", line, count=1)


def signal_of_status(code: int | None) -> int | None:
    """The signal behind an exit status: negative (Python's convention) or 128 + N (a shell's)."""
    if code is None:
        return None
    if code < 0:
        return -code
    if 128 < code < 160 and (code - 128) in SIGNAL_NAMES:
        return code - 128
    return None


def as_exit_code(code: int) -> int:
    """An exit status in Python's convention: a signal as a negative number."""
    signum = signal_of_status(code)
    return -signum if signum is not None else code


# ---- torchrun's ChildFailedError summary -------------------------------------------------------------

_SUMMARY_START = re.compile(r"Root Cause \(first observed failure\)|^Failures:")
_BLOCK_START = re.compile(r"^\s*\[\d+\]:\s*$")
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$")


def _summary_blocks(lines: Sequence[str]) -> list[tuple[bool, dict[str, str]]]:
    """Each `[N]:` block of every summary in the log, with whether it was under `Root Cause`."""
    blocks: list[tuple[bool, dict[str, str]]] = []
    current: dict[str, str] | None = None
    in_summary = root = False
    for raw in lines:
        line = strip_rank(raw.rstrip("\n"))
        stripped = line.strip()
        if _SUMMARY_START.search(stripped):
            in_summary, root = True, stripped.startswith("Root Cause")
            continue
        if not in_summary:
            continue
        if _BLOCK_START.match(line):
            current = {}
            blocks.append((root, current))
            continue
        match = _FIELD.match(line)
        if stripped.startswith(("===", "---")):
            current = None
            if stripped.startswith("==="):
                in_summary = root = False
        elif match and current is not None:
            current[match.group(1)] = match.group(2).strip()
        elif current is not None and "traceback" in current and stripped:
            current["traceback"] += "\n" + stripped
    return blocks


def _timestamp(text: str) -> float | None:
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d_%H:%M:%S").timestamp()
    except ValueError:
        return None


def parse_torchrun_failures(lines: Sequence[str]) -> tuple[RankFailure, ...]:
    """The ranks torchrun's summary names, root cause first, each with its exit code and traceback."""
    root_cause: list[RankFailure] = []
    others: list[RankFailure] = []
    seen: set[tuple[int | None, int | None]] = set()
    for is_root, block in _summary_blocks(lines):
        rank_match = re.match(r"(\d+)", block.get("rank", ""))
        code_match = re.match(r"(-?\d+)", block.get("exitcode", ""))
        rank = int(rank_match.group(1)) if rank_match else None
        code = as_exit_code(int(code_match.group(1))) if code_match else None
        if (rank, code) in seen:
            continue
        seen.add((rank, code))
        traceback = block.get("traceback", "")
        # no traceback of the rank's own: a signal's name, <N/A>, or torchrun's pointer to @record's docs
        told = traceback.startswith(("Signal ", "<N/A>", "To enable traceback"))
        message = "" if told else traceback
        failure = RankFailure(rank, code, message, _timestamp(block.get("time", "")))
        (root_cause if is_root else others).append(failure)
    return (*root_cause, *others)


# ---- one-line launcher reports -----------------------------------------------------------------------

_AGENT_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
_DEEPSPEED_EXIT = re.compile(r"exits with return code = (-?\d+)")
_DS_LOCAL_RANK = re.compile(r"--local_rank[= ](\d+)")
_SUBPROCESS_STATUS = re.compile(r"returned non-zero exit status (-?\d+)|died with <Signals\.(SIG[A-Z0-9]+): \d+>")
_EXIT_STATUS = re.compile(
    r"\b(?:exit (?:status|code)|return code|error code|exitcode|exit_code)\s*[:=]?\s*(-\d+|1[3-5]\d)\b|"
    r"\b(?:ended|killed|terminated) by signal (\d+)|\bSIG[A-Z]+\((-\d+)\)"
)
_SIGNAL_WORD = r"(Killed|Segmentation fault|Bus error|Aborted|Terminated)"
# the shell's words for them in a Chinese locale (glibc's zh_CN strsignal): the many runs of ms-swift and
# LLaMA-Factory on such machines print `已杀死` for Killed and `段错误 (核心已转储)` for a core-dumping segfault
_LOCALE_SIGNAL_WORDS = {"已杀死": 9, "段错误": 11, "总线错误": 7, "已放弃": 6, "已终止": 15}
_SHELL_SIGNAL_WORD = r"(Killed|Segmentation fault|Bus error|Aborted|Terminated|" + "|".join(_LOCALE_SIGNAL_WORDS) + ")"
_SRUN_TASK = re.compile(r"srun: error: \S+: tasks? ([\d,-]+): " + _SIGNAL_WORD)
_SRUN_EXIT = re.compile(r"srun: error: \S+: tasks? ([\d,-]+): Exited with exit code (\d+)")
# Open MPI's `mpirun noticed that process rank N ... exited on signal S`, MPICH's `KILLED BY SIGNAL: S`
_MPI_SIGNAL = re.compile(r"process rank (\d+) with PID \S+ on node \S+ exited on signal (\d+)|KILLED BY SIGNAL: (\d+)")
# The shell's report of a killed job: alone on a line, after `line N: PID` (`行 N: PID` in Chinese), or after a
# progress bar's `]`.
_SHELL_KILLED = re.compile(
    r"(?:line|行) \d+: +\d+ +"
    + _SHELL_SIGNAL_WORD
    + r"|(?:^|\]\s*)"
    + _SHELL_SIGNAL_WORD
    + r"(?: ?[(（](?:core dumped|核心已转储)[)）])?\s*$|"
    r"^\[\d+\][+-]? +(?:\d+ +)?" + _SHELL_SIGNAL_WORD,  # job control: `[1]+ Killed ...`, zsh `[1] 8381 killed ...`
    re.IGNORECASE,
)
# A process's own report of a signal it received (glog/absl, torch's handler, Paddle, MPI, DataLoader).
_SIGNAL_RECEIVED = re.compile(
    r"\*\*\* (?:Signal \d+ \()?(SIG[A-Z]+)\b.*received|Signal \d+ \((SIG[A-Z]+)\) received by PID|"
    r"killed by signal: (Killed|Terminated|Segmentation fault|Aborted)|(Termination) signal. is detected|"
    r"(Terminated) \(signal 15\)|terminated with signal (SIG[A-Z]+)"
)
_SIGNAL_WORDS = {"Killed": 9, "Segmentation fault": 11, "Bus error": 7, "Aborted": 6, "Terminated": 15}
_SIGNAL_WORDS |= {"Termination": 15} | {name: number for name, number in SIGNAL_NUMBERS.items()} | _LOCALE_SIGNAL_WORDS

# A batch system stopped the job or step: Slurm's cancel line, LSF's job report's termination reason (its
# owner's or an administrator's kill, a run or CPU time limit, preemption, a closed queue window), PBS's
# walltime and its deletion of a job (by its owner or an administrator), Moab's wallclock limit. A memory
# limit's kill is a host OOM (below).
_SCHEDULER_STOP = re.compile(
    r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+.*\*\*\*|DUE TO (?:TIME LIMIT|PREEMPTION)|"
    r"^\s*TERM_(?:(?:FORCE_|REQUEUE_)?(?:OWNER|ADMIN)|RUNLIMIT|CPULIMIT|PREEMPT|WINDOW|DEADLINE|BUCKET_KILL|LOAD): |"
    r"PBS: job killed: walltime \d+ exceeded limit|job exceeded wallclock limit|[Jj]ob deleted at request of|"
    r"\b[Jj]ob (?:is|was|has been) preempted"  # a job's own handler (submitit's) saying why it stops
)
_KERNEL_OOM = re.compile(
    r"Out of memory: Kill(?:ed)? process|oom-kill:|Memory cgroup out of memory|oom[-_]kill event|"
    r"Exceeded (?:job|step) memory limit|oom_reaper: reaped process|\bOOMKilled\b|task \d+: Out Of Memory|"
    r"oom_kill \d+ -> \d+|^\s*TERM_(?:MEMLIMIT|SWAP): |PBS: job killed: v?mem "
)
_STEP_LOG = re.compile(r"global_step/max_steps|\{'loss': |\"loss\": \d|'train_runtime'|\"train_runtime\"")
_FINISHED = re.compile(r"last_model_checkpoint:|'train_runtime'|\"train_runtime\"")
_FAILED_AFTER = re.compile(r"Traceback|Error|out of memory|Killed|Segmentation fault|FAILED")


def _one_line_failures(lines: Sequence[str]) -> list[RankFailure]:
    """Failed workers named by a single line: torchrun's agent, DeepSpeed's launcher, srun, the shell."""
    found: list[RankFailure] = []
    for line in lines:
        text = strip_rank(line)
        if match := _AGENT_FAILED.search(text):
            found.append(RankFailure(int(match.group(2)), as_exit_code(int(match.group(1)))))
        elif match := _DEEPSPEED_EXIT.search(text):
            local = _DS_LOCAL_RANK.search(text)
            found.append(RankFailure(int(local.group(1)) if local else None, as_exit_code(int(match.group(1)))))
        elif "CANCELLED AT" in text and "DUE TO TASK FAILURE" in text:
            found.append(RankFailure(None, 1))  # Slurm's word that a task exited non-zero first: its peers follow
        elif match := _SRUN_EXIT.search(text):
            first_task = re.match(r"\d+", match.group(1))
            found.append(RankFailure(int(first_task.group(0)) if first_task else None, int(match.group(2))))
        elif match := _MPI_SIGNAL.search(text):
            rank = int(match.group(1)) if match.group(1) else None
            found.append(RankFailure(rank, -int(match.group(2) or match.group(3))))
        elif match := _SRUN_TASK.search(text):
            if any(f.exit_code is not None and f.exit_code > 0 for f in found):
                continue  # srun's kill-on-bad-exit: it killed the other tasks after one exited non-zero
            first_task = re.match(r"\d+", match.group(1))
            task = int(first_task.group(0)) if first_task else None
            found.append(RankFailure(task, -_SIGNAL_WORDS[match.group(2)]))
        elif match := _SIGNAL_RECEIVED.search(text):
            word = next(group for group in match.groups() if group)
            found.append(RankFailure(None, -_SIGNAL_WORDS[word]))
        elif match := _SHELL_KILLED.search(text.strip().strip("*`").strip()):  # markdown's emphasis of a paste
            word = next(group for group in match.groups() if group)
            found.append(RankFailure(None, -_SIGNAL_WORDS[word[0].upper() + word[1:].lower()]))
        elif match := _SUBPROCESS_STATUS.search(text):
            if match.group(2):
                found.append(RankFailure(None, -SIGNAL_NUMBERS.get(match.group(2), 0) or None))
            elif (signum := signal_of_status(int(match.group(1)))) is not None:
                found.append(RankFailure(None, -signum))
        elif match := _EXIT_STATUS.search(text):
            code = int(match.group(1) or match.group(3) or -int(match.group(2)))
            if signal_of_status(code) is not None:
                found.append(RankFailure(None, as_exit_code(code)))
    return found


def _launcher_signal(lines: Sequence[str]) -> tuple[str, str] | None:
    for line in lines:
        match = LAUNCHER_SIGNAL.search(strip_rank(line))
        if match is None:
            continue
        if match.group(3):
            return "SIGINT", line.strip()
        raw = match.group(1) or match.group(2)
        name = raw if not raw.isdigit() else SIGNAL_NAMES.get(int(raw), f"signal {raw}")
        return name, line.strip()
    return None


def _merge_one_liners(summary: Sequence[RankFailure], others: Iterable[RankFailure]) -> tuple[RankFailure, ...]:
    """The summary's ranks first; a one-line report adds only a signal death the summary does not hold. The
    agent's line names a local rank (`local_rank: 0` on node 1 is the summary's rank 1): a signal death the
    summary holds is that one, whatever rank the line names."""
    merged = list(summary)
    known = {(f.rank, f.exit_code) for f in summary}
    signalled = {f.exit_code for f in summary if f.exit_code is not None and f.exit_code < 0}
    for failure in others:
        if failure.exit_code is None or (failure.rank, failure.exit_code) in known:
            continue
        if failure.exit_code in signalled:
            continue
        known.add((failure.rank, failure.exit_code))
        signalled.add(failure.exit_code)
        merged.append(failure)
    return tuple(merged)


def _after_a_task_failed(lines: Sequence[str], stop: str) -> bool:
    """Whether srun reported a task's non-zero exit before the scheduler's stop line `stop`."""
    for line in lines:
        if line.strip() == stop:
            return False
        if (match := _SRUN_EXIT.search(line)) and int(match.group(2)) > 0:
            return True
    return False


def parse_launcher_output(lines: Sequence[str]) -> LauncherOutput:
    """Everything the launchers in these lines say about how the run ended."""
    # Slurm cancels a step DUE TO TASK FAILURE after a task failed, and srun's kill-on-bad-exit cancels it after
    # a task exited non-zero (`task 5: Exited with exit code 1`): the failure is elsewhere in the log.
    stop = next((line.strip() for line in lines if _SCHEDULER_STOP.search(line) and "TASK FAILURE" not in line), None)
    if stop is not None and _after_a_task_failed(lines, stop):
        stop = None
    summary = parse_torchrun_failures(lines)
    failures = _merge_one_liners(summary, _one_line_failures(lines))
    steps_seen = any(_STEP_LOG.search(line) for line in lines)
    finish = max((i for i, line in enumerate(lines) if _FINISHED.search(line)), default=-1)
    failed_after = any(_FAILED_AFTER.search(line) for line in lines[finish + 1 :])
    return LauncherOutput(
        rank_failures=failures,
        kernel_oom=tuple(dict.fromkeys(line.strip() for line in lines if _KERNEL_OOM.search(line))),
        launcher_signal=_launcher_signal(lines),
        scheduler_stop=stop,
        steps_seen=steps_seen,
        finished=not failures and finish >= 0 and finish >= len(lines) - 80 and not failed_after,
        watchdog_hang=next((m.group(1) for line in lines if (m := _WATCHDOG.match(line.strip()))), None),
    )


def to_evidence(output: LauncherOutput, lines: Sequence[str]) -> AttemptEvidence:
    """The evidence a saved log gives, as the supervisor would have gathered it from a live attempt.

    A log cannot prove a negative: the absence of kernel lines does not mean no OOM kill happened
    (`kernel_checked` is False), unlike a live attempt, where safe-sft read the kernel's counter itself.
    """
    return AttemptEvidence(
        exit_code=0 if output.finished else output.exit_code,
        rank_failures=output.rank_failures,
        log_tail=tuple(lines),
        kernel_oom=output.kernel_oom,
        kernel_checked=False,
        stopped_by=None
        if output.watchdog_hang
        else output.scheduler_stop or (output.launcher_signal[1] if output.launcher_signal else None),
        steps_seen=output.steps_seen,
        hang=output.watchdog_hang,
    )
