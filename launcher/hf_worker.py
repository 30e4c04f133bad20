"""What torchrun starts in every rank for `safe-sft torchrun SCRIPT ARGS` and `safe-sft llamafactory
train`: the user's script (`SCRIPT ARGS`, as `python SCRIPT ARGS` runs it) or a trainer's own per-rank
module (`-m MODULE ARGS`, as `python -m MODULE ARGS` runs it) under torchelastic's `@record`.

`@record` writes the rank's exception to TORCHELASTIC_ERROR_FILE, so torchrun's summary and safe-sft's
classifier get every failed rank's traceback. Local rank 0 writes the TrainingArguments the script
built (output dir, batch sizes, save settings) to SAFE_SFT_RESOLVED_ARGS, in the format
launcher/run/resolved.py reads, so safe-sft finds the checkpoints where the trainer put them. Every rank
sets what safe-sft chose (SAFE_SFT_TRAINING_ARGS: the DeepSpeed config, the batch, checkpointing,
save_only_model, the resume point, a fresh output dir; launcher/plan/script_args.py) in every
TrainingArguments the script builds, and the watchdog's ddp_timeout (SAFE_SFT_DDP_TIMEOUT) where the
script leaves transformers' default: a script's own argparse may refuse such options on its command line.
Trainer.train resumes from safe-sft's resume point, whatever the script passes it (a bare
`trainer.train()`, or transformers' examples' own search of the output dir, which takes a half-written
checkpoint too). The checkpoint-on-notice callback joins every Trainer as under swift
(launcher/worker_notice.py).

This file runs in the training processes only; the launcher never imports it.
"""

import functools
import importlib.util
import json
import os
import re
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


@functools.cache
def _sibling(name: str) -> ModuleType:
    """A file next to this one, loaded by path: the launcher package need not be importable here."""
    spec = importlib.util.spec_from_file_location(f"safe_sft_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":  # before torch's import, which takes seconds: launcher/worker_tie.py says why
    _sibling("worker_tie").tie_to_torchrun()

Entry = Callable[[], None]
record: Callable[[Entry], Entry] = _sibling("worker").record  # torchelastic's, minus a full disk's empty file

RESOLVED_ENV = "SAFE_SFT_RESOLVED_ARGS"
DDP_TIMEOUT_ENV = "SAFE_SFT_DDP_TIMEOUT"  # launcher/plan/watchdog.py sets it for a script with its own parser
CHOSEN_ENV = "SAFE_SFT_TRAINING_ARGS"  # launcher/plan/script_args.py writes it: field -> value, as JSON
VERSIONED = re.compile(r"^v\d+-")  # the fresh dir safe-sft names when an attempt would save over a checkpoint


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


def _report(path: str, args: Any) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        json.dump(resolved_args(args), handle, indent=1)
    os.replace(tmp, path)  # a reader never sees half a file


def patch_training_arguments() -> None:
    """Each time the script builds a TrainingArguments: the watchdog's ddp_timeout (DDP_TIMEOUT_ENV) where the
    script left transformers' default, in every rank, since a script's own parser may refuse the argument;
    then local rank 0 writes the arguments (the last one built wins). Again when a Trainer is built with them:
    a script may change them after parsing (`args.output_dir = ...`), and the Trainer's are the ones it uses."""
    path = os.environ.get(RESOLVED_ENV) if os.environ.get("LOCAL_RANK", "0") == "0" else None
    timeout = os.environ.get(DDP_TIMEOUT_ENV)
    chosen: dict[str, Any] = json.loads(os.environ.get(CHOSEN_ENV) or "{}")
    if not path and not timeout and not chosen:
        return
    import transformers
    from transformers import TrainingArguments

    original = TrainingArguments.__post_init__
    default = TrainingArguments.__dataclass_fields__["ddp_timeout"].default

    def post_init_and_report(self: Any) -> None:
        if timeout and self.ddp_timeout == default:
            self.ddp_timeout = int(timeout)
        for name, value in chosen.items():  # before transformers reads them (the DeepSpeed config, the steps)
            setattr(self, name, value)
        original(self)  # type: ignore[no-untyped-call]
        if path:
            _report(path, self)

    TrainingArguments.__post_init__ = post_init_and_report  # type: ignore[method-assign]
    if "resume_from_checkpoint" in chosen:
        resume_where_told(transformers.Trainer, chosen["resume_from_checkpoint"])
    if not path:
        return
    built = transformers.Trainer.__init__

    @functools.wraps(built)
    def init_and_report(self: Any, *args: Any, **kwargs: Any) -> None:
        built(self, *args, **kwargs)
        _report(path, self.args)

    transformers.Trainer.__init__ = init_and_report  # type: ignore[method-assign]


def resume_where_told(trainer: Any, checkpoint: str) -> None:
    """Trainer.train resumes from `checkpoint`, safe-sft's resume point (the newest complete checkpoint, or
    the user's), whatever the script passes it: None (a bare `trainer.train()` would train from step 0 and
    save over the checkpoints), or a checkpoint of its own search (which takes a half-written one too)."""
    original = trainer.train

    @functools.wraps(original)
    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (checkpoint, *args[1:])
        else:
            kwargs["resume_from_checkpoint"] = checkpoint
        return original(self, *args, **kwargs)

    trainer.train = train


def log_steps() -> None:
    """The world's rank 0 appends each finished step, as swift's logging.jsonl has it, to the attempt's
    folder (SAFE_SFT_NOTICE_DIR): safe-sft's last step, lost work and resume checks read it there. A
    plain Trainer writes no such log, and the user's output dir gets nothing of safe-sft's."""
    folder = os.environ.get("SAFE_SFT_NOTICE_DIR")
    if not folder:
        return
    import transformers

    path = Path(folder) / "logging.jsonl"

    class StepLog(transformers.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                with path.open("a") as handle:
                    handle.write(json.dumps({"global_step/max_steps": f"{state.global_step}/{state.max_steps}"}) + "\n")

    original = transformers.Trainer.__init__

    @functools.wraps(original)
    def init_with_step_log(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.add_callback(StepLog())

    transformers.Trainer.__init__ = init_with_step_log  # type: ignore[method-assign]


@record
def main() -> None:
    run_training = _sibling("worker").run_training  # marks the return, releases the process group
    if sys.argv[1] == "-m":
        module = sys.argv[2]
        sys.argv = sys.argv[2:]
        _sibling("worker").script_folder_first(os.getcwd())  # as `python -m MODULE` sets it
        run_training(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))
        return
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    _sibling("worker").script_folder_first(os.path.dirname(os.path.abspath(script)))  # as `python SCRIPT` does
    run_training(lambda: runpy.run_path(script, run_name="__main__"))


if __name__ == "__main__":
    worker = _sibling("worker")
    worker.install_notice_callback()
    patch_training_arguments()
    log_steps()
    main()
