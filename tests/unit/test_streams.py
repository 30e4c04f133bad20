"""safe-sft's own stdout and stderr never end a run: a closed fd (a daemon's `>&-`), a reader that is gone
(`2>&1 | head -1`), a full disk under the log file. Each case runs in a real process, as the console entry
does (launcher.streams.guard_std_streams first)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = (
    "import sys; from launcher.streams import guard_std_streams; guard_std_streams()\n"
    "sinks = sys.stdout.buffer.fileno(), sys.stderr.buffer.fileno()  # the relay's, as the supervisor takes them\n"
    "for n in range(2000): print('stdout line', n); print('stderr line', n, file=sys.stderr)\n"
    "open(sys.argv[1], 'w').write('went on')\n"
)


def run_with(tmp: Path, **fds: int | None) -> tuple[int, str]:
    marker = tmp / "went-on"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(marker)], cwd=ROOT, stdin=subprocess.DEVNULL, timeout=60, **fds
    )
    return done.returncode, marker.read_text() if marker.exists() else ""


def test_a_closed_stdout_or_stderr_is_held_on_dev_null(tmp_path: Path) -> None:
    """Python leaves sys.stdout None for a closed fd 1: safe-sft's run path ended in an AttributeError."""
    for closed, redirect in (("stdout", ">&-"), ("stderr", "2>&-"), ("both", ">&- 2>&-")):
        shell = f'"{sys.executable}" -c "$0" "$1" {redirect}'
        code = subprocess.run(["sh", "-c", shell, PROGRAM, str(tmp_path / closed)], cwd=ROOT, timeout=60).returncode
        marker = tmp_path / closed
        assert (code, marker.read_text() if marker.exists() else "") == (0, "went on"), closed


def test_a_reader_that_is_gone_mutes_the_stream_and_the_exit_status_is_the_programs(tmp_path: Path) -> None:
    """`2>&1 | head -1`: safe-sft's first message raised BrokenPipeError, taken for its output dir's."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        assert run_with(tmp_path, stdout=write_end, stderr=write_end) == (0, "went on")
    finally:
        os.close(write_end)


def test_a_full_disk_under_the_log_mutes_it_and_the_exit_status_is_the_programs(tmp_path: Path) -> None:
    """A log on a full filesystem: a run that succeeded exited 120 on Python's final flush."""
    with open("/dev/full", "wb") as full:
        assert run_with(tmp_path, stdout=full.fileno(), stderr=full.fileno()) == (0, "went on")
