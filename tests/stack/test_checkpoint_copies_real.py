"""Checkpoints as real swift, transformers and DeepSpeed write them, and copies of them that lost a file.

launcher/run/checkpoints.py judges a checkpoint complete from its files alone. Its rules for what a copy
(an object-store sync, `gsutil -m`, a cleanup script) can lose without any kill are held here to real
checkpoints of 2 ranks: plain DDP (optimizer.pt with scheduler.pt), ZeRO-2 (each rank's optimizer shard)
and ZeRO-3 (each rank's optimizer and model-state shards). Every real checkpoint is complete; the same
checkpoint without scheduler.pt, or without one rank's shard, is not, and the newest complete one before it
is the one a resume takes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from launcher.run.checkpoints import latest_complete, unreadable
from tests.stack.test_supervise_real import fault_env, run_dirs, safe_sft, swift_args


@pytest.mark.parametrize(
    ("deepspeed", "lose"),
    [
        pytest.param(None, "scheduler.pt", id="ddp-without-its-scheduler"),
        pytest.param("zero2", "global_step4/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", id="zero2-rank1-shard"),
        pytest.param("zero3", "global_step4/zero_pp_rank_1_mp_rank_00_model_states.pt", id="zero3-rank1-model"),
    ],
)
def test_real_checkpoints_are_complete_and_a_copy_that_lost_a_file_is_not(
    tiny: dict[str, object], tmp_path: Path, deepspeed: str | None, lose: str
) -> None:
    out = tmp_path / "out"
    extra = {"deepspeed": deepspeed} if deepspeed else {}
    env = fault_env(tmp_path)
    args = swift_args(tiny, out, max_steps=4, save_steps=2, per_device_train_batch_size=1, **extra)
    done = safe_sft(["--max-attempts", "1", *args], env)
    assert done.returncode == 0, done.stderr[-3000:]
    run = run_dirs(out)[-1]
    for step in (2, 4):
        assert unreadable(run / f"checkpoint-{step}") is None, step
    copy = tmp_path / "copy"
    shutil.copytree(run, copy / run.name)
    lost = copy / run.name / "checkpoint-4" / lose
    if not lost.exists():  # the shard's dtype prefix (bf16_, fp32_) is DeepSpeed's choice
        lost = next(lost.parent.glob(f"*{lost.name.removeprefix('bf16_')}"))
    lost.unlink()
    assert unreadable(lost.parent if lost.parent.name == "checkpoint-4" else lost.parent.parent) is not None
    checkpoint, skipped = latest_complete(copy)
    assert checkpoint is not None and checkpoint.step == 2
    assert list(skipped) == [copy / run.name / "checkpoint-4"]
