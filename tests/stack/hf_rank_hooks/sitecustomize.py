"""Fault injection and sample records for any transformers Trainer (an HF-Trainer script, LLaMA-Factory),
loaded into every rank by putting this folder on PYTHONPATH: Python imports `sitecustomize` at start-up.

Also one CPU shim: transformers up to 5.6 (LLaMA-Factory 0.9.5's pin) resumes a multi-process run by
loading optimizer.pt onto `args.device`, which on the CPU is `cpu:0`, a location torch.load cannot
restore ("don't know how to restore data location ... (tagged with cpu:0)"); on GPUs it is `cuda:N`,
and later transformers load it onto plain `cpu`. The shim does what those do, so the CPU tests can
resume under LLaMA-Factory's pinned transformers as a GPU run would.
The swift tests do the same through swift's plugin (tests/stack/plugins/faults.py), with the same variables:

  SAFE_SFT_FAULT         oom_step:STEP:RANK (torch.OutOfMemoryError at the end of that step) or
                         oom_save:STEP:RANK (the same while that step's checkpoint is written, leaving it half-written)
  SAFE_SFT_FAULT_ONCE    a marker file: the fault fires only while it does not exist
  SAFE_SFT_FAULT_RECORD  a folder: samples-rank-N-PID.jsonl, per optimizer step a key for each sample trained on

Nothing happens until transformers' trainer module is imported (torchrun's agent never imports it).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
from pathlib import Path
from typing import Any

OOM_TEXT = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.32 GiB"


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _fault() -> tuple[str, int, int] | None:
    spec = os.environ.get("SAFE_SFT_FAULT")
    if not spec:
        return None
    kind, step, rank = spec.split(":")
    return kind, int(step), int(rank)


def _claim() -> bool:
    marker = os.environ.get("SAFE_SFT_FAULT_ONCE")
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _sample_keys(batch: Any) -> list[str]:
    mask = batch.get("attention_mask")
    keys = []
    for index, row in enumerate(batch["input_ids"]):
        tokens = row if mask is None else row[mask[index].bool()]
        keys.append(hashlib.sha1(tokens.cpu().numpy().tobytes()).hexdigest()[:12])
    return keys


def _record_samples(trainer: Any) -> None:
    folder = os.environ.get("SAFE_SFT_FAULT_RECORD")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    path = Path(folder) / f"samples-rank-{_rank()}-{os.getpid()}.jsonl"
    original = trainer.get_batch_samples

    def recording(*args: Any, **kwargs: Any) -> Any:
        batches, count = original(*args, **kwargs)
        keys = [key for batch in batches for key in _sample_keys(batch)]
        with path.open("a") as handle:
            handle.write(json.dumps({"step": trainer.state.global_step + 1, "samples": keys}) + "\n")
        return batches, count

    trainer.get_batch_samples = recording


def _inject_faults(trainer: Any, callback_base: type) -> None:
    import torch

    fault = _fault()
    if fault is None or fault[2] != _rank():
        return
    kind, at, _ = fault
    if kind == "oom_save":
        original = trainer._save_checkpoint

        def failing_save(model: Any, trial: Any, *a: Any, **kw: Any) -> Any:
            step = trainer.state.global_step
            if step == at and _claim():
                folder = Path(trainer.args.output_dir) / f"checkpoint-{step}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "config.json").write_text("{}")  # half-written: no weights, no trainer_state.json
                raise torch.OutOfMemoryError(OOM_TEXT)
            return original(model, trial, *a, **kw)

        trainer._save_checkpoint = failing_save

    class StepFault(callback_base):  # type: ignore[misc, valid-type]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if kind == "oom_step" and state.global_step == at and _claim():
                raise torch.OutOfMemoryError(OOM_TEXT)

    trainer.add_callback(StepFault())


def _load_onto_plain_cpu() -> None:
    import torch

    original = torch.load

    def load(*args: Any, map_location: Any = None, **kwargs: Any) -> Any:
        if isinstance(map_location, torch.device) and map_location.type == "cpu" and map_location.index is not None:
            map_location = "cpu"
        return original(*args, map_location=map_location, **kwargs)

    torch.load = load


def _patch(module: Any) -> None:
    _load_onto_plain_cpu()
    trainer_class, callback_base = module.Trainer, module.TrainerCallback
    original = trainer_class.__init__

    def init_with_faults(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)  # a subclass (LLaMA-Factory's) reaches this once, through super()
        _record_samples(self)
        _inject_faults(self, callback_base)

    trainer_class.__init__ = init_with_faults


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patch transformers.trainer right after whoever imports it first."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "transformers.trainer":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then(module: Any) -> None:
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_then  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _AfterImport())
