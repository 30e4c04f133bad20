"""The relay of a training process's output: to the terminal and console.log, and after the user's own
interrupt to console.log only (a real child process, its pipes and the relay threads)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from launcher.run.child import TrainingProcess


def test_a_muted_process_writes_to_its_log_only(tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "print('before', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "print('after', flush=True); print('after on stderr', file=sys.stderr, flush=True)\n"
    )
    terminal = (tmp_path / "terminal").open("wb")
    process = TrainingProcess([sys.executable, "-c", script], {}, tmp_path / "console.log", terminal, terminal)
    deadline = time.monotonic() + 30
    while b"before" not in (tmp_path / "console.log").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    process.mute_terminal()
    go.touch()
    code, tail = process.finish()
    terminal.close()
    assert code == 0 and "after on stderr" in tail
    assert (tmp_path / "terminal").read_text() == "before\n"
    logged = (tmp_path / "console.log").read_text().splitlines()
    assert logged[0] == "before" and sorted(logged[1:]) == ["after", "after on stderr"]  # two pipes: either first
