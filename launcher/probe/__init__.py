"""Impure probes: each reads one source of facts and returns "unknown" plus a warning when it cannot.

`probe_host` gathers them into HostFacts; every probe takes its source as a parameter (an NVML module,
a /sys root, a path) so tests can point it at a fake.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from launcher.model import HostFacts
from launcher.probe.disk import probe_disk
from launcher.probe.gpus import probe_gpus
from launcher.probe.limits import probe_limits
from launcher.probe.memory import probe_memory
from launcher.probe.network import free_port, probe_network
from launcher.probe.versions import probe_versions


def probe_host(output_dir: Path, nvml: ModuleType | None = None) -> HostFacts:
    gpus = probe_gpus(nvml)
    disk = probe_disk(output_dir)
    return HostFacts(
        gpus=gpus,
        memory=probe_memory(),
        limits=probe_limits(),
        network=probe_network(),
        disk_free_bytes=disk.free_bytes,
        versions=probe_versions(gpus.driver_version),
        free_port=free_port(),
        disk_path=disk.path,
        disk_problem=disk.problem,
        cpu_cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        cpu_count=os.cpu_count(),
    )
