"""Sample each selected GPU's used memory through NVML, and the training tree's host RAM, per attempt.

A daemon thread wakes every `interval` seconds, so training is not slowed: two NVML queries per GPU and
one walk of the process tree per sample. Peaks are exact; the timeline is kept compact by dropping every
other point whenever it reaches MAX_POINTS (the spacing doubles, the shape stays).

A GPU's peak is the attempt's own where NVML lists the attempt's processes on it (the sum of their
`usedGpuMemory`): another process on a shared GPU (a notebook, a second job) would otherwise count as the
run's, and the report's measured / estimate, which corrects the next attempt's estimate, with it. Where NVML
lists none of them (another PID namespace, no per-process figures), the peak is the whole GPU's used memory,
as before. The timeline keeps the whole GPU's, what the card held; each GPU's `peak_scope` says which.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import psutil

from launcher.units import fmt_bytes

MAX_POINTS = 240
IMBALANCE_FULL = 0.90  # a GPU this full ...
IMBALANCE_LOW = 0.50  # ... while another peaks under this fraction of it


@dataclass
class MemoryTimeline:
    gpu_indices: tuple[int, ...]
    gpu_totals: dict[int, int] = field(default_factory=dict)
    t: list[float] = field(default_factory=list)
    gpu_used: dict[int, list[int]] = field(default_factory=dict)
    host_used: list[int] = field(default_factory=list)
    gpu_peak: dict[int, int] = field(default_factory=dict)  # the attempt's own where seen, else the device's
    device_peak: dict[int, int] = field(default_factory=dict)
    own_peak: dict[int, int] = field(default_factory=dict)  # only GPUs where NVML listed the attempt's processes
    host_peak: int = 0
    stride: int = 1
    samples: int = 0

    def add(self, t: float, gpu_used: dict[int, int], host_used: int, gpu_own: dict[int, int] | None = None) -> None:
        """`gpu_used`: each GPU's used memory; `gpu_own`: what the attempt's own processes hold, where NVML lists
        them."""
        for index, used in gpu_used.items():
            self.device_peak[index] = max(self.device_peak.get(index, 0), used)
        for index, own in (gpu_own or {}).items():
            self.own_peak[index] = max(self.own_peak.get(index, 0), own)
        for index in self.device_peak.keys() | self.own_peak.keys():
            self.gpu_peak[index] = self.own_peak.get(index, self.device_peak.get(index, 0))
        self.host_peak = max(self.host_peak, host_used)
        self.samples += 1
        if (self.samples - 1) % self.stride:
            return
        self.t.append(round(t, 2))
        self.host_used.append(host_used)
        for index in self.gpu_indices:
            self.gpu_used.setdefault(index, []).append(gpu_used.get(index, 0))
        if len(self.t) >= MAX_POINTS:
            self.t = self.t[::2]
            self.host_used = self.host_used[::2]
            self.gpu_used = {i: values[::2] for i, values in self.gpu_used.items()}
            self.stride *= 2

    def imbalance(self) -> str | None:
        """One GPU near full while the least used peaks under half of it: what users see in seeds 001/002."""
        if len(self.gpu_peak) < 2:
            return None
        top = max(self.gpu_peak, key=lambda i: self.gpu_peak[i])
        low = min(self.gpu_peak, key=lambda i: self.gpu_peak[i])
        total = self.gpu_totals.get(top) or 0
        if (
            total
            and self.gpu_peak[top] >= IMBALANCE_FULL * total
            and self.gpu_peak[low] < IMBALANCE_LOW * self.gpu_peak[top]
        ):
            return (
                f"GPU memory is uneven: GPU {top} peaked at {fmt_bytes(self.gpu_peak[top])} of "
                f"{fmt_bytes(total)} while GPU {low} peaked at {fmt_bytes(self.gpu_peak[low])}. "
                "DeepSpeed ZeRO-3 (one process per GPU) spreads memory evenly where it fits; a device_map run "
                "(one process over the GPUs) gets a --max_memory that evens its GPUs, rebalanced after an OOM; "
                "and check MAX_PIXELS and max_length for long or large samples"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": [
                {
                    "index": i,
                    "peak_bytes": self.gpu_peak.get(i, 0),
                    "total_bytes": self.gpu_totals.get(i),
                    "peak_scope": "processes" if i in self.own_peak else "device",
                }
                for i in self.gpu_indices
            ],
            "host_peak_bytes": self.host_peak,
            "timeline": {
                "t": self.t,
                "gpu_used_bytes": {str(i): v for i, v in self.gpu_used.items()},
                "host_used_bytes": self.host_used,
            },
            "imbalance": self.imbalance(),
        }


class MemoryMonitor(threading.Thread):
    def __init__(
        self, root_pid: int, gpu_indices: tuple[int, ...], interval: float, nvml: ModuleType | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.interval = interval
        self.timeline = MemoryTimeline(gpu_indices)
        self.stopping = threading.Event()
        self.handles: dict[int, Any] = {}
        self.nvml: Any = nvml
        if gpu_indices:
            self._open_nvml(gpu_indices)

    def _open_nvml(self, indices: tuple[int, ...]) -> None:
        try:
            if self.nvml is None:
                import pynvml

                self.nvml = pynvml
            self.nvml.nvmlInit()
            for index in indices:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                self.handles[index] = handle
                self.timeline.gpu_totals[index] = int(self.nvml.nvmlDeviceGetMemoryInfo(handle).total)
        except Exception:  # no NVML: host RAM only; the report shows zero GPU samples
            self.handles = {}

    def _tree(self) -> tuple[set[int], int]:
        """The attempt's process ids and their resident host memory, in one walk of the tree."""
        pids: set[int] = set()
        total = 0
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.root_pid)
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_info().rss
                    pids.add(proc.pid)
        return pids, total

    def _own_used(self, handle: Any, pids: set[int]) -> int | None:
        """What the attempt's processes hold on one GPU; None where NVML lists none of them or no figures."""
        try:
            figures = [p.usedGpuMemory for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid in pids]
        except Exception:
            return None
        if not figures or any(figure is None for figure in figures):
            return None
        return int(sum(figures))

    def sample(self, t: float) -> None:
        pids, host_used = self._tree()
        used: dict[int, int] = {}
        own: dict[int, int] = {}
        for index, handle in self.handles.items():
            with contextlib.suppress(Exception):
                used[index] = int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)
            mine = self._own_used(handle, pids) if pids else None
            if mine is not None:
                own[index] = mine
        self.timeline.add(t, used, host_used, own)

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopping.is_set():
            self.sample(time.monotonic() - start)
            self.stopping.wait(self.interval)

    def stop(self) -> MemoryTimeline:
        self.stopping.set()
        self.join(timeout=5)
        if self.handles:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
        return self.timeline
