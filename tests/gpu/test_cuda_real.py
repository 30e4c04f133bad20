"""Real NVML and a real CUDA OOM, on an NVIDIA GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.errors import SafeSftError
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.probe.gpus import probe_gpus
from launcher.run.classify import classify_text
from launcher.units import GiB

HOG = """
import sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
print("ready", flush=True)
time.sleep(60)
"""


def test_nvml_probe_agrees_with_cuda(cuda) -> None:  # type: ignore[no-untyped-def]
    facts = probe_gpus()
    assert facts.gpus, facts.warnings
    gpu = facts.gpus[0]
    free, total = cuda.cuda.mem_get_info(0)
    assert abs(gpu.total_bytes - total) <= 0.02 * total
    assert abs(gpu.free_bytes - free) <= 1 * GiB
    assert facts.driver_version


def test_auto_selection_sees_another_process_filling_the_gpu(cuda) -> None:  # type: ignore[no-untyped-def]
    before = probe_gpus().gpus[0]
    fill = before.free_bytes / GiB * 0.7
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(fill)], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout is not None and hog.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        busy = probe_gpus().gpus[0]
        assert before.free_bytes - busy.free_bytes >= fill * GiB * 0.95
        assert busy.compute_processes >= 1
        with pytest.raises(SafeSftError, match="more than half full"):
            resolve_topology(TopologyRequest(gpus="auto"), {}, (busy,), free_port=1)
    finally:
        hog.kill()
        hog.wait()


def test_real_cuda_oom_is_classified(cuda, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code = "import torch; torch.empty(int(4 * 2**40), dtype=torch.uint8, device='cuda')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    out_dir = os.environ.get("OUT")
    if out_dir:  # keep the real text as a golden log
        (Path(out_dir) / "real_cuda_oom.log").write_text(result.stderr)
    found = classify_text(result.stderr.splitlines(), steps_seen=True)
    assert found is not None
    kind, evidence = found
    assert kind.value == "cuda_oom"
    assert "CUDA out of memory" in evidence[0]


def test_plan_on_a_real_gpu(cuda) -> None:  # type: ignore[no-untyped-def]
    plan_args = ["plan", "--json", "--model-params", "7e9", "--model", "m", "--tuner_type", "lora"]
    result = subprocess.run([sys.executable, "-m", "launcher", *plan_args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["topology"]["nproc_per_node"]["value"] == cuda.cuda.device_count()
    assert plan["estimates"]["zero2"]["gpu_free_bytes"] > 10 * GiB
    assert plan["strategy"] == "zero2"
    assert plan["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_monitor_peak_agrees_with_torch(cuda) -> None:  # type: ignore[no-untyped-def]
    """The sampled NVML peak, less the usage before the allocation, against torch's own reserved peak."""
    from launcher.run.gpumon import MemoryMonitor

    cuda.cuda.init()
    cuda.empty(1, device="cuda")  # the CUDA context exists before the baseline is taken
    cuda.cuda.reset_peak_memory_stats()
    monitor = MemoryMonitor(os.getpid(), (0,), interval=0.02)
    monitor.sample(0.0)
    baseline = monitor.timeline.gpu_peak[0]
    monitor.start()
    block = cuda.empty(int(6 * GiB), dtype=cuda.uint8, device="cuda")
    block.fill_(1)
    cuda.cuda.synchronize()
    time.sleep(0.3)
    del block
    timeline = monitor.stop()
    cuda.cuda.empty_cache()  # hand the block back: later tests' runs measure the GPU
    reserved = cuda.cuda.max_memory_reserved()
    assert reserved >= 6 * GiB
    assert abs((timeline.gpu_peak[0] - baseline) - reserved) <= 256 * 2**20  # tolerance: 256 MiB
