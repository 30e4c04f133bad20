"""A training process's process group for ZeRO-3 on the CPU, started before the model is built.

DeepSpeed's zero.Init reads the world size from its own communication layer while the model is built
under it. A CPU run's gloo group is made by transformers (or not yet at all), not through DeepSpeed, so
DeepSpeed counts one process and refuses the batch in every rank ("train_batch_size is not equal to
micro_batch_per_gpu * gradient_acc_step * world_size"): `--deepspeed zero3` on the CPU fails under plain
`swift sft` and torchrun alike. `gloo_before_zero3_on_cpu` starts DeepSpeed's gloo group (wrapping torch's
where it exists) for a CPU run of several processes under a ZeRO-3 config; otherwise it does nothing.

Runs in the training processes only (launcher/worker.py, launcher/hf_worker.py); the launcher never
imports it.
"""

import json
import os
from pathlib import Path
from typing import Any


def zero_stage(deepspeed: Any) -> Any:
    """The ZeRO stage of a resolved --deepspeed: the config as a dict, or a path to its JSON; None if unread."""
    config = deepspeed
    if isinstance(deepspeed, str):
        try:
            config = json.loads(Path(deepspeed).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    return zero.get("stage") if isinstance(zero, dict) else None


def gloo_before_zero3_on_cpu(use_cpu: Any, config: Any) -> None:
    """`use_cpu` and `config` (the --deepspeed value) as the trainer resolved them."""
    if not use_cpu or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    if str(zero_stage(config)) not in ("3", "3.0"):
        return
    import deepspeed
    import deepspeed.comm

    if not deepspeed.comm.is_initialized():
        deepspeed.init_distributed(dist_backend="gloo")
