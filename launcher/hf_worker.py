"""What torchrun starts in every rank for `safe-sft torchrun SCRIPT ARGS`: the user's script under
torchelastic's `@record`, as `python SCRIPT ARGS` would run it.

`@record` writes the rank's exception to TORCHELASTIC_ERROR_FILE, so torchrun's summary and safe-sft's
classifier get every failed rank's traceback. Local rank 0 writes the TrainingArguments the script
built (output dir, batch sizes, save settings) to SAFE_SFT_RESOLVED_ARGS, in the format
launcher/run/resolved.py reads, so safe-sft finds the checkpoints where the trainer put them. The
checkpoint-on-notice callback joins every Trainer as under swift (launcher/worker_notice.py).

This file runs in the training processes only; the launcher never imports it.
"""

import functools
import importlib.util
import json
import os
import re
import runpy
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

RESOLVED_ENV = "SAFE_SFT_RESOLVED_ARGS"
VERSIONED = re.compile(r"^v\d+-")  # the fresh dir safe-sft names when an attempt would save over a checkpoint


@functools.cache
def _sibling(name: str) -> ModuleType:
    """A file next to this one, loaded by path: the launcher package need not be importable here."""
    spec = importlib.util.spec_from_file_location(f"safe_sft_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resolved_args(args: Any) -> dict[str, Any]:
    """What safe-sft needs of the script's TrainingArguments, as worker.py writes swift's."""
    plain = _sibling("worker")._plain
    run_dir = os.path.abspath(str(args.output_dir))
    versioned = bool(VERSIONED.match(os.path.basename(run_dir)))
    names = (
        "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
        "save_strategy", "save_steps", "save_only_model", "eval_strategy", "eval_steps",
        "resume_from_checkpoint", "ddp_timeout",
    )  # fmt: skip
    return {
        "output_dir": os.path.dirname(run_dir) if versioned else run_dir,
        "run_dir": run_dir,
        "add_version": versioned,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),  # torchrun's; args.world_size would set up devices
        **{name: plain(getattr(args, name, None)) for name in names},
        "resume_only_model": False,
        "max_length": None,
        "deepspeed": plain(getattr(args, "hf_deepspeed_config", None) and args.hf_deepspeed_config.config),
    }


def report_training_arguments() -> None:
    """Write the arguments each time a TrainingArguments is built (the last one wins)."""
    path = os.environ.get(RESOLVED_ENV)
    if not path or os.environ.get("LOCAL_RANK", "0") != "0":
        return
    from transformers import TrainingArguments

    original = TrainingArguments.__post_init__

    def post_init_and_report(self: Any) -> None:
        original(self)  # type: ignore[no-untyped-call]
        tmp = f"{path}.tmp"
        with open(tmp, "w") as handle:
            json.dump(resolved_args(self), handle, indent=1)
        os.replace(tmp, path)  # a reader never sees half a file

    TrainingArguments.__post_init__ = post_init_and_report  # type: ignore[method-assign]


@record
def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    worker = _sibling("worker")
    worker.die_with_parent()
    worker.install_notice_callback()
    report_training_arguments()
    main()
