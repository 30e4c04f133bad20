"""The real-stack tier: ms-swift, torchrun and DeepSpeed on a tiny local model, on the CPU.

Every test here is marked `stack`. A missing install is a failure, not a skip: run the fast tier with
`pytest -m "not stack"` on a machine without the training stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/stack/" in str(item.fspath):
            item.add_marker(pytest.mark.stack)


@pytest.fixture(scope="session", autouse=True)
def torch_extensions_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A TORCH_EXTENSIONS_DIR of this session's own for every process the tier starts.

    DeepSpeed builds its C++ ops (shm_comm, cpu_adam) at first use behind a lock file that torch waits on
    forever: a shared directory let one killed session's lock hang a later one's runs, and let two
    sessions on one machine share a half-built op. A fresh machine builds them once either way.
    """
    path = tmp_path_factory.mktemp("torch-extensions")
    before = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(path)
    yield path
    if before is None:
        os.environ.pop("TORCH_EXTENSIONS_DIR", None)
    else:
        os.environ["TORCH_EXTENSIONS_DIR"] = before


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


# A rank of a plain launcher can abort at its interpreter's exit, its training done: swift and some scripts
# leave their gloo group to that exit (CI sees it in about 1 plain run of 10). Under safe-sft such a death
# counts as finished (docs/design.md); a plain reference run is read the same way.
DIED_AT_EXIT = "terminate called without an active exception"


def plain_run_finished(done: subprocess.CompletedProcess[str], out: Path, last_step: int) -> bool:
    """A plain run succeeded, or only died at its interpreter's exit after saving its last step."""
    saved = f"checkpoint-{last_step}/trainer_state.json"
    return done.returncode == 0 or (DIED_AT_EXIT in done.stderr and any([*out.glob(saved), *out.glob(f"v*/{saved}")]))


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
