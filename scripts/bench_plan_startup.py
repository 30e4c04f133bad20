#!/usr/bin/env python3
"""Benchmark: wall time of `safe-sft plan --json` against `python -c pass`, and proof that torch is not imported.

    python scripts/bench_plan_startup.py [--runs 21]

Runs both commands alternately, in one process tree, and prints the medians, their ratio, and the
heavy modules (torch, deepspeed, swift, transformers) that `python -X importtime` saw: there must be none.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PLAN = [sys.executable, "-m", "launcher", "plan", "--json", "--assume-gpus", "8x80GiB", "--assume-ram", "1TiB",
        "--model-params", "7.6e9", "--model", "Qwen/Qwen2.5-7B-Instruct", "--tuner_type", "full"]  # fmt: skip
BASELINE = [sys.executable, "-c", "pass"]
HEAVY = ("torch", "deepspeed", "swift", "transformers")


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=21)
    runs = parser.parse_args().runs
    timed(PLAN)  # warm the file cache
    plan_times, base_times = [], []
    for _ in range(runs):
        plan_times.append(timed(PLAN))
        base_times.append(timed(BASELINE))
    plan_ms, base_ms = statistics.median(plan_times) * 1000, statistics.median(base_times) * 1000
    print(f"runs: {runs}")
    print(f"python -c pass:          median {base_ms:7.1f} ms")
    print(f"safe-sft plan --json:    median {plan_ms:7.1f} ms   (target < 300 ms)")
    print(f"ratio plan / bare python: {plan_ms / base_ms:.2f}x; safe-sft's own cost {plan_ms - base_ms:.1f} ms")

    trace = subprocess.run([sys.executable, "-X", "importtime", *PLAN[1:]], capture_output=True, text=True, check=True)
    modules = [line.rsplit("|", 1)[-1].strip() for line in trace.stderr.splitlines() if line.startswith("import time:")]
    heavy = sorted({m for m in modules if m.split(".")[0] in HEAVY})
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
