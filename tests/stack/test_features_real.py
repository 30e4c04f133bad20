"""swift's sequence parallelism through safe-sft, for real: 2 CPU processes (gloo), the tiny model.

ms-swift 4.6 supports `--sequence_parallel_size 2` on the CPU: without flash-attention it patches SDPA
(Ulysses all-to-all over gloo; ring attention would need flash and padding_free, but gcd(2 kv heads, 2) = 2
needs none), and its device mesh splits the 2 processes into 1 data-parallel rank x 2 sequence ranks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_sequence_parallel_2_on_2_cpu_processes_plans_and_trains(tiny: dict[str, object], tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = {
        "model": tiny["model"], "model_type": "qwen2", "template": "qwen", "check_model": "false",
        "use_cpu": "true", "fp16": "false", "report_to": "none", "dataset": tiny["dataset"],
        "tuner_type": "full", "logging_steps": 1, "save_steps": 100, "max_steps": 2,
        "per_device_train_batch_size": 1, "gradient_accumulation_steps": 4, "dataloader_num_workers": 0,
        "sequence_parallel_size": 2, "output_dir": out,
    }  # fmt: skip
    argv = [item for key, value in args.items() for item in (f"--{key}", str(value))]
    env = {**os.environ, "NPROC_PER_NODE": "2", "TOKENIZERS_PARALLELISM": "false"}

    plan = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--json", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert planned["topology"]["nproc_per_node"]["value"] == 2
    assert planned["command"][planned["command"].index("--sequence_parallel_size") + 1] == "2"
    assert any("a step trains on 4 samples (micro-batch 1 x accumulation 4 x 1)" in n for n in planned["notes"])

    result = subprocess.run(
        [sys.executable, "-m", "launcher", *argv], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = sorted(out.glob("v*-*"))
    assert json.loads((run_dir / "args.json").read_text())["sequence_parallel_size"] == 2
    steps = [json.loads(line) for line in (run_dir / "logging.jsonl").read_text().splitlines()]
    first = next(s for s in steps if s.get("global_step/max_steps") == "1/2")
    # One data-parallel rank (2 processes / 2 sequence ranks): a step takes micro-batch 1 x 4 accumulation
    # x 1 = 4 of the dataset's samples. Plain data parallelism over 2 processes would take 8.
    samples = sum(1 for line in Path(str(tiny["dataset"])).read_text().splitlines() if line.strip())
    assert float(first["epoch"]) == round(4 / samples, 4)
