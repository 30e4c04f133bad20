"""Checkpoint on notice, the supervisor's side: the files it shares with the ranks' callback
(launcher/worker_notice.py), the mark a preempted Slurm job leaves for its requeued self, and the
`scontrol` calls. The decisions are pure, in launcher/plan/notice.py.

In the attempt folder: safe-sft writes `notice`; the ranks write `stopping.json` ({"step": N}, the step
they agreed to stop at) and `timing.json` (the last save's and step's durations). Under the output dir:
`safe-sft/notice-<job id>.json`, the checkpoint a requeued job resumes from.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from launcher.plan.notice import NoticeMark

NOTICE_DIR_ENV = "SAFE_SFT_NOTICE_DIR"  # the same name as in launcher/worker_notice.py
SCONTROL_TIMEOUT_S = 30


def give_notice(attempt_dir: Path, signal_name: str) -> None:
    (attempt_dir / "notice").write_text(signal_name + "\n")


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stopping_step(attempt_dir: Path) -> int | None:
    """The step the ranks agreed to stop and save at, if they did."""
    data = _read_json(attempt_dir / "stopping.json")
    step = data.get("step") if data else None
    return step if isinstance(step, int) else None


def last_timing(run_dir: Path) -> tuple[float | None, float | None]:
    """(the last save's seconds, the last plain step's seconds) measured by any attempt of this run."""
    timings = sorted(run_dir.glob("attempt-*/timing.json"), key=lambda p: p.stat().st_mtime_ns)
    data = _read_json(timings[-1]) if timings else None
    if not data:
        return None, None
    save, step = data.get("save_s"), data.get("step_s")
    return (
        float(save) if isinstance(save, (int, float)) else None,
        float(step) if isinstance(step, (int, float)) else None,
    )


def max_steps_of(checkpoint: Path) -> int | None:
    data = _read_json(checkpoint / "trainer_state.json")
    value = data.get("max_steps") if data else None
    return value if isinstance(value, int) else None


def mark_path(output_dir: Path, job_id: str) -> Path:
    safe = "".join(c for c in job_id if c.isalnum() or c in "._-")
    return output_dir / "safe-sft" / f"notice-{safe}.json"


def read_mark(output_dir: Path, job_id: str) -> NoticeMark | None:
    data = _read_json(mark_path(output_dir, job_id))
    return NoticeMark.from_json(data) if data else None


def write_mark(output_dir: Path, mark: NoticeMark) -> Path:
    path = mark_path(output_dir, mark.job_id)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(mark.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def show_job(job_id: str, timeout_s: float = SCONTROL_TIMEOUT_S) -> str:
    """`scontrol show job -o ID`, or "" where scontrol is missing or fails."""
    try:
        done = subprocess.run(
            ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def requeue(job_id: str) -> str | None:
    """`scontrol requeue ID`: None when done, else why not. Slurm then ends this job's processes."""
    try:
        done = subprocess.run(
            ["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        return str(err)
    return None if done.returncode == 0 else (done.stderr.strip() or f"scontrol exited {done.returncode}")
