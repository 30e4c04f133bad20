"""Item: safe-sft runs another number of processes than plain `swift sft` would, and keeps its global batch.

On the CPU, `safe-sft --nproc 2` without NPROC_PER_NODE runs two processes where `swift sft` alone runs
one. The evidence is swift's own: args.json (global_world_size, per-device batch, accumulation),
logging.jsonl (the epoch after each step advances by global batch / dataset size) and the samples each
optimizer step consumed over all ranks (recorded by tests/stack/plugins/faults.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.stack.test_supervise_real import args_json, run_dirs, safe_sft, swift_args, trained_samples


def epochs(run_dir: Path) -> dict[str, str]:
    lines = [json.loads(line) for line in (run_dir / "logging.jsonl").read_text().splitlines()]
    return {entry["global_step/max_steps"]: entry["epoch"] for entry in lines if "loss" in entry}


def test_nproc_2_keeps_the_global_batch_of_swift_alone(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if k not in ("NPROC_PER_NODE", "NNODES")}
    env |= {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    common = {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 4, "max_steps": 3, "save_steps": 100}

    plain_out = tmp_path / "plain"
    plain_env = env | {"SAFE_SFT_FAULT_RECORD": str(tmp_path / "plain-records")}
    swift = str(Path(sys.executable).parent / "swift")
    done = subprocess.run([swift, "sft", *swift_args(tiny, plain_out, **common)], env=plain_env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    out = tmp_path / "out"
    result = safe_sft(
        ["--nproc", "2", *swift_args(tiny, out, **common)], env | {"SAFE_SFT_FAULT_RECORD": str(tmp_path / "records")}
    )
    assert result.returncode == 0, result.stderr[-3000:]

    plain, ours = args_json(run_dirs(plain_out)[-1]), args_json(run_dirs(out)[-1])
    assert (plain["global_world_size"], plain["per_device_train_batch_size"], plain["gradient_accumulation_steps"]) == (
        1,
        1,
        4,
    )
    assert (ours["global_world_size"], ours["per_device_train_batch_size"], ours["gradient_accumulation_steps"]) == (
        2,
        1,
        2,
    )
    assert epochs(run_dirs(out)[-1]) == epochs(run_dirs(plain_out)[-1])  # swift's own count of samples seen
    per_step = {step: len(keys) for step, keys in trained_samples(tmp_path / "records").items()}
    assert per_step == {1: 4, 2: 4, 3: 4}
    assert per_step == {step: len(keys) for step, keys in trained_samples(tmp_path / "plain-records").items()}
    said = "global batch 4 = per_device_train_batch_size 1 x gradient_accumulation_steps 2 x 2 process(es)"
    plan_part, summary_part = result.stderr.split("safe-sft: succeeded")
    assert said in plan_part and said in summary_part
