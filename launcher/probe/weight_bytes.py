"""What a model folder's weight files hold, read without loading them.

Contract:
- `refuse_lfs_pointer(path)` raises SafeSftError where a weight file is a Git LFS pointer: the ~130-byte
  text `git clone` leaves in the weights' place without Git LFS. swift would fail on it in every rank after
  torchrun started them; the fix is to fetch the weights.
- `refuse_missing(missing, index_name)` raises SafeSftError naming the weight files an index names that
  are not there (a download cut short).
- `torch_weights(directory)`: what a model's PyTorch weights (`pytorch_model*.bin`, what older
  checkpoints ship instead of safetensors) hold: their bytes, the index's `metadata.total_size` (the
  tensors' bytes exactly), else the .bin files' sizes summed (their pickle framing is a few bytes a
  tensor), None where there are none; and the tensors' names where an index names them. With
  config.json's dtype the bytes give the parameter count that config.json's shapes can only approximate.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import NamedTuple

from launcher.errors import SafeSftError

LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/"
LFS_POINTER_MAX_BYTES = 1024  # a pointer is three short lines
TORCH_WEIGHTS_INDEX = "pytorch_model.bin.index.json"
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}  # config.json's torch_dtype -> bytes a weight
REDOWNLOAD = "download the model again (or complete it)"
UNREADABLE = "make the model folder readable by this user (chmod -R a+rX on it), or run as its owner"


def refuse_lfs_pointer(path: Path) -> None:
    """SafeSftError where `path` is a Git LFS pointer, not weights."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > LFS_POINTER_MAX_BYTES:
            return
        with path.open("rb") as handle:
            start = handle.read(len(LFS_POINTER_PREFIX))
    except OSError:
        return  # the reader that follows names what is wrong with the file
    if start == LFS_POINTER_PREFIX:
        raise SafeSftError(
            f"{path} is a Git LFS pointer, not the weights: the model was cloned without Git LFS",
            f"fetch the weights: run `git lfs install && git lfs pull` in {path.parent}, "
            "or download the model with modelscope or huggingface-cli",
        )


class TorchWeights(NamedTuple):
    total_bytes: int | None
    tensors: tuple[str, ...] | None  # the names the index maps to files (None: no index read)


def torch_weights(directory: Path) -> TorchWeights:
    """The folder's PyTorch weights: their index's total_size and tensor names, else the .bin files' sizes."""
    indexed = _index(directory / TORCH_WEIGHTS_INDEX)
    if indexed is not None:
        return indexed
    files = sorted(directory.glob("pytorch_model*.bin"))
    for file in files:
        refuse_lfs_pointer(file)
    sizes = [_size(file) for file in files]
    return TorchWeights(sum(sizes) if sizes and all(sizes) else None, None)


def _index(index: Path) -> TorchWeights | None:
    """metadata.total_size and the tensor names of a readable index (None where it is not); SafeSftError
    where a file it names is missing (a download cut short) or is an LFS pointer."""
    try:
        if not index.is_file():
            return None
        found = json.loads(index.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    metadata = found.get("metadata") if isinstance(found, dict) else None
    weight_map = found.get("weight_map") if isinstance(found, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0 or not isinstance(weight_map, dict):
        return None
    files = sorted({index.parent / name for name in weight_map.values() if isinstance(name, str)})
    refuse_missing([file for file in files if not file.is_file()], index.name)
    for file in files:
        refuse_lfs_pointer(file)
    return TorchWeights(total, tuple(str(name) for name in weight_map))


def refuse_missing(missing: list[Path], index_name: str) -> None:
    """SafeSftError naming the first of the weight files an index names that are not there, if any."""
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise SafeSftError(f"{missing[0]}, which {index_name} names, is missing{more}", REDOWNLOAD)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
