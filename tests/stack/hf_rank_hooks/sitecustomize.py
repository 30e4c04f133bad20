"""Fault injection and sample records for any transformers Trainer (an HF-Trainer script, LLaMA-Factory),
loaded into every rank by putting this folder on PYTHONPATH: Python imports `sitecustomize` at start-up.
The swift tests do the same through swift's plugin (tests/stack/plugins/faults.py); both take their
pieces and variables from trainer_faults.py beside this file. Here: oom_step:STEP:RANK (at the end of that
step), oom_save:STEP:RANK (while that step's checkpoint is written) and stop:STEP:RANK (the rank SIGSTOPs
itself at the end of that step: a real hang).

Also one CPU shim: transformers up to 5.6 (LLaMA-Factory 0.9.5's pin) resumes a multi-process run by
loading optimizer.pt onto `args.device`, which on the CPU is `cpu:0`, a location torch.load cannot
restore ("don't know how to restore data location ... (tagged with cpu:0)"); on GPUs it is `cuda:N`,
and later transformers load it onto plain `cpu`. The shim does what those do, so the CPU tests can
resume under LLaMA-Factory's pinned transformers as a GPU run would.

Nothing happens until transformers' trainer module is imported (torchrun's agent never imports it).
"""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path
from typing import Any


def _inject_faults(trainer: Any, callback_base: type) -> None:
    import torch
    import trainer_faults as tf  # beside this file, on PYTHONPATH

    tf.record_samples(trainer)
    fault = tf.fault()
    if fault is None or fault[2] != tf.rank():
        return
    kind, at, _ = fault
    if kind == "oom_save":
        tf.fail_saving_at(trainer, at)

    class StepFault(callback_base):  # type: ignore[misc, valid-type]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if kind == "oom_step" and state.global_step == at and tf.claim():
                raise torch.OutOfMemoryError(tf.oom_text())
            if kind == "stop" and state.global_step == at and tf.claim():  # a real mid-run hang
                os.kill(os.getpid(), signal.SIGSTOP)

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
        _inject_faults(self, callback_base)

    trainer_class.__init__ = init_with_faults


def _after_import() -> Any:
    """launcher/after_import.py, loaded by path: LLaMA-Factory's environment has no launcher package."""
    path = Path(__file__).resolve().parents[3] / "launcher" / "after_import.py"
    spec = importlib.util.spec_from_file_location("safe_sft_after_import", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_after_import().after_import("transformers.trainer", _patch)
