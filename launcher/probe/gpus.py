"""GPUs through NVML (nvidia-ml-py, imported as pynvml): index, UUID, name, memory, compute processes.

No driver or no library: zero GPUs and a warning. Physical NVML indices are reported; honouring
CUDA_VISIBLE_DEVICES is the topology's job.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from launcher.model import GpuFacts, GpuInfo


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_gpus(nvml_module: ModuleType | None = None) -> GpuFacts:
    nvml: Any = nvml_module
    if nvml is None:
        try:
            import pynvml

            nvml = pynvml
        except ImportError:
            return GpuFacts(warnings=("nvidia-ml-py is not installed: GPUs unknown (pip install nvidia-ml-py)",))
    try:
        nvml.nvmlInit()
    except Exception as err:  # NVMLError and OSError alike: no driver here
        return GpuFacts(warnings=(f"no NVIDIA driver found ({_text(err) or type(err).__name__}): 0 GPUs",))
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                processes = len(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
            except Exception:
                processes = 0
            gpus.append(
                GpuInfo(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    total_bytes=int(memory.total),
                    free_bytes=int(memory.free),
                    used_bytes=int(memory.used),
                    compute_processes=processes,
                )
            )
        return GpuFacts(gpus=tuple(gpus), driver_version=driver)
    except Exception as err:
        return GpuFacts(warnings=(f"NVML failed while listing GPUs ({_text(err)}): GPUs unknown",))
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
