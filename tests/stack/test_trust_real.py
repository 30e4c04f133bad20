"""Trust under faults, on the real stack: one run per output dir, a killed run's report, a full disk.

Real safe-sft processes training the tiny model (swift sft + torchrun, 2 processes, gloo, on the CPU),
real signals, and a real tmpfs of a few hundred KiB as the output dir's disk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.stack.test_supervise_real import _alive, fault_env, safe_sft, swift_args


def _start(tiny, out: Path, tmp: Path) -> tuple[subprocess.Popen[str], list[int]]:  # type: ignore[no-untyped-def]
    """A long safe-sft run, returned once its ranks train (their pids recorded by the fault plugin)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "--grace-period", "10",
         *swift_args(tiny, out, max_steps=100000, save_steps=100000)],
        env=fault_env(tmp), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ranks = list((tmp / "ranks").glob("rank-*.json"))
        logs = list(out.glob("v*/logging.jsonl"))
        if len(ranks) == 2 and logs and logs[0].stat().st_size > 0:
            return proc, [json.loads(r.read_text())["pid"] for r in ranks]
        time.sleep(0.5)
    proc.kill()
    pytest.fail("training never started")


def test_a_second_run_in_the_same_output_dir_is_refused_and_a_killed_runs_report_and_lock(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    # an earlier run's report in the same output dir: `safe-sft report` must never show it for this run
    earlier = out / "safe-sft" / "20200101-000000-000000"
    earlier.mkdir(parents=True)
    (earlier / "report.json").write_text(json.dumps({"schema": 1, "outcome": "succeeded", "attempts": []}))
    os.utime(earlier / "report.json", (1577836800, 1577836800))

    first, ranks = _start(tiny, out, tmp_path)
    try:
        started = time.monotonic()
        second = safe_sft(swift_args(tiny, out, max_steps=2), fault_env(tmp_path / "second"), timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        assert time.monotonic() - started < 60
        error = next(line for line in second.stderr.splitlines() if line.startswith("safe-sft: error:"))
        assert str(out) in error and f"pid {first.pid} on " in error and "started 20" in error
        assert "Traceback" not in second.stderr
        assert not (tmp_path / "second" / "ranks").exists()  # it trained nothing
        assert first.poll() is None  # the first run goes on

        # SIGKILL safe-sft mid-run: its report shows this run, running, never the earlier run's outcome
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    deadline = time.monotonic() + 15
    while _alive(ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    shown = subprocess.run(
        [sys.executable, "-m", "launcher", "report", str(out)], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    headline = shown.stdout.splitlines()[0]
    assert "20200101" not in headline and ": running after" in headline, shown.stdout
    assert f"pid {first.pid}" in shown.stdout and "is gone" in shown.stdout
    as_json = json.loads(
        subprocess.run(
            [sys.executable, "-m", "launcher", "report", "--json", str(out)], capture_output=True, text=True
        ).stdout
    )
    assert (as_json["outcome"], as_json["process"]["pid"]) == ("running", first.pid)

    # the killed run's lock is stale: the next run takes it over with a warning, and trains
    third = safe_sft(swift_args(tiny, out, max_steps=2), fault_env(tmp_path / "third"))
    assert third.returncode == 0, third.stderr[-3000:]
    warning = next(line for line in third.stderr.splitlines() if "took over the lock" in line)
    assert f"pid {first.pid}" in warning and str(out) in warning
    reports = sorted((out / "safe-sft").glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    assert json.loads(reports[-1].read_text())["outcome"] == "succeeded"
    assert json.loads((out / "safe-sft" / "lock").read_text() or "null") is None  # released: no record left


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real tmpfs of 1200 KiB: room for swift's first files, not for a checkpoint of the tiny model."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.fail(f"CANNOT RUN: mounting a tmpfs needs root: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_ends_with_disk_full_a_summary_and_no_traceback_of_safe_sft(tiny, small_disk: Path) -> None:  # type: ignore[no-untyped-def]
    out = small_disk / "out"
    result = safe_sft(swift_args(tiny, out), fault_env(small_disk.parent))
    assert result.returncode == 1, result.stderr[-3000:]
    summary = result.stderr[result.stderr.index("safe-sft: failed after 1 attempt(s)") :]
    assert "disk_full" in summary
    gave_up = next(line for line in summary.splitlines() if "gave up:" in line)
    assert f"{out} has " in gave_up and " free" in gave_up  # names the dir and its free space
    assert "launcher/cli.py" not in result.stderr and "launcher/run/" not in result.stderr  # no safe-sft traceback
    [report_path] = (out / "safe-sft").glob("*/report.json")
    data = json.loads(report_path.read_text())  # the report from before the disk filled, or the final one
    if data["outcome"] == "failed":
        assert data["root_cause"]["kind"] == "disk_full"
    else:  # could not be rewritten: a line says why, naming the file and the free space
        assert data["outcome"] == "running"
        assert f"safe-sft: cannot write the report {report_path}: No space left on device" in result.stderr
