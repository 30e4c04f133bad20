"""safe-sft finds a hub model in the folder the hubs' own offline lookups load it from: each cache layout
ModelScope (modelscope_hub, which ms-swift 4's modelscope calls) and Hugging Face write, built on disk and
resolved by the installed modelscope's and huggingface_hub's `snapshot_download(..., local_files_only=True)`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from launcher.probe.model_cache import cached_model_dir

MODEL_ID = "Org/Model-1.5B"


def _folder(path: Path, mtime: float | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def modelscope_loads(cache: Path) -> Path:
    from modelscope import snapshot_download

    return Path(snapshot_download(MODEL_ID, cache_dir=str(cache), local_files_only=True))


def huggingface_loads(cache: Path) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(MODEL_ID, cache_dir=str(cache), local_files_only=True))


MODELSCOPE_LAYOUTS = {
    "snapshot master": ["models/Org--Model-1.5B/snapshots/master"],
    "the only snapshot": ["models/Org--Model-1.5B/snapshots/0123abcd"],
    "older SDK, dots masked": ["models/Org/Model-1___5B"],
    "older SDK's default cache": ["hub/models/Org/Model-1___5B"],
    "an older SDK's folder beside a snapshot": ["models/Org--Model-1.5B/snapshots/master", "models/Org/Model-1___5B"],
}


@pytest.mark.parametrize("layout", list(MODELSCOPE_LAYOUTS))
def test_modelscope_layouts(tmp_path: Path, layout: str) -> None:
    for folder in MODELSCOPE_LAYOUTS[layout]:
        _folder(tmp_path / folder)
    found = cached_model_dir(MODEL_ID, {"MODELSCOPE_CACHE": str(tmp_path)}, tmp_path / "home")
    assert found, f"safe-sft found no folder where modelscope loads {modelscope_loads(tmp_path)}"
    assert found == modelscope_loads(tmp_path)


def test_modelscope_default_cache_is_not_under_hub(tmp_path: Path) -> None:
    """With MODELSCOPE_CACHE unset, modelscope_hub's cache is ~/.cache/modelscope (an older SDK's was its hub/)."""
    home = tmp_path / "home"
    _folder(home / ".cache/modelscope/models/Org--Model-1.5B/snapshots/master")
    assert cached_model_dir(MODEL_ID, {}, home) == modelscope_loads(home / ".cache/modelscope")


def test_huggingface_takes_the_commit_refs_main_names(tmp_path: Path) -> None:
    repo = tmp_path / "models--Org--Model-1.5B"
    now = time.time()
    _folder(repo / "snapshots" / ("a" * 40), mtime=now - 3600)
    _folder(repo / "snapshots" / ("b" * 40), mtime=now)  # newer, but not the branch's commit
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    found = cached_model_dir(MODEL_ID, {"HF_HUB_CACHE": str(tmp_path)}, tmp_path / "home")
    assert found == huggingface_loads(tmp_path)
