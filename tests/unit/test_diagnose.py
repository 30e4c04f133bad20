"""What the watchdog collects from a hung attempt: process states, and stacks where py-spy is there."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from launcher.run import diagnose


@pytest.fixture
def stopped_and_running():  # type: ignore[no-untyped-def]
    code = "import time; time.sleep(60)"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    procs[1].send_signal(signal.SIGSTOP)
    for _ in range(100):  # the stop is asynchronous
        if psutil.Process(procs[1].pid).status() == psutil.STATUS_STOPPED:
            break
        time.sleep(0.01)
    yield [psutil.Process(p.pid) for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def test_a_stopped_process_is_named_even_without_py_spy(stopped_and_running, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(diagnose, "find_py_spy", lambda: None)
    running, stopped = stopped_and_running
    found = diagnose.collect_stacks(stopped_and_running, tmp_path)
    assert f"pid {stopped.pid} is stopped" in found
    assert not any(str(running.pid) in line for line in found)
    assert found[-1].startswith("py-spy is not installed")
    assert not (tmp_path / "stacks.txt").exists()


def test_py_spy_is_found_beside_the_interpreter_when_not_on_path(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    if not (Path(sys.executable).parent / "py-spy").exists():
        pytest.fail("py-spy is not beside this interpreter: install the dev extra (scripts/setup.sh does)")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert diagnose.find_py_spy() == str(Path(sys.executable).parent / "py-spy")
