"""The GPU tier: real NVML and real CUDA. Marked `gpu`; run it on a machine with an NVIDIA GPU.

On a machine without one these tests fail loudly rather than skip; scripts/test.sh deselects the tier
there and says so.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def cuda():  # type: ignore[no-untyped-def]
    try:
        import torch
    except ImportError:
        pytest.fail("TORCH NOT INSTALLED: the gpu tier needs a CUDA build of torch (pip install torch)")
    if not torch.cuda.is_available():
        pytest.fail("NO CUDA GPU HERE: the gpu tier must run on a GPU machine (deselect it with -m 'not gpu')")
    return torch
