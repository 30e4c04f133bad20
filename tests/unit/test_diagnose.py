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


def test_the_stacks_line_counts_only_the_stacks_py_spy_read(stopped_and_running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """py-spy cannot pause a stopped process to read it: the summary had said "python stacks of 2 processes"
    where the hung rank's was not among them (hostile45report F9). Real py-spy on real processes."""
    if diagnose.find_py_spy() is None:
        pytest.fail("py-spy is not installed: install the dev extra (scripts/setup.sh does)")
    _, stopped = stopped_and_running
    last = diagnose.collect_stacks(stopped_and_running, tmp_path)[-1]
    assert last.startswith(f"python stacks of 1 of 2 processes (pid {stopped.pid}: its stack could not be read)")


def test_a_stopped_rank_is_named_by_its_rank(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """torchrun gives each rank its RANK: the finding names the rank, not only a pid (hostile42sig F7)."""
    import os

    monkeypatch.setattr(diagnose, "find_py_spy", lambda: None)
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, "RANK": "1"})
    try:
        rank.send_signal(signal.SIGSTOP)
        for _ in range(100):
            if psutil.Process(rank.pid).status() == psutil.STATUS_STOPPED:
                break
            time.sleep(0.01)
        found = diagnose.collect_stacks([psutil.Process(rank.pid)], tmp_path)
        assert found[0] == f"rank 1 (pid {rank.pid}) is stopped"
    finally:
        rank.kill()
        rank.wait()


def test_py_spy_is_found_beside_the_interpreter_when_not_on_path(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    if not (Path(sys.executable).parent / "py-spy").exists():
        pytest.fail("py-spy is not beside this interpreter: install the dev extra (scripts/setup.sh does)")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert diagnose.find_py_spy() == str(Path(sys.executable).parent / "py-spy")


# two ranks' stacks as py-spy dumped them when --auto_find_batch_size hid an OOM (the hostile test's run)
STACKS = """=== pid 101 (sleeping) ===
Thread 101 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2806)
    _inner_training_loop (transformers/trainer.py:2550)
=== pid 102 (running) ===
Thread 102 (active): "MainThread"
    _inner_training_loop (transformers/trainer.py:2480)
    decorator (accelerate/utils/memory.py:174)
    find_executable_batch_size.<locals>.decorator (accelerate/utils/memory.py:160)
"""


def test_a_hang_whose_stacks_show_accelerates_oom_retry_is_that_oom(tmp_path: Path) -> None:
    """accelerate caught the OOM on one rank and retried alone; the others waited. The ladder must halve the
    micro-batch on every rank, not treat it as a communication hang."""
    from launcher.model import FailureKind
    from launcher.run.classify import AttemptEvidence, classify

    assert diagnose.oom_retry_in_stacks(tmp_path) is None  # no stacks collected
    (tmp_path / "stacks.txt").write_text(STACKS.replace("find_executable_batch_size.<locals>.", ""))
    assert diagnose.oom_retry_in_stacks(tmp_path) is None
    (tmp_path / "stacks.txt").write_text(STACKS)
    cause = diagnose.oom_retry_in_stacks(tmp_path)
    assert cause is not None and "find_executable_batch_size" in cause
    found = classify(AttemptEvidence(exit_code=-15, hang="no progress for 30 s", hang_cause=cause))
    assert (
        found is not None and found.kind is FailureKind.CUDA_OOM and found.evidence == (cause, "no progress for 30 s")
    )
    plain = classify(AttemptEvidence(exit_code=-15, hang="no progress for 30 s"))
    assert plain is not None and plain.kind is FailureKind.HANG
