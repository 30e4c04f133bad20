"""The progress watchdog: no progress of any kind for too long means a hang.

swift's ddp_timeout defaults to 18,000,000 s, so a rank that dies or stops while the others wait in a
collective can hang a job for days without an error line. Progress is anything swift records or logs
that moves: a new `global_step` in the run dir's logging.jsonl, a checkpoint dir that appears or grows
while it is written, and a progress bar in the attempt's output whose count moves (dataset map and
tokenize, model download and loading, evaluation, training: every tqdm bar swift and the libraries
under it print). The run dir is the one swift reported (launcher/run/resolved.py), never a guess.

Before the first training step the allowance is `startup_timeout` since the last progress (0: none);
after it, `hang_timeout` since the last progress. `hang_timeout` 0 turns the watchdog off.
`logging_steps` x the step time must stay below hang_timeout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from launcher.run.evidence import attempt_run_dir, attempt_step

CHECK_EVERY_SECONDS = 5.0
READ_AT_MOST = 8 << 20  # of new console output per check: a bar's latest state is at the end

# tqdm's bar: `<label>: 45%|████▌     | 450/1000 [00:03<00:04, 120.00 examples/s]`
_BAR = re.compile(r"^(?P<label>.*?)\s*\d{1,3}%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)")
# and without a total: `Map (num_proc=4): 3850 examples [00:09, 103.48 examples/s]`
_COUNTER = re.compile(r"^(?P<label>[^\[\]]*?):\s*(?P<n>\d+)(?P<total>\s*[A-Za-z]+)?\s*\[\d+:\d\d")
_WHOLE_BAR = re.compile(r"\d+(/\d+)?\s*[A-Za-z]*\s*\[[^\]]*\]\s*$")  # a redraw that has reached its end


@dataclass
class OutputProgress:
    """Progress bars in the console output: a bar's count that moved is one progress mark."""

    marks: int = 0
    counts: dict[tuple[str, str], str] = field(default_factory=dict)  # (label, total) -> the last count
    partial: str = ""  # the text after the last line break or carriage return, kept for the next feed

    def feed(self, text: str) -> None:
        *segments, self.partial = re.split(r"[\r\n]", self.partial + text)
        # tqdm starts a redraw with \r and ends it with nothing: the last one counts once it is whole
        if _WHOLE_BAR.search(self.partial):
            segments.append(self.partial)
        for segment in segments:
            match = _BAR.search(segment) or _COUNTER.search(segment)
            if match is None:
                continue
            key = (match.group("label").strip(), (match.group("total") or "").strip())
            if self.counts.get(key) != match.group("n"):
                self.counts[key] = match.group("n")
                self.marks += 1


@dataclass
class ConsoleTail:
    """The new bytes of the attempt's console.log since the last read."""

    path: Path
    offset: int = 0

    def read_new(self) -> str:
        try:
            with self.path.open("rb") as handle:
                size = handle.seek(0, 2)
                if size <= self.offset:
                    return ""
                start = max(self.offset, size - READ_AT_MOST)
                handle.seek(start)
                data = handle.read(size - start)
        except OSError:
            return ""
        self.offset = start + len(data)
        return data.decode("utf-8", errors="replace")


def checkpoint_signature(run_dir: Path | None) -> tuple[int, int]:
    """(how many checkpoint dirs, bytes in the newest one so far): both move while one is written."""
    if run_dir is None:
        return 0, 0
    try:
        folders = [p for p in run_dir.glob("checkpoint-*") if p.is_dir()]
        if not folders:
            return 0, 0
        newest = max(folders, key=lambda p: p.stat().st_mtime_ns)
        size = sum(f.stat().st_size for f in newest.rglob("*") if f.is_file())
    except OSError:
        return 0, 0
    return len(folders), size


@dataclass
class ProgressWatch:
    attempt_dir: Path  # the attempt's folder: swift's resolved arguments and its console.log are there
    started: float  # the clock's reading at the attempt's start
    hang_timeout: float  # 0: the watchdog is off
    startup_timeout: float  # 0: no limit before the first step
    output_dir: Path | None = None  # the output dir safe-sft expects (--add_version false: the run dir)
    log_bytes_before: int = 0  # its logging.jsonl's size before the attempt: swift appends to it
    last_progress: float = field(init=False)
    last_check: float = field(init=False)
    step: int | None = field(init=False, default=None)
    checkpoints: tuple[int, int] = field(init=False, default=(0, 0))
    output_marks: int = field(init=False, default=0)
    output: OutputProgress = field(init=False, default_factory=OutputProgress)
    console: ConsoleTail = field(init=False)
    step_seen: dict[int, float] = field(init=False, default_factory=dict)  # step -> seconds after the start

    def __post_init__(self) -> None:
        self.last_progress = self.started
        self.last_check = self.started
        self.console = ConsoleTail(self.attempt_dir / "console.log")

    def observe(self, now: float, step: int | None, checkpoints: tuple[int, int], output_marks: int = 0) -> None:
        seen = (step, checkpoints, output_marks)
        if seen != (self.step, self.checkpoints, self.output_marks):
            self.step, self.checkpoints, self.output_marks = seen
            self.last_progress = now
        if step is not None and step not in self.step_seen:
            self.step_seen[step] = round(now - self.started, 3)

    def stalled(self, now: float) -> str | None:
        """The finding when the allowance is used up, else None."""
        if self.hang_timeout <= 0:
            return None
        quiet = now - self.last_progress
        if self.step is None:
            if 0 < self.startup_timeout < quiet:
                return (
                    f"no progress for {self.startup_timeout:.0f} s before the first training step "
                    "(--startup-timeout): no progress bar moved, no step, no checkpoint"
                )
            return None
        if quiet > self.hang_timeout:
            return (
                f"no progress for {self.hang_timeout:.0f} s after step {self.step} (--hang-timeout): "
                "no new logged step, no checkpoint written, no progress bar moved (data, evaluation)"
            )
        return None

    def poll(self, now: float) -> str | None:
        """Read swift's progress now and then (cheap stats in between), and judge."""
        if now - self.last_check >= CHECK_EVERY_SECONDS:
            self.last_check = now
            self.output.feed(self.console.read_new())
            run_dir = attempt_run_dir(self.attempt_dir)
            skip = self.log_bytes_before if run_dir is not None and run_dir == self.output_dir else 0
            step = attempt_step(run_dir, skip, self.attempt_dir)
            self.observe(now, step, checkpoint_signature(run_dir), self.output.marks)
        return self.stalled(now)
