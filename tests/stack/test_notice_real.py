"""Checkpoint on notice, on the real stack: swift sft + torchrun (2 processes, gloo) on the CPU.

A SIGUSR1 to safe-sft mid-training: both ranks agree on the step in progress, save a checkpoint there and
stop; safe-sft exits EXIT_PREEMPTED and leaves the mark a requeued Slurm job resumes from. The same job
id with SLURM_RESTART_COUNT=1 (what Slurm gives a requeued job) resumes from exactly that step, without
--resume-latest, and trains on the samples plain `swift sft` trains on, step by step.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.plan.notice import EXIT_PREEMPTED
from tests.stack.test_supervise_real import assert_no_sample_lost_or_repeated, fault_env, report, swift_args

NO_REGULAR_SAVE = {"save_steps": 100}  # the checkpoint on notice is the only one


def _logged_steps(out: Path) -> list[int]:
    steps = []
    for log in out.glob("v*/logging.jsonl"):
        for line in log.read_text().splitlines():
            if "global_step/max_steps" in line:
                steps.append(int(json.loads(line)["global_step/max_steps"].split("/")[0]))
    return steps


def _wait_for_step(out: Path, proc: subprocess.Popen[str], step: int) -> int:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        steps = _logged_steps(out)
        if steps and max(steps) >= step:
            return max(steps)
        if proc.poll() is not None:
            pytest.fail(f"safe-sft ended before step {step}: {proc.communicate()[1][-3000:]}")
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"step {step} never came")


def test_sigusr1_saves_the_step_in_progress_and_the_requeued_job_resumes_there(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    job = {"SLURM_JOB_ID": str(random.randint(900000, 999999))}
    env = fault_env(tmp_path) | job | {"SAFE_SFT_STEP_SLEEP": "1.5"}
    args = swift_args(tiny, out, **NO_REGULAR_SAVE)
    launcher = [sys.executable, "-m", "launcher", "--grace-period", "10", "--no-requeue"]
    proc = subprocess.Popen([*launcher, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = _wait_for_step(out, proc, 2)
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, stderr[-3000:]
    assert "go on: rerun" not in stderr  # a Slurm job's requeue says it (here: --no-requeue, and how to go on)

    first = report(out)
    assert first["outcome"] == "preempted" and first["exit_code"] == EXIT_PREEMPTED
    [attempt] = first["attempts"]
    step = attempt["preempted"]["step"]
    assert step == seen + 1  # the step that was in progress when the notice came, not a later one
    checkpoint = Path(attempt["preempted"]["checkpoint"])
    assert checkpoint.name == f"checkpoint-{step}" and (checkpoint / "trainer_state.json").is_file()
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
    assert sorted(p.name for p in out.glob("v*/checkpoint-*")) == [f"checkpoint-{step}"]
    assert max(_logged_steps(out)) == step
    mark = json.loads((out / "safe-sft" / f"notice-{job['SLURM_JOB_ID']}.json").read_text())
    assert mark == {
        "job_id": job["SLURM_JOB_ID"], "restart_count": 0, "checkpoint": str(checkpoint), "step": step, "cluster": None
    }  # fmt: skip

    before = set((out / "safe-sft").glob("*/report.json"))
    requeued = env | {"SLURM_RESTART_COUNT": "1", "SAFE_SFT_STEP_SLEEP": "0"}
    second = subprocess.run([*launcher, *args], env=requeued, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    [resumed] = set((out / "safe-sft").glob("*/report.json")) - before
    data = json.loads(resumed.read_text())
    assert data["outcome"] == "succeeded"
    assert data["attempts"][0]["resumed_from"]["step"] == step
    assert data["attempts"][0]["resumed_from"]["checkpoint"] == str(checkpoint)
    assert data["attempts"][0]["resumed_from"]["weights_only"] is False
    assert_no_sample_lost_or_repeated(tiny, tmp_path, fault_env(tmp_path), **NO_REGULAR_SAVE)


def test_a_sigterm_after_a_measured_save_that_fits_the_grace_period_checkpoints(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--grace-period 10: the save at step 2 and a ~1.6 s step need 1.5 x (save + step) + 5 s < 10 s."""
    out = tmp_path / "out"
    env = fault_env(tmp_path) | {"SAFE_SFT_STEP_SLEEP": "1.5"}
    args = swift_args(tiny, out, save_steps=2)
    launcher = [sys.executable, "-m", "launcher", "--grace-period", "10"]
    proc = subprocess.Popen([*launcher, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = _wait_for_step(out, proc, 3)
    timing = json.loads(next(out.glob("safe-sft/*/attempt-1/timing.json")).read_text())
    assert timing["step"] == 2 and 0 < timing["save_s"] < 2
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, stderr[-3000:]
    assert "notice (SIGTERM)" in stderr
    saved = report(out)["attempts"][0]["preempted"]
    assert saved["step"] == seen + 1 and Path(saved["checkpoint"]).name == f"checkpoint-{seen + 1}"
    # outside Slurm nothing requeues it: the user is told how to go on (hostile46slurm F7)
    assert f"go on: rerun with --resume-latest; it resumes from step {seen + 1}" in stderr
