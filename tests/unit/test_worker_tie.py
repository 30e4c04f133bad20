"""A rank ties its life to its torchrun before it imports torch, and stops at once where that torchrun,
or the safe-sft above it, is already gone (safe-sft SIGKILLed in the first second of an attempt left both
ranks waiting in their rendezvous for the 7200 s --ddp_timeout, and joining the next run's store)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parents[2] / "launcher"
RANK = (
    "import sys, time; time.sleep({delay}); sys.path.insert(0, {launcher!r}); "
    "from worker_tie import tie_to_torchrun; tie_to_torchrun(); open({marker!r}, 'w').write('tied')"
)


def _rank(tmp: Path, delay: float = 0.0) -> tuple[str, Path]:
    marker = tmp / "tied"
    return RANK.format(delay=delay, launcher=str(LAUNCHER), marker=str(marker)), marker


def test_a_rank_under_this_runs_torchrun_goes_on(tmp_path: Path) -> None:
    code, marker = _rank(tmp_path)
    env = {**os.environ, "SAFE_SFT_PID": str(os.getpid())}  # this test stands for safe-sft, sh for torchrun
    done = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{code}"'], env=env, timeout=60)
    assert done.returncode == 0 and marker.read_text() == "tied"


def test_a_rank_under_another_safe_sfts_torchrun_stops(tmp_path: Path) -> None:
    code, marker = _rank(tmp_path)
    env = {**os.environ, "SAFE_SFT_PID": str(os.getppid())}  # not the safe-sft above its torchrun
    done = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{code}"'], env=env, timeout=60)
    assert done.returncode == 1 and not marker.exists()


def test_a_rank_whose_torchrun_died_before_it_tied_itself_stops(tmp_path: Path) -> None:
    """The torchrun stand-in exits at once; the rank, re-parented, reaches its tie half a second later."""
    code, marker = _rank(tmp_path, delay=0.5)
    env = {**os.environ, "SAFE_SFT_PID": str(os.getpid())}
    subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{code}" &'], env=env, timeout=60)
    time.sleep(3)
    assert not marker.exists()
