#!/usr/bin/env python3
"""Benchmark: what memory sampling costs a run, measured two ways side by side.

1. The cost of one sample (one NVML query per GPU where there are GPUs, one walk of the training
   process tree) on a live two-rank tiny training run, against the default interval: the fraction of
   one core the sampler takes.
2. A real tiny run through safe-sft with sampling every 0.1 s (50x the default rate) against sampling off.
Target: sampling costs at most 1% of training wall time.

    python scripts/bench_sampling.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.probe.gpus import probe_gpus  # noqa: E402
from launcher.run.gpumon import MemoryMonitor  # noqa: E402

DEFAULT_INTERVAL = 5.0


def tiny_args(tmp: Path) -> list[str]:
    made = subprocess.run([sys.executable, str(REPO / "scripts" / "make_tiny_model.py"), str(tmp / "tiny")],
                          capture_output=True, text=True, check=True)  # fmt: skip
    tiny = json.loads(made.stdout.strip().splitlines()[-1])
    return ["--model", tiny["model"], "--model_type", "qwen2", "--template", "qwen", "--check_model", "false",
            "--use_cpu", "true", "--fp16", "false", "--report_to", "none", "--dataset", tiny["dataset"],
            "--tuner_type", "full", "--save_steps", "1000", "--dataloader_num_workers", "0"]  # fmt: skip


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    args = tiny_args(tmp)
    env = {**os.environ, "NPROC_PER_NODE": "2"}
    cmd = [sys.executable, "-m", "launcher", "--memory-sample-interval"]

    # 1: sample a live run's process tree many times
    live = subprocess.Popen([*cmd, "0", *args, "--max_steps", "60", "--output_dir", str(tmp / "live")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(15)  # the workers are up and training
    gpus = tuple(g.index for g in probe_gpus().gpus)
    monitor = MemoryMonitor(live.pid, gpus, DEFAULT_INTERVAL)
    samples = 200
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for n in range(samples):
        monitor.sample(float(n))
    cpu, wall = (time.process_time() - cpu0) / samples, (time.perf_counter() - wall0) / samples
    live.wait()
    print(f"one sample ({len(gpus)} GPUs via NVML, process tree of {live.pid}): {wall * 1e3:.2f} ms wall, "
          f"{cpu * 1e3:.2f} ms CPU")  # fmt: skip
    print(f"  at the default interval of {DEFAULT_INTERVAL:.0f} s: {cpu / DEFAULT_INTERVAL * 100:.4f}% of one core")

    # 2: end to end, sampling 50x faster than the default, against sampling off (alternating)
    timings: dict[str, list[float]] = {"off": [], "0.1 s": []}
    for run in range(3):
        for label, interval in (("off", "0"), ("0.1 s", "0.1")):
            start = time.perf_counter()
            subprocess.run([*cmd, interval, *args, "--max_steps", "40", "--output_dir", str(tmp / f"{run}-{interval}")],
                           env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            timings[label].append(time.perf_counter() - start)
    off, on = statistics.median(timings["off"]), statistics.median(timings["0.1 s"])
    print("a 40-step tiny run, NPROC_PER_NODE=2 on the CPU, median of 3 (alternating)")
    print(f"  sampling off:         {off:6.2f} s   {[round(t, 2) for t in timings['off']]}")
    print(f"  sampling every 0.1 s: {on:6.2f} s   {[round(t, 2) for t in timings['0.1 s']]}")
    print(f"  ratio: {on / off:.3f}x   (target: sampling at the default rate costs <= 1%)")


if __name__ == "__main__":
    main()
