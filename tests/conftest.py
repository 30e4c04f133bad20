"""Shared test helpers: fake facts for the pure planner."""

from __future__ import annotations

import pytest

from launcher.model import GpuFacts, GpuInfo, HostFacts, HostMemory, Limits, NetworkFacts, Rlimit
from launcher.units import GiB

VERSIONS = {"torch": "2.13.0", "ms-swift": "4.6.0", "deepspeed": "0.19.8", "transformers": "5.19.0", "py-spy": "0.4.3"}


def gpus(count: int, total_gib: float, free_gib: float | None = None) -> tuple[GpuInfo, ...]:
    total = int(total_gib * GiB)
    free = int((free_gib if free_gib is not None else total_gib) * GiB)
    return tuple(
        GpuInfo(
            index=i,
            uuid=f"GPU-{i:04d}",
            name="Fake",
            total_bytes=total,
            free_bytes=free,
            used_bytes=total - free,
        )
        for i in range(count)
    )


def host(
    gpu_list: tuple[GpuInfo, ...] = (),
    ram_gib: float = 64,
    memlock_hard: int | None = None,
    ib: tuple[str, ...] = (),
) -> HostFacts:
    return HostFacts(
        gpus=GpuFacts(gpus=gpu_list, driver_version="550.00" if gpu_list else None),
        memory=HostMemory(available_bytes=int(ram_gib * GiB), total_bytes=int(ram_gib * GiB)),
        limits=Limits(memlock=Rlimit(memlock_hard, memlock_hard), nofile=Rlimit(1024, 4096), shm_bytes=16 * GiB),
        network=NetworkFacts(ib_devices=ib, interfaces=("lo", "eth0")),
        disk_free_bytes=500 * GiB,
        versions=VERSIONS,
        free_port=45678,
    )


@pytest.fixture
def fake_host():  # type: ignore[no-untyped-def]
    return host
