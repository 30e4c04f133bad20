"""The relay of a training process's output: to the terminal and console.log, and after the user's own
interrupt to console.log only (a real child process, its pipes and the relay threads)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from launcher.run.child import TrainingProcess


def _muted_after(tmp_path: Path, before: str, after: str, seen: bytes) -> tuple[int, str]:
    """Run a child that prints `before`, waits, then prints `after`; mute the terminal once `seen` is in
    console.log, between the two. Its exit code and tail; the terminal's bytes are in tmp_path/terminal."""
    go = tmp_path / "go"
    script = f"import os, sys, time\n{before}\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n{after}\n"
    terminal = (tmp_path / "terminal").open("wb")
    process = TrainingProcess([sys.executable, "-c", script], {}, tmp_path / "console.log", terminal, terminal)
    deadline = time.monotonic() + 30
    while seen not in (tmp_path / "console.log").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    process.mute_terminal()
    go.touch()
    result = process.finish()
    terminal.close()
    return result


def test_a_muted_process_writes_to_its_log_only(tmp_path: Path) -> None:
    after = "print('after', flush=True); print('after on stderr', file=sys.stderr, flush=True)"
    code, tail = _muted_after(tmp_path, "print('before', flush=True)", after, b"before")
    assert code == 0 and "after on stderr" in tail
    assert (tmp_path / "terminal").read_text() == "before\n"
    logged = (tmp_path / "console.log").read_text().splitlines()
    assert logged[0] == "before" and sorted(logged[1:]) == ["after", "after on stderr"]  # two pipes: either first


def test_muting_ends_a_progress_bars_open_line(tmp_path: Path) -> None:
    """A Ctrl-C's `safe-sft: SIGINT: stopping ...` had been glued to the end of a progress bar's line."""
    _muted_after(tmp_path, "sys.stderr.write('Train:  5%|##  | 56/1200\\r'); sys.stderr.flush()", "", b"1200")
    assert (tmp_path / "terminal").read_bytes() == b"Train:  5%|##  | 56/1200\r\n"
    assert (tmp_path / "console.log").read_bytes() == b"Train:  5%|##  | 56/1200\r"  # the log is the output alone


def test_a_terminal_whose_reader_is_gone_is_muted_and_the_process_runs_to_its_end(tmp_path: Path) -> None:
    """`safe-sft ... | head -1`: the relay died on EPIPE, nothing drained the process's stdout, and a rank
    that printed more than the pipe holds blocked in print for good (the watchdog then called it a hang)."""
    import os

    script = "import sys\nfor _ in range(48): sys.stdout.write('x' * 65535 + '\\n')\nprint('done', flush=True)\n"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    terminal = os.fdopen(write_end, "wb")
    process = TrainingProcess([sys.executable, "-c", script], {}, tmp_path / "console.log", terminal, terminal)
    deadline = time.monotonic() + 60
    while process.popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if process.popen.poll() is None:
        process.popen.kill()
        raise AssertionError("the process blocked writing to its undrained stdout")
    code, tail = process.finish()
    assert code == 0 and tail.rstrip().endswith("done")
    assert (tmp_path / "console.log").stat().st_size == 48 * 65536 + len("done\n")  # all of it, in the log
    assert os.readlink(f"/proc/self/fd/{terminal.fileno()}") == os.devnull  # muted, not written again
    terminal.close()


def test_a_finished_process_leaves_no_pipe_open(tmp_path: Path) -> None:
    """Each attempt's two pipes are closed once drained: a supervised run of many attempts held two open
    descriptors per attempt, and Python named them in ResourceWarning tracebacks (PYTHONDEVMODE=1)."""
    import gc
    import warnings

    terminal = (tmp_path / "terminal").open("wb")
    process = TrainingProcess([sys.executable, "-c", "print('x')"], {}, tmp_path / "console.log", terminal, terminal)
    assert process.finish()[0] == 0
    terminal.close()
    assert process.popen.stdout is not None and process.popen.stderr is not None
    assert process.popen.stdout.closed and process.popen.stderr.closed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        del process
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
