"""Why an attempt died: a pure function of exit statuses, error files, the log tail and OOM evidence.

Order of trust: the user's own signal, the watchdog; then each failed rank's structured error
(torchelastic error.json, or its traceback in torchrun's summary); then specific patterns in the log
tail; then exit signals with kernel OOM evidence. Peers of a dead rank fail too (gloo `Connection closed
by peer`, NCCL watchdog, SIGTERM from torchrun), so a primary cause (OOM, user error, crash) on any rank
outranks a communication failure or a SIGTERM, whatever rank torchrun's summary calls the root cause.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.model import Failure, FailureKind
from launcher.plan.severity import PRIMARY, strength

SIGNAL_NAMES = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
NATIVE_CRASH_SIGNALS = {4, 6, 7, 8, 11}

_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUDNN_STATUS_NOT_SUPPORTED|"
    r"CUBLAS_STATUS_ALLOC_FAILED|HIP out of memory",
)
_HOST_ALLOC = re.compile(r"DefaultCPUAllocator: can't allocate memory|std::bad_alloc|MemoryError\b")
_SAVE_MARKERS = re.compile(
    r"_save_checkpoint|save_model\b|_save_optimizer_and_scheduler|save_pretrained|save_16bit_model|"
    r"save_checkpoint\b|consolidated_16bit_state_dict|Saving model checkpoint"
)
# transformers' and swift's evaluation frames, as a traceback names them (`File "...", line N, in evaluate`)
_EVAL_MARKERS = re.compile(r"\bin (evaluate|_evaluate|evaluation_loop|prediction_step|prediction_loop)\b")
_LOAD_MARKERS = re.compile(
    r"from_pretrained|get_model_tokenizer|deepspeed_init|deepspeed\.initialize|_load_from_checkpoint|"
    r"load_checkpoint|prepare_model|_wrap_model|\.to\(device|init_process_group"
)
_PATTERNS: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    (
        FailureKind.MEMLOCK,
        re.compile(r"RLIMIT_MEMLOCK|ulimit -l|memlock|ibv_reg_mr|[Ff]ailed to register memory|cudaHostRegister"),
    ),
    (
        FailureKind.SHM,
        re.compile(
            r"/dev/shm.*(No space left|too small|failed)|No space left on device.*shm|"
            r"DataLoader worker \(pid \d+\) is killed by signal: Bus error|unable to write to file </torch_|"
            r"failed to extend /dev/shm|insufficient shared memory"
        ),
    ),
    (
        FailureKind.USER_ERROR,
        re.compile(
            r"remaining_argv|FileNotFoundError|No such file or directory|does not exist|DatasetNotFoundError|"
            r"JSONDecodeError|ArrowInvalid|ModuleNotFoundError|error: argument|unrecognized arguments|"
            r"ValueError: (Invalid|Unknown|Unsupported|Please|The )|is not a valid|not supported|"
            r"AssertionError: (Either train_batch_size|Check batch related parameters)"  # DeepSpeed's config checks
        ),
    ),
    (
        FailureKind.COMM_TIMEOUT,
        re.compile(
            r"[Ww]atchdog caught collective operation timeout|Timed out after|Socket Timeout|"
            r"DistStoreError: .*[Tt]imed? ?out|NCCL.*[Tt]imeout|wait timeout after"
        ),
    ),
    (
        FailureKind.COMM_ERROR,
        re.compile(
            r"Connection closed by peer|Connection reset by peer|ncclSystemError|ncclInternalError|"
            r"ncclRemoteError|ncclUnhandledCudaError|NCCL error|DistNetworkError|RendezvousConnectionError|"
            r"Broken pipe|Gloo connectFullMesh failed|ProcessGroupGloo.*failed"
        ),
    ),
    (
        FailureKind.CUDA_ERROR,
        re.compile(
            r"CUDA error: (?!out of memory)|CUBLAS_STATUS_|CUDNN_STATUS_|device-side assert|"
            r"illegal memory access|NVML_SUCCESS == r INTERNAL ASSERT"
        ),
    ),
    (FailureKind.CRASH, re.compile(r"Segmentation fault|core dumped|Fatal Python error|Aborted \(core")),
)


@dataclass(frozen=True)
class RankFailure:
    """One failed rank as torchrun or its error file reported it."""

    rank: int | None
    exit_code: int | None  # negative: killed by that signal
    message: str = ""  # the traceback or error text of that rank, if any
    timestamp: float | None = None


@dataclass(frozen=True)
class AttemptEvidence:
    exit_code: int | None  # torchrun's (or swift's) exit code; negative: a signal
    rank_failures: tuple[RankFailure, ...] = ()
    log_tail: tuple[str, ...] = ()
    kernel_oom: tuple[str, ...] = ()  # lines proving a kernel OOM kill happened during the attempt
    interrupted_by: str | None = None  # SIGINT/SIGTERM/SIGHUP that the user or scheduler sent safe-sft
    hang: str | None = None  # the watchdog's finding
    steps_seen: bool = False  # training steps were logged in this attempt


_EXCEPTION_LINE = re.compile(r"\w+(Error|Exception|Interrupt)\b:")


def _first_match(pattern: re.Pattern[str], lines: Sequence[str]) -> str | None:
    """The line that proves a pattern, preferring an exception's message over the source line raising it."""
    hits = [line.strip() for line in lines if pattern.search(line)]
    return next((hit for hit in hits if _EXCEPTION_LINE.search(hit)), hits[0] if hits else None)


def classify_text(lines: Sequence[str], steps_seen: bool) -> tuple[FailureKind, tuple[str, ...]] | None:
    """The kind of failure a traceback or log shows, with the lines that prove it; None if no pattern hits."""
    oom_line = _first_match(_OOM, lines)
    if oom_line is not None:
        save = _first_match(_SAVE_MARKERS, lines)
        if save is not None:
            return FailureKind.CUDA_OOM_SAVE, (oom_line, save)
        evaluation = _first_match(_EVAL_MARKERS, lines)
        if evaluation is not None:
            return FailureKind.CUDA_OOM_EVAL, (oom_line, evaluation)
        load = _first_match(_LOAD_MARKERS, lines)
        if load is not None and not steps_seen:
            return FailureKind.CUDA_OOM_LOAD, (oom_line, load)
        return FailureKind.CUDA_OOM, (oom_line,)
    host_line = _first_match(_HOST_ALLOC, lines)
    if host_line is not None:
        return FailureKind.HOST_OOM, (host_line,)
    for kind, pattern in _PATTERNS:
        line = _first_match(pattern, lines)
        if line is not None:
            return kind, (line,)
    return None


def _signal_failure(failure: RankFailure, kernel_oom: Sequence[str]) -> tuple[FailureKind, tuple[str, ...]]:
    signum = -(failure.exit_code or 0)
    name = SIGNAL_NAMES.get(signum, f"signal {signum}")
    where = f"rank {failure.rank} exited with {name}"
    if signum == 9 and kernel_oom:
        return FailureKind.HOST_OOM, (where, *kernel_oom)
    if signum in NATIVE_CRASH_SIGNALS:
        return FailureKind.CRASH, (where,)
    if signum in (9, 15):
        return FailureKind.KILLED, (where + " and no OOM evidence",)
    return FailureKind.UNKNOWN, (where,)


def classify(evidence: AttemptEvidence) -> Failure | None:
    """None when the attempt succeeded; otherwise the root cause with its evidence."""
    if evidence.interrupted_by:
        return Failure(FailureKind.INTERRUPTED, (f"safe-sft received {evidence.interrupted_by}",))
    if evidence.hang:
        return Failure(FailureKind.HANG, (evidence.hang,), exit_code=evidence.exit_code)
    if evidence.exit_code == 0:
        return None

    candidates: list[tuple[float, float, Failure]] = []
    for order, failure in enumerate(evidence.rank_failures):
        found = classify_text(failure.message.splitlines(), evidence.steps_seen) if failure.message else None
        if found is None and failure.exit_code is not None and failure.exit_code < 0:
            found = _signal_failure(failure, evidence.kernel_oom)
        if found is None:
            continue
        kind, lines = found
        when = failure.timestamp if failure.timestamp is not None else float(order)
        candidates.append(
            (
                strength(kind, failure.exit_code),
                -when,
                Failure(kind, lines, failure.rank, failure.exit_code, _summary(kind)),
            )
        )
    error_lines = [line for line in evidence.log_tail if _ERROR_LINE.search(line)]
    tail_kind = classify_text(error_lines, evidence.steps_seen)
    if tail_kind is not None:
        kind, lines = tail_kind
        rank = _rank_of(lines[0])
        candidates.append(
            (strength(kind), float("-inf"), Failure(kind, lines, rank, evidence.exit_code, _summary(kind)))
        )
    if evidence.kernel_oom and not any(c[2].kind is FailureKind.HOST_OOM for c in candidates):
        candidates.append((PRIMARY - 1, float("-inf"), Failure(FailureKind.HOST_OOM, tuple(evidence.kernel_oom))))
    if not candidates:
        tail = tuple(line.strip() for line in evidence.log_tail[-3:] if line.strip())
        return Failure(FailureKind.UNKNOWN, tail or (f"exit code {evidence.exit_code}",), exit_code=evidence.exit_code)
    # The strongest kind wins; among equals, the earliest failure (error-file time, else report order).
    candidates.sort(key=lambda c: (c[0], c[1]), reverse=True)
    return candidates[0][2]


# Only these lines of a log tail count as evidence: warnings that merely mention a path or a feature don't.
_ERROR_LINE = re.compile(r"Error|Exception|error:|Traceback|Signal \d+|NCCL WARN|out of memory|Killed|Segmentation")
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank(\d+)\]:")


def _rank_of(line: str) -> int | None:
    match = _RANK_PREFIX.match(line)
    return int(match.group(1)) if match else None


_SUMMARIES = {
    FailureKind.CUDA_OOM: "CUDA out of memory in a training step",
    FailureKind.CUDA_OOM_LOAD: "CUDA out of memory while loading or initialising",
    FailureKind.CUDA_OOM_SAVE: "CUDA out of memory while saving a checkpoint",
    FailureKind.CUDA_OOM_EVAL: "CUDA out of memory during evaluation",
    FailureKind.HOST_OOM: "host RAM exhausted (kernel OOM kill)",
    FailureKind.MEMLOCK: "locked-memory limit (memlock) too low for pinned memory",
    FailureKind.SHM: "/dev/shm too small",
    FailureKind.COMM_TIMEOUT: "a collective operation timed out",
    FailureKind.COMM_ERROR: "communication between ranks failed",
    FailureKind.CUDA_ERROR: "a CUDA error other than out of memory",
    FailureKind.CRASH: "a native crash",
    FailureKind.KILLED: "a training process was killed",
    FailureKind.USER_ERROR: "bad arguments, a missing path or bad data",
    FailureKind.UNKNOWN: "an unrecognised failure",
}


def _summary(kind: FailureKind) -> str:
    return _SUMMARIES.get(kind, kind.value)


# ---- torchrun's ChildFailedError summary ------------------------------------------------------------

_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$")


def parse_torchrun_failures(lines: Sequence[str]) -> tuple[RankFailure, ...]:
    """The `Failures:` and `Root Cause` blocks of torchrun's summary, as RankFailures (root cause first)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    in_summary = False
    for raw in lines:
        line = raw.rstrip("\n")
        if re.search(r"(Root Cause \(first observed failure\)|^Failures:)", line.strip()):
            in_summary = True
            continue
        if not in_summary:
            continue
        if re.match(r"^\s*\[\d+\]:\s*$", line):
            current = {}
            blocks.append(current)
            continue
        match = _FIELD.match(line)
        if line.startswith(("===", "---")):
            current = None
        elif match and current is not None:
            current[match.group(1)] = match.group(2).strip()
        elif current is not None and "traceback" in current and line.strip():
            current["traceback"] += "\n" + line.strip()
    failures: list[RankFailure] = []
    seen: set[tuple[str, str]] = set()
    for block in blocks:
        key = (block.get("rank", ""), block.get("exitcode", ""))
        if key in seen:
            continue
        seen.add(key)
        rank_match = re.match(r"(\d+)", block.get("rank", ""))
        code_match = re.match(r"(-?\d+)", block.get("exitcode", ""))
        traceback = block.get("traceback", "")
        failures.append(
            RankFailure(
                rank=int(rank_match.group(1)) if rank_match else None,
                exit_code=int(code_match.group(1)) if code_match else None,
                message="" if traceback.startswith("Signal ") or traceback == "<N/A>" else traceback,
            )
        )
    # torchrun prints Failures (others) before the Root Cause; put the root cause first.
    return tuple(reversed(failures)) if len(failures) > 1 else tuple(failures)


def merge_failures(summary: Sequence[RankFailure], error_files: Sequence[RankFailure]) -> tuple[RankFailure, ...]:
    """torchrun's summary knows every failed rank and its exit code; an error file knows its full error.

    A rank killed by a signal writes no error file, so neither source alone is enough.
    """
    by_rank = {f.rank: f for f in error_files}
    merged = []
    for failure in summary:
        detail = by_rank.pop(failure.rank, None)
        if detail is not None and (failure.exit_code is None or failure.exit_code >= 0):
            failure = RankFailure(failure.rank, failure.exit_code, detail.message, detail.timestamp)
        merged.append(failure)
    merged.extend(by_rank.values())
    return tuple(merged)
