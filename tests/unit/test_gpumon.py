"""Memory sampling against a fake NVML: peaks, the compact timeline, and the imbalance warning."""

import os
from types import SimpleNamespace

from launcher.run.gpumon import MAX_POINTS, MemoryMonitor, MemoryTimeline

GiB = 2**30


class FakeNvml:
    """Two 80 GiB GPUs whose used memory follows a script, one value per query; `processes` are what
    nvmlDeviceGetComputeRunningProcesses lists per GPU (pid, usedGpuMemory), None where it is unsupported."""

    def __init__(
        self, used: dict[int, list[int]], processes: dict[int, list[tuple[int, int | None]]] | None = None
    ) -> None:
        self.used = {i: list(v) for i, v in used.items()}
        self.processes = processes

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        if self.processes is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes.get(handle, [])]

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        values = self.used[handle]
        used = values.pop(0) if len(values) > 1 else values[0]
        return SimpleNamespace(total=80 * GiB, used=used)


def test_monitor_records_peaks_and_timeline_from_nvml() -> None:
    nvml = FakeNvml({0: [0, 10 * GiB, 70 * GiB, 30 * GiB], 1: [0, 5 * GiB, 9 * GiB, 8 * GiB]})
    monitor = MemoryMonitor(os.getpid(), (0, 1), interval=1.0, nvml=nvml)  # type: ignore[arg-type]
    for t in range(3):
        monitor.sample(float(t))
    timeline = monitor.timeline
    assert timeline.gpu_peak == {0: 70 * GiB, 1: 9 * GiB}
    assert timeline.gpu_used == {0: [10 * GiB, 70 * GiB, 30 * GiB], 1: [5 * GiB, 9 * GiB, 8 * GiB]}
    assert timeline.gpu_totals == {0: 80 * GiB, 1: 80 * GiB}
    assert timeline.host_peak > 0  # this test process's own RSS
    data = timeline.to_json()
    assert data["gpus"][0] == {"index": 0, "peak_bytes": 70 * GiB, "total_bytes": 80 * GiB, "peak_scope": "device"}
    assert data["timeline"]["gpu_used_bytes"]["1"] == [5 * GiB, 9 * GiB, 8 * GiB]


def test_timeline_stays_compact_and_keeps_the_exact_peak() -> None:
    timeline = MemoryTimeline((0,), {0: 80 * GiB})
    for t in range(10 * MAX_POINTS):
        timeline.add(float(t), {0: t}, t)
    assert len(timeline.t) < MAX_POINTS
    assert timeline.gpu_peak[0] == 10 * MAX_POINTS - 1
    assert timeline.t == sorted(timeline.t) and timeline.t[0] == 0.0


def test_imbalance_is_named_with_the_fix() -> None:
    uneven = MemoryTimeline((0, 1, 2), {0: 80 * GiB, 1: 80 * GiB, 2: 80 * GiB})
    uneven.add(0.0, {0: 78 * GiB, 1: 10 * GiB, 2: 12 * GiB}, 0)
    message = uneven.imbalance()
    assert message is not None and "GPU 0" in message and "GPU 1" in message and "ZeRO-3" in message
    even = MemoryTimeline((0, 1), {0: 80 * GiB, 1: 80 * GiB})
    even.add(0.0, {0: 78 * GiB, 1: 70 * GiB}, 0)
    assert even.imbalance() is None


def test_a_shared_gpus_peak_is_the_attempts_own_processes() -> None:
    """Another process's 30 GiB on GPU 0 is not the run's: the peak is what the attempt's processes hold."""
    me, other = os.getpid(), 999_999_999
    used = {0: [0, 40 * GiB, 50 * GiB], 1: [0, 12 * GiB, 12 * GiB]}  # the first: the total's query
    nvml = FakeNvml(used, {0: [(me, 10 * GiB), (other, 30 * GiB)], 1: [(other, 12 * GiB)]})
    monitor = MemoryMonitor(me, (0, 1), interval=1.0, nvml=nvml)  # type: ignore[arg-type]
    monitor.sample(0.0)
    nvml.processes = {0: [(me, 20 * GiB), (other, 30 * GiB)], 1: [(other, 12 * GiB)]}
    monitor.sample(1.0)
    timeline = monitor.timeline
    assert timeline.gpu_peak == {0: 20 * GiB, 1: 12 * GiB}  # GPU 1 lists none of ours: the device's figure
    assert timeline.gpu_used[0] == [40 * GiB, 50 * GiB]  # the timeline keeps what the card held
    scopes = [g["peak_scope"] for g in timeline.to_json()["gpus"]]
    assert scopes == ["processes", "device"]


def test_without_per_process_figures_the_peak_is_the_devices() -> None:
    me = os.getpid()
    for processes in (None, {0: [(me, None)]}):
        nvml = FakeNvml({0: [40 * GiB]}, processes)
        monitor = MemoryMonitor(me, (0,), interval=1.0, nvml=nvml)  # type: ignore[arg-type]
        monitor.sample(0.0)
        assert monitor.timeline.gpu_peak == {0: 40 * GiB}
