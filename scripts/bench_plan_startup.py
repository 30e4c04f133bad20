#!/usr/bin/env python3
"""Benchmark: wall time of `safe-sft plan --json` against `python -c pass`, and proof that torch is not imported.

    python scripts/bench_plan_startup.py [--runs 21]

Runs the commands alternately, in one process tree, and prints the medians, their ratio, and the
heavy modules (torch, deepspeed, swift, transformers) that `python -X importtime` saw: there must be none.
The plan is timed three ways: without a dataset, with a modest local dataset (3,000 chat rows, about
3 MB, read whole), and with a huge one (about 100 MB, read in bounded windows): the data's sampling must
keep the plan under the target too. And once for a LLaMA-Factory config (`--backend llamafactory`), which
must import neither LLaMA-Factory nor OmegaConf, and once for an HF training script (`--backend torchrun`).
The package is compiled to bytecode first, as an installed one is. (The unit tests check what these plans
import, not how fast they start.)
"""

from __future__ import annotations

import argparse
import compileall
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAN = [sys.executable, "-m", "launcher", "plan", "--json", "--assume-gpus", "8x80GiB", "--assume-ram", "1TiB",
        "--model-params", "7.6e9", "--model", "Qwen/Qwen2.5-7B-Instruct", "--tuner_type", "full"]  # fmt: skip
BASELINE = [sys.executable, "-c", "pass"]
HEAVY = ("torch", "deepspeed", "swift", "transformers", "llamafactory", "omegaconf")
LF_CONFIG = """model_name_or_path: Qwen/Qwen2.5-7B-Instruct
stage: sft
do_train: true
finetuning_type: full
dataset: alpaca_en_demo
template: qwen
cutoff_len: 2048
output_dir: saves/qwen2.5-7b/full/sft
per_device_train_batch_size: 1
gradient_accumulation_steps: 2
"""


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def write_dataset(path: Path, rows: int) -> Path:
    """Chat rows of a few hundred tokens, a third in Chinese, as a real SFT file looks."""
    rng = random.Random(0)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(rows):
            answer = ("这是一个回答。" if i % 3 == 0 else "This is an answer. ") * rng.randint(5, 80)
            turns = [{"role": "user", "content": "Explain the word " * rng.randint(2, 40)}]
            handle.write(json.dumps({"messages": [*turns, {"role": "assistant", "content": answer}]}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=21)
    runs = parser.parse_args().runs
    # An installed package runs from its compiled bytecode; where PYTHONDONTWRITEBYTECODE is set (as on the
    # project's machines) and nothing compiled it, every run would also compile the package from source.
    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "launcher"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        modest = write_dataset(Path(tmp) / "modest.jsonl", 3_000)
        huge = write_dataset(Path(tmp) / "huge.jsonl", 100_000)
        lf_config = Path(tmp) / "qwen_full_sft.yaml"  # its dataset named as LLaMA-Factory's data/ names it
        (Path(tmp) / "dataset_info.json").write_text(json.dumps({"alpaca_en_demo": {"file_name": modest.name}}))
        lf_config.write_text(LF_CONFIG + f"dataset_dir: {tmp}\n")
        lf_plan = [*PLAN[:11], "--backend", "llamafactory", str(lf_config)]
        script = Path(tmp) / "train.py"
        script.write_text("raise SystemExit('never run by plan')\n")
        hf_plan = [*PLAN[:11], "--backend", "torchrun", str(script), "--output_dir", str(Path(tmp) / "out")]
        commands = {
            "safe-sft plan --json": PLAN,
            f"  + modest dataset ({modest.stat().st_size / 1e6:.0f} MB)": [*PLAN, "--dataset", str(modest)],
            f"  + huge dataset ({huge.stat().st_size / 1e6:.0f} MB)": [*PLAN, "--dataset", str(huge)],
            "LLaMA-Factory config": lf_plan,
            "HF script (torchrun)": hf_plan,
        }
        for cmd in commands.values():
            timed(cmd)  # warm the file cache
        times: dict[str, list[float]] = {name: [] for name in commands}
        base_times = []
        for _ in range(runs):
            for name, cmd in commands.items():
                times[name].append(timed(cmd))
            base_times.append(timed(BASELINE))
        lf_trace = subprocess.run([sys.executable, "-X", "importtime", *lf_plan[1:]], capture_output=True, text=True)
    medians = {name: statistics.median(t) * 1000 for name, t in times.items()}
    base_ms = statistics.median(base_times) * 1000
    plan_ms = max(medians.values())
    print(f"runs: {runs}")
    print(f"python -c pass:          median {base_ms:7.1f} ms")
    for name, ms in medians.items():
        print(f"{name + ':':<25}median {ms:7.1f} ms   (target < 300 ms)")
    plain = medians["safe-sft plan --json"]
    print(f"ratio plan / bare python: {plain / base_ms:.2f}x; safe-sft's own cost {plain - base_ms:.1f} ms")

    trace = subprocess.run([sys.executable, "-X", "importtime", *PLAN[1:]], capture_output=True, text=True, check=True)
    modules = [line.rsplit("|", 1)[-1].strip() for line in trace.stderr.splitlines() if line.startswith("import time:")]
    lf_modules = [line.rsplit("|", 1)[-1].strip() for line in lf_trace.stderr.splitlines() if "import time:" in line]
    heavy = sorted({m for m in [*modules, *lf_modules] if m.split(".")[0] in HEAVY})
    top = sorted(
        (line for line in trace.stderr.splitlines()[1:] if line.startswith("import time:")),
        key=lambda line: int(line.split("|")[1]),
        reverse=True,
    )[:8]
    print(f"modules imported: {len(modules)}; heavy modules imported: {heavy or 'none'}")
    print("largest cumulative imports (us):")
    for line in top:
        print("  " + line.removeprefix("import time:").strip())
    sys.exit(1 if heavy or plan_ms >= 300 else 0)


if __name__ == "__main__":
    main()
