"""`safe-sft torchrun SCRIPT ARGS` on the real stack: a small real HF-Trainer script (tests/stack/scripts/
hf_train.py: HfArgumentParser + TrainingArguments + Trainer) on the tiny model, 2 processes under
torchrun (gloo), on the CPU. An OOM in a step and one while saving are survived with the right rung and
train on exactly the samples plain torchrun trains on; a user error stops at once.

Samples are compared with tests/stack/test_supervise_real.py's machinery (per optimizer step, a key per
sample, over all ranks, a redone step counted once).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.stack.test_supervise_real import report, trained_samples

SCRIPT = Path(__file__).resolve().parent / "scripts" / "hf_train.py"


def script_args(tiny: dict[str, object], out: Path, *extra: str) -> list[str]:
    args = {
        "model_name_or_path": tiny["model"], "data_path": tiny["dataset"], "output_dir": out, "use_cpu": "true",
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "max_steps": 8, "save_steps": 3,
        "logging_steps": 1, "report_to": "none", "dataloader_num_workers": 0, "seed": 42,
    }  # fmt: skip
    return [*(item for key, value in args.items() for item in (f"--{key}", str(value))), *extra]


def env_for(tmp: Path, records: str, fault: str | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "SAFE_SFT_FAULT_ONCE": str(tmp / "fault-fired"),
        "SAFE_SFT_FAULT_RECORD": str(tmp / records),
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("PYTHONUNBUFFERED", None)  # block-buffered stdout, as users get it through safe-sft's pipes
    env.pop("SAFE_SFT_FAULT", None)
    if fault:
        env["SAFE_SFT_FAULT"] = fault
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reference(tiny, tmp: Path) -> dict[int, list[str]]:  # type: ignore[no-untyped-def]
    """What plain torchrun trains on, step by step, with the same arguments and no failure."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            str(SCRIPT), *script_args(tiny, tmp / "reference-out")]  # fmt: skip
    done = subprocess.run(argv, env=env_for(tmp, "reference-records"), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    samples = trained_samples(tmp / "reference-records")
    assert sorted(samples) == list(range(1, 9))
    return samples


def safe_sft_torchrun(tiny, out: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    argv = [sys.executable, "-m", "launcher", "torchrun", "--nproc", "2", "--grace-period", "10", "--",
            str(SCRIPT), *script_args(tiny, out, *extra)]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)


def state_of(checkpoint: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((checkpoint / "trainer_state.json").read_text())  # type: ignore[no-any-return]


def test_an_oom_in_a_step_halves_the_micro_batch_and_resumes_on_the_same_samples(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    result = safe_sft_torchrun(tiny, out, env_for(tmp_path, "ranks", "oom_step:4:1"))
    assert result.returncode == 0, result.stderr[-3000:]
    data = report(out)
    assert (data["backend"], data["outcome"]) == ("torchrun", "succeeded")
    first, second = data["attempts"]
    assert (first["failure"]["kind"], first["failure"]["rank"]) == ("cuda_oom", 1)
    assert (first["last_step"], second["last_step"]) == (4, 8)  # the worker's step log (a Trainer keeps none)
    settings = second["settings"]
    assert (settings["per_device_train_batch_size"], settings["gradient_accumulation_steps"]) == (1, 4)
    assert second["resumed_from"]["checkpoint"] == str(out / "checkpoint-3")
    assert second["resumed_from"]["weights_only"] is False
    # what the script's TrainingArguments were in the resumed attempt (the worker's report from inside)
    resolved = second["swift"]
    assert (resolved["per_device_train_batch_size"], resolved["gradient_accumulation_steps"]) == (1, 4)
    assert resolved["resume_from_checkpoint"] == str(out / "checkpoint-3")
    assert state_of(out / "checkpoint-6")["global_step"] == 6
    assert trained_samples(tmp_path / "ranks") == reference(tiny, tmp_path)


def test_an_oom_while_saving_turns_on_save_only_model_and_never_writes_over_the_half_written_checkpoint(
    tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    result = safe_sft_torchrun(tiny, out, env_for(tmp_path, "ranks", "oom_save:6:0"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = report(out)["attempts"]
    assert first["failure"]["kind"] == "cuda_oom_save"
    assert second["settings"]["save_only_model"] is True
    assert second["resumed_from"]["step"] == 3 and second["resumed_from"]["checkpoint"] == str(out / "checkpoint-3")
    half_written = out / "checkpoint-6"
    assert str(half_written) in second["skipped_incomplete_checkpoints"]
    assert half_written.is_dir() and not (half_written / "trainer_state.json").exists()  # left, not deleted
    # TrainingArguments has no add_version: the attempt that would save over it wrote to a fresh dir
    fresh = Path(second["run_dir"])
    assert fresh.parent == out and fresh.name.startswith("v2-")
    assert "--output_dir" in second["command"] and str(fresh) in second["command"]
    assert state_of(fresh / "checkpoint-6")["global_step"] == 6
    assert not (fresh / "checkpoint-6" / "optimizer.pt").exists()  # save_only_model: no optimizer state
    assert trained_samples(tmp_path / "ranks") == reference(tiny, tmp_path)


def test_a_user_error_stops_after_one_attempt(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    result = safe_sft_torchrun(tiny, out, env_for(tmp_path, "ranks"), "--no_such_option", "1")
    assert result.returncode == 1, result.stderr[-3000:]
    data = report(out)
    assert data["backend"] == "torchrun" and len(data["attempts"]) == 1
    failure = data["attempts"][0]["failure"]
    assert failure["kind"] == "user_error"
    assert any("no_such_option" in line for line in failure["evidence"]), failure["evidence"]
