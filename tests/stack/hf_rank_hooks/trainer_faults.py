"""The fault and sample-record pieces both test hooks share: swift's plugin (tests/stack/plugins/faults.py,
which loads this file by path) and the hooks for any transformers Trainer (sitecustomize.py beside it).
No swift import here, so LLaMA-Factory's environment can load it; torch only where a fault fires.

  SAFE_SFT_FAULT          KIND:STEP:RANK
  SAFE_SFT_FAULT_OOM_GIB  the GPU size (GiB) the OOM message reports, as PyTorch words it
  SAFE_SFT_FAULT_ONCE     a marker file: the fault fires only while it does not exist, and creates it
  SAFE_SFT_FAULT_RECORD   a folder: samples-rank-N-PID.jsonl, per optimizer step a key for each sample
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

OOM_TEXT = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.32 GiB"


def oom_text() -> str:
    gib = os.environ.get("SAFE_SFT_FAULT_OOM_GIB")
    if not gib:
        return OOM_TEXT
    return (
        f"CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of {gib} GiB of which "
        f"0 bytes is free. Including non-PyTorch memory, this process has {gib} GiB memory in use."
    )


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def fault() -> tuple[str, int, int] | None:
    spec = os.environ.get("SAFE_SFT_FAULT")
    if not spec:
        return None
    kind, step, on_rank = spec.split(":")
    return kind, int(step), int(on_rank)


def claim() -> bool:
    """True once: the first rank to reach the fault creates the marker."""
    marker = os.environ.get("SAFE_SFT_FAULT_ONCE")
    if not marker:
        return True
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def sample_keys(batch: Any) -> list[str]:
    """A key per sample of a micro-batch: a hash of its tokens, padding left out."""
    mask = batch.get("attention_mask")
    keys = []
    for index, row in enumerate(batch["input_ids"]):
        tokens = row if mask is None else row[mask[index].bool()]
        keys.append(hashlib.sha1(tokens.cpu().numpy().tobytes()).hexdigest()[:12])
    return keys


def record_samples(trainer: Any) -> None:
    """Log which samples each optimizer step consumes (transformers fetches a step's batches in one call)."""
    folder = os.environ.get("SAFE_SFT_FAULT_RECORD")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    path = Path(folder) / f"samples-rank-{rank()}-{os.getpid()}.jsonl"
    original = trainer.get_batch_samples

    def recording(*args: Any, **kwargs: Any) -> Any:
        batches, count = original(*args, **kwargs)
        keys = [key for batch in batches for key in sample_keys(batch)]
        with path.open("a") as handle:
            handle.write(json.dumps({"step": trainer.state.global_step + 1, "samples": keys}) + "\n")
        return batches, count

    trainer.get_batch_samples = recording


def fail_saving_at(trainer: Any, at: int) -> None:
    """oom_save: torch.OutOfMemoryError while step `at`'s checkpoint is written, leaving it half-written."""
    import torch

    original = trainer._save_checkpoint

    def failing_save(model: Any, trial: Any, *a: Any, **kw: Any) -> Any:
        step = trainer.state.global_step
        if step == at and claim():
            folder = Path(trainer.args.output_dir) / f"checkpoint-{step}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.json").write_text("{}")  # half-written: no weights, no trainer_state.json
            raise torch.OutOfMemoryError(oom_text())
        return original(model, trial, *a, **kw)

    trainer._save_checkpoint = failing_save
