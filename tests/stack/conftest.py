"""The real-stack tier: ms-swift, torchrun and DeepSpeed on a tiny local model, on the CPU.

Every test here is marked `stack`. A missing install is a failure, not a skip: run the fast tier with
`pytest -m "not stack"` on a machine without the training stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/stack/" in str(item.fspath):
            item.add_marker(pytest.mark.stack)


@pytest.fixture(scope="session")
def stack_installed() -> None:
    missing = []
    for dist in ("torch", "ms-swift", "deepspeed", "transformers"):
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            missing.append(dist)
    if missing:
        pytest.fail(f"THE REAL STACK IS NOT INSTALLED ({', '.join(missing)}): run `bash scripts/setup.sh` first")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory, stack_installed: None) -> dict[str, object]:
    """The tiny model and dataset made by scripts/make_tiny_model.py (once per session)."""
    out = tmp_path_factory.mktemp("tiny")
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_tiny_model.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    info: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return info
