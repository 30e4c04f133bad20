"""Read the logs a user hands `safe-sft explain`, safely and in bounded memory.

Input: paths (regular files, an attempt's folder, or `-` for stdin). Output: `LogText`, the lines that
can matter for classification (every line of the last part of the input, plus the lines of earlier parts
that carry a failure keyword), with terminal escape codes and control characters removed, and the
failures recorded in torchelastic error files found in a folder. A 200 MB log is scanned in chunks with
one regex pass, never held whole.

Refused with a one-line `SafeSftError`: a path that does not exist or cannot be read, something that is
not a regular file or folder (a FIFO or a device: it may never end), binary data, stdin given twice or
closed, and empty input. A log in UTF-16 is read as text; one in another 8-bit encoding (GBK, Latin-1)
is classified on its ASCII lines.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import re
import stat
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from launcher.errors import SafeSftError, folder_unreadable
from launcher.run.classify import RankFailure
from launcher.run.evidence import error_files, read_error_files

CHUNK = 8 << 20
TAIL_BYTES = 1 << 20  # the last part of each input, kept whole
MAX_BODY_LINES = 20_000  # keyword lines kept from before the tail (the newest)
MAX_BODY_BYTES = MAX_BODY_LINES * 400  # ... and their bytes: a log of long keyword lines stays bounded too
MAX_LINE = 4000  # characters of one line kept: its first and last halves (a failure is often at a line's end)
SEGMENT_BYTES = 1 << 20  # a block's keyword lines are looked for a segment at a time, from its end
LINE_BYTES = 4 * MAX_LINE  # bytes of one line looked at around a keyword (MAX_LINE characters of UTF-8)
_LOG_SUFFIXES = (".log", ".out", ".err", ".txt")

# Lines before the tail that can prove a failure: exceptions, tracebacks and their frames, launcher,
# kernel and scheduler reports. Anything else there is training chatter.
KEYWORDS = (
    "Error", "Exception", "error", "Traceback", 'File "', "Signal", "signal", "exitcode", "exit code",
    "exit status", "return code", "out of memory", "Out of memory", "oom", "OOM", "Killed", "killed",
    "Segmentation", "Aborted", "terminate called", "NCCL", "Timeout", "timed out", "CANCELLED", "FAILED",
    "failed", "No space left", "Bus error", "KeyboardInterrupt", "memlock", "Cannot allocate", "Saving model",
    "Max retries", "gated repo", "socket.timeout",
)  # fmt: skip


def _keyword_regex(words: Sequence[str]) -> re.Pattern[bytes]:
    """One alternation per first character: the regex engine then tries one branch per position, not all."""
    groups: dict[str, list[str]] = {}
    for word in words:
        groups.setdefault(word[0], []).append(re.escape(word[1:]))
    return re.compile("|".join(f"{re.escape(first)}(?:{'|'.join(rest)})" for first, rest in groups.items()).encode())


_KEYWORDS = _keyword_regex(KEYWORDS)
_STEP_MARKER = re.compile(rb"global_step/max_steps|\{'loss': ")
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class LogText:
    lines: tuple[str, ...]
    error_files: tuple[RankFailure, ...]
    steps_seen: bool
    sources: tuple[str, ...]


def clean_line(raw: str) -> str:
    """A line as a terminal would show its text: no escape sequences, no control characters; an overlong
    one keeps its start and its end."""
    line = _CONTROL.sub("", _ESCAPES.sub("", raw))
    half = MAX_LINE // 2
    return line if len(line) <= MAX_LINE else f"{line[:half]} ... {line[-half:]}"


# the files a mistaken path names next to a log: a zip (torch's .pt/.bin, an archive), a pickle, numpy, gzip,
# parquet, arrow, an executable, an image
_BINARY_MAGIC = (
    b"PK\x03\x04", b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05", b"\x93NUMPY", b"\x1f\x8b",
    b"PAR1", b"ARROW1", b"\x7fELF", b"\x89PNG", b"\xff\xd8\xff",
)  # fmt: skip


def _is_safetensors(head: bytes) -> bool:
    """A safetensors file: its header's length (8 bytes, little-endian), then the JSON header itself."""
    return len(head) > 9 and head[8:10] == b'{"' and 0 < int.from_bytes(head[:8], "little") < 2**30


def _looks_binary(head: bytes) -> bool:
    """A known binary format (weights, an archive, an executable), or many control characters. NULs are not
    counted: a node that crashed while its log was appended to leaves a run of them (a file system's
    zero-filled blocks), and the text around them is the log. Nor are bytes past ASCII: a log in GBK or
    Latin-1 is text, and its ASCII lines (tracebacks, launcher reports) classify as they are."""
    if head.startswith(_BINARY_MAGIC) or _is_safetensors(head):
        return True
    text = head.replace(b"\x00", b"")
    if not text:  # NULs alone (an endless /dev/zero on stdin): nothing to read on for
        return bool(head)
    sample = text[:8192]
    odd = sum(1 for byte in sample if (byte < 32 and byte not in b"\t\n\r\x0c\x1b") or byte == 0x7F)
    return odd > len(sample) * 0.1


_UTF16_BOMS = {codecs.BOM_UTF16_LE: "utf-16", codecs.BOM_UTF16_BE: "utf-16"}


def _utf16_encoding(head: bytes) -> str | None:
    """The UTF-16 a log is written in (Windows PowerShell's `>` writes UTF-16 with a BOM), else None."""
    if head[:2] in _UTF16_BOMS:
        return _UTF16_BOMS[head[:2]]
    sample = head[:4096]
    pairs = len(sample) // 2
    if pairs < 8:
        return None
    # ASCII text in UTF-16 without a BOM: every other byte is NUL
    if sample[1::2].count(0) > pairs * 0.9 and sample[0::2].count(0) < pairs * 0.1:
        return "utf-16-le"
    if sample[0::2].count(0) > pairs * 0.9 and sample[1::2].count(0) < pairs * 0.1:
        return "utf-16-be"
    return None


def _line_start(block: bytes, before: int) -> int:
    """Where the line holding `before` starts: after a \n, or after a \r (a progress bar redrawn in place).
    Looked for at most LINE_BYTES back, so that a log of keyword lines is read in linear time: a longer
    line is taken from there."""
    low = max(0, before - LINE_BYTES)
    return max(block.rfind(b"\n", low, before), block.rfind(b"\r", low, before), low - 1) + 1


def _line_end(block: bytes, after: int) -> int:
    """Where the line holding `after` ends, looked for at most LINE_BYTES ahead (as `_line_start`)."""
    high = after + LINE_BYTES
    ends = [end for end in (block.find(b"\n", after, high), block.find(b"\r", after, high)) if end >= 0]
    return min(ends) if ends else min(len(block), high)


def _keyword_lines(block: bytes, begin: int, stop: int) -> list[bytes]:
    """The lines of block[begin:stop] (begin at a line's start) that hold a keyword, each once."""
    lines, end = [], -1
    for match in _KEYWORDS.finditer(block, begin, stop):
        if match.start() <= end:
            continue
        start, end = _line_start(block, match.start()), _line_end(block, match.end())
        lines.append(block[max(start, begin) : min(end, stop)])
    return lines


class _Scanner:
    """Keyword lines from the body of one input, every line of its tail."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.body: deque[bytes] = deque()
        self.body_bytes = 0
        self.pending = b""
        self.size = 0
        self.steps_seen = False

    def feed(self, chunk: bytes) -> None:
        if self.size == 0 and _looks_binary(chunk):
            raise SafeSftError(f"{self.name} is binary data, not a log", "give a text log (a terminal capture)")
        self.size += len(chunk)
        self.pending += chunk
        if len(self.pending) > 2 * TAIL_BYTES:
            # at a line's start; within a line longer than LINE_BYTES (a log without line breaks) mid-line
            cut = _line_start(self.pending, len(self.pending) - TAIL_BYTES)
            self._scan(self.pending[:cut])
            self.pending = self.pending[cut:]

    def _scan(self, block: bytes) -> None:
        """The block's keyword lines into the body. Only its newest MAX_BODY_LINES can stay, so it is read
        from its end a segment at a time, until that many are found (a log whose every line holds a
        keyword, NCCL_DEBUG=INFO, is then read a fraction of a block at a time)."""
        if not self.steps_seen and _STEP_MARKER.search(block):
            self.steps_seen = True
        segments: list[list[bytes]] = []
        found, stop = 0, len(block)
        while stop > 0 and found < MAX_BODY_LINES:
            # a line's start, or within a line longer than LINE_BYTES: always before `stop`
            begin = _line_start(block, stop - SEGMENT_BYTES) if stop > SEGMENT_BYTES else 0
            segments.append(_keyword_lines(block, begin, stop))
            found += len(segments[-1])
            stop = begin
        for lines in reversed(segments):
            for line in lines:
                self._keep(line)

    def _keep(self, line: bytes) -> None:
        """The newest keyword lines, at most MAX_BODY_LINES of them and MAX_BODY_BYTES."""
        self.body.append(line)
        self.body_bytes += len(line)
        while len(self.body) > MAX_BODY_LINES or (self.body_bytes > MAX_BODY_BYTES and len(self.body) > 1):
            self.body_bytes -= len(self.body.popleft())

    def lines(self) -> list[str]:
        if self.size == 0 or (not self.body and not self.pending.replace(b"\x00", b"").strip()):
            what = "empty" if self.size == 0 else "blank (white space or NUL bytes alone)"
            raise SafeSftError(f"{self.name} is {what}: there is nothing to classify", "give the log of a failed run")
        if _STEP_MARKER.search(self.pending):
            self.steps_seen = True
        text = b"\n".join(self.body) + b"\n" + self.pending if self.body else self.pending
        decoded = text.decode("utf-8", errors="replace")
        return [clean_line(line) for line in re.split(r"\r\n|\r|\n", decoded)]


def _read_stream(stream: BinaryIO, name: str) -> _Scanner:
    """Scan one input; a UTF-16 one is turned into UTF-8 as it is read."""
    scanner = _Scanner(name)
    decoder: codecs.IncrementalDecoder | None = None
    first = True
    for chunk in _chunks(stream, name):
        if first:
            encoding = _utf16_encoding(chunk)
            decoder = codecs.getincrementaldecoder(encoding)(errors="replace") if encoding else None
            first = False
        scanner.feed(decoder.decode(chunk).encode("utf-8") if decoder else chunk)
    return scanner


def _chunks(stream: BinaryIO, name: str) -> Iterator[bytes]:
    """The input in CHUNK-sized reads, to its end. A pipe left non-blocking (by ssh, Node.js, some CI
    runners) is read blocking: otherwise its first empty moment would end the log."""
    with contextlib.suppress(OSError, ValueError):  # not a real descriptor (io.UnsupportedOperation)
        os.set_blocking(stream.fileno(), True)
    try:
        while chunk := stream.read(CHUNK):
            yield chunk
    except OSError as err:
        raise SafeSftError(f"cannot read {name}: {err.strerror or err}", "give a log file, or pipe one in") from None


def _files_of(path: Path) -> list[Path]:
    """_logs_in(path), with a folder that cannot be listed or searched refused in one line."""
    try:
        return _logs_in(path)
    except OSError as err:
        raise folder_unreadable(path, err, "give a folder you can read, or its log file") from None


def _logs_in(path: Path) -> list[Path]:
    """The logs in an attempt's folder (console.log) or any folder of logs. An output dir or a run's folder
    of safe-sft's holds whole runs, each attempt's failure with it (recovered from or not): refused, with the
    newest attempt's folder named, and `safe-sft report` for the runs."""
    console = path / "console.log"
    if console.is_file():
        return [console]
    # the output dir, its safe-sft/ folder, or one run's folder
    runs = [*path.glob("safe-sft/*/attempt-*"), *path.glob("*/attempt-*"), *path.glob("attempt-*")]
    attempts = sorted(runs, key=_attempt_order)
    if (path / "report.json").is_file() or any(path.glob("*/report.json")) or attempts:
        failed = [attempt for attempt in attempts if _failed(attempt)] or attempts
        newest = f"safe-sft explain {failed[-1]}" if failed else "give an attempt's folder"
        raise SafeSftError(
            f"{path} holds safe-sft's records of whole runs, not one failure (a run may have failed, then recovered)",
            f"`safe-sft report {path}` tells how each run ended; to explain one attempt: {newest}",
        )
    found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _LOG_SUFFIXES)
    if not found and not error_files(path):
        raise SafeSftError(f"{path} holds no log (*.log, *.out, *.err, *.txt) and no error.json", "give a log file")
    return found


def _failed(attempt: Path) -> bool:
    """Whether the run's report.json says this attempt failed (the one to explain; a recovered run's last
    attempt finished)."""
    try:
        report = json.loads((attempt.parent / "report.json").read_bytes())
        number = int(attempt.name.removeprefix("attempt-"))
        return any(a.get("number") == number and a.get("failure") for a in report.get("attempts", []))
    except (OSError, ValueError, AttributeError, TypeError):
        return False


def _attempt_order(attempt: Path) -> tuple[str, int]:
    """By run (its folder's name starts with the time it began), then by attempt number."""
    number = attempt.name.removeprefix("attempt-")
    return attempt.parent.name, int(number) if number.isdigit() else 0


def _open_checked(path: Path) -> Iterator[tuple[str, BinaryIO]]:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise SafeSftError(f"{path} does not exist", "give the path of a saved log") from None
    except OSError as err:
        raise SafeSftError(f"cannot read {path}: {err.strerror}", "give the path of a saved log") from None
    if stat.S_ISDIR(mode):
        for file in _files_of(path):
            yield from _open_checked(file)
        return
    if stat.S_ISFIFO(mode):
        raise SafeSftError(
            f"{path} is a FIFO, not a regular file", f"pipe it in instead: cat {path} | safe-sft explain -"
        )
    if not stat.S_ISREG(mode):
        raise SafeSftError(f"{path} is a device or socket, not a regular file", "give the path of a saved log")
    try:
        with open(path, "rb") as stream:
            yield str(path), stream
    except OSError as err:
        raise SafeSftError(f"cannot read {path}: {err.strerror}", "give the path of a saved log") from None


def read_logs(paths: Sequence[str], stdin: BinaryIO | None = None) -> LogText:
    """Every input's lines in the order given (several files merge into one log), and its error files."""
    lines: list[str] = []
    steps_seen = False
    sources: list[str] = []
    error_files: list[RankFailure] = []
    if list(paths).count("-") > 1:
        raise SafeSftError("- (stdin) is given more than once", "give - once: stdin can be read only once")
    for raw in paths:
        if raw == "-":
            if stdin is None and sys.stdin is None:
                raise SafeSftError(
                    "stdin is closed: there is nothing to read", "pipe a log in: cat train.log | safe-sft explain -"
                )
            stream = stdin if stdin is not None else sys.stdin.buffer
            if stream.isatty():
                raise SafeSftError("nothing is piped into stdin", "pipe a log in: cat train.log | safe-sft explain -")
            scanners = [_read_stream(stream, "stdin")]
        else:
            scanners = [_read_stream(stream, name) for name, stream in _open_checked(Path(raw))]
            if Path(raw).is_dir():
                error_files.extend(read_error_files(Path(raw), node_rank=0, nproc_per_node=1))
        for scanner in scanners:
            lines.extend(scanner.lines())
            steps_seen = steps_seen or scanner.steps_seen
            sources.append(scanner.name)
    if not lines and not error_files:
        raise SafeSftError("no log was given", "give a log file, an attempt's folder, or - for stdin")
    return LogText(tuple(lines), tuple(error_files), steps_seen, tuple(sources))
