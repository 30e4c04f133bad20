#!/usr/bin/env python3
"""Real runs on a GPU: safe-sft's estimate for each attempt beside the per-GPU peak NVML measured.

    python scripts/bench_gpu_peaks.py [--work DIR] [--jsonl FILE] [--table FILE ...] [CASE ...]

Each case trains a model of Qwen2.5-0.5B's real shape (made locally with random weights by
make_tiny_model.py) for a few steps through safe-sft and real `swift sft` on the visible GPUs, every
sample cut to --max_length, and reads report.json: the estimate safe-sft recorded for the attempt's own
settings, the peak its NVML monitor measured, and measured / estimate; beside them torch's own allocated and
reserved peaks (scripts/peak_memory_plugin.py), which split the peak into the tensors' bytes and what the
caching allocator kept beside them. The `-expandable` cases run with PYTORCH_CUDA_ALLOC_CONF
expandable_segments:True. Prints one markdown table row per
case (BENCHMARKS.md) and appends each case's record to --jsonl. `--table FILE` prints the table of records
written earlier (tests/gpu writes them to $OUT) without running anything. Needs a CUDA GPU, ms-swift and
DeepSpeed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30
MAX_LENGTH = 2048
COMMON = (
    "--model_type", "qwen2", "--template", "qwen", "--check_model", "false", "--report_to", "none",
    "--max_length", str(MAX_LENGTH), "--truncation_strategy", "right",
    "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
    "--max_steps", "6", "--save_strategy", "no", "--logging_steps", "1", "--dataloader_num_workers", "0",
)  # fmt: skip
PLUGIN = ("--external_plugins", str(ROOT / "scripts" / "peak_memory_plugin.py"), "--callbacks", "safe_sft_peaks")
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
# case name -> the arguments that make it (the strategy and the tuner) and the environment it adds
CASES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "zero2-full": (("--tuner_type", "full", "--deepspeed", "zero2"), {}),
    "zero3-full": (("--tuner_type", "full", "--deepspeed", "zero3"), {}),
    "zero2-lora": (("--tuner_type", "lora", "--deepspeed", "zero2"), {}),
    "zero2-full-expandable": (("--tuner_type", "full", "--deepspeed", "zero2"), EXPANDABLE),
    "zero3-full-expandable": (("--tuner_type", "full", "--deepspeed", "zero3"), EXPANDABLE),
}


def make_model(work: Path) -> Path:
    """The 0.5B model and its dataset under `work` (made once; kept for the other cases)."""
    made = work / "model05"
    if not (made / "model" / "model.safetensors").exists():
        maker = [sys.executable, str(ROOT / "scripts" / "make_tiny_model.py"), str(made)]
        shape = ["--shape", "qwen2.5-0.5b", "--rows", "32", "--answer-words", str(MAX_LENGTH + 512)]
        subprocess.run([*maker, *shape], check=True, stdout=subprocess.DEVNULL)
    return made


def run_case(name: str, work: Path, timeout: float = 600) -> dict[str, object]:
    """Train one case through safe-sft; its attempt's estimate and measured peak from report.json."""
    made = make_model(work)
    out = work / f"out-{name}"
    case_args, case_env = CASES[name]
    argv = [
        sys.executable, "-m", "launcher", "--model", str(made / "model"), "--dataset", str(made / "data.jsonl"),
        *COMMON, *case_args, *PLUGIN, "--output_dir", str(out),
    ]  # fmt: skip
    peaks = work / f"peaks-{name}.jsonl"
    peaks.unlink(missing_ok=True)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, **case_env, "PYTHONPATH": path, "SAFE_SFT_PEAKS_FILE": str(peaks)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=work)
    reports = sorted(out.glob("safe-sft/*/report.json"))
    if not reports:
        raise RuntimeError(f"{name}: no report.json (exit {done.returncode}): {done.stderr[-3000:]}")
    report = json.loads(reports[-1].read_text())
    attempt = report["attempts"][-1]
    estimate = attempt.get("estimate") or {}
    steps = [json.loads(line) for line in peaks.read_text().splitlines()] if peaks.exists() else []
    return {
        "case": name,
        "outcome": report["outcome"],
        "exit_code": done.returncode,
        "attempts": len(report["attempts"]),
        "strategy": estimate.get("strategy"),
        "estimate_bytes": estimate.get("gpu_need_bytes"),
        "measured_peak_bytes": estimate.get("measured_peak_bytes"),
        "measured_over_estimate": estimate.get("measured_over_estimate"),
        "torch_allocated_peak_bytes": max((s["allocated"] for s in steps), default=None),
        "torch_reserved_peak_bytes": max((s["reserved"] for s in steps), default=None),
        "torch_steps": steps,
        "env": case_env,
        "parts": estimate.get("parts"),
        "gpus": attempt.get("memory", {}).get("gpus"),
        "tail": done.stdout.splitlines()[-3:] + done.stderr.splitlines()[-5:],
    }


def table_row(record: dict[str, object]) -> str:
    def gib(key: str) -> str:
        value = record.get(key)
        return f"{value / GiB:.2f}" if isinstance(value, int) else "-"

    ratio = record.get("measured_over_estimate")
    return (
        f"| {record['case']} | {record['outcome']} | {record.get('strategy') or '-'} | {gib('estimate_bytes')} "
        f"| {gib('measured_peak_bytes')} | {ratio if ratio is not None else '-'} "
        f"| {gib('torch_allocated_peak_bytes')} | {gib('torch_reserved_peak_bytes')} |"
    )


HEADER = (
    "| case | outcome | estimated as | estimate GiB | NVML peak GiB | measured / estimate "
    "| torch allocated peak GiB | torch reserved peak GiB |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- |"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"of {', '.join(CASES)} (default: all)")
    parser.add_argument("--work", type=Path, default=Path("gpu-peaks"))
    parser.add_argument("--jsonl", type=Path, help="append each case's record here")
    parser.add_argument("--table", type=Path, nargs="+", help="print the table of records written earlier")
    args = parser.parse_args()
    if args.table:
        print(HEADER)
        for path in args.table:
            for line in path.read_text().splitlines():
                print(table_row(json.loads(line)))
        return
    unknown = [name for name in args.cases if name not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}: choose from {', '.join(CASES)}")
    args.work.mkdir(parents=True, exist_ok=True)
    print(HEADER, flush=True)
    for name in args.cases or list(CASES):
        record = run_case(name, args.work.resolve())
        print(table_row(record), flush=True)
        if args.jsonl:
            with args.jsonl.open("a") as handle:
                handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
