"""What torchrun starts in every rank for `safe-sft torchrun SCRIPT ARGS` and `safe-sft llamafactory
train`: the user's script (`SCRIPT ARGS`, as `python SCRIPT ARGS` runs it) or a trainer's own per-rank
module (`-m MODULE ARGS`, as `python -m MODULE ARGS` runs it) under torchelastic's `@record`.

`@record` writes the rank's exception to TORCHELASTIC_ERROR_FILE, so torchrun's summary and safe-sft's
classifier get every failed rank's traceback. Local rank 0 writes the TrainingArguments the script
built (output dir, batch sizes, save settings) to SAFE_SFT_RESOLVED_ARGS, in the format
launcher/run/resolved.py reads, so safe-sft finds the checkpoints where the trainer put them. safe-sft
supervises the script's first Trainer: every rank sets what safe-sft chose (SAFE_SFT_TRAINING_ARGS: the
DeepSpeed config, the batch, checkpointing, save_only_model, the resume point, a fresh output dir;
launcher/plan/script_args.py) in the first TrainingArguments the script builds and again in that
Trainer's, and its first train() resumes from safe-sft's resume point, whatever the script passes it (a
bare `trainer.train()`, or transformers' examples' own search of the output dir, which takes a half-written
checkpoint too); and the watchdog's ddp_timeout (SAFE_SFT_DDP_TIMEOUT) in every TrainingArguments where
the script leaves transformers' default. A script's own argparse may refuse such options on its command
line. The checkpoint-on-notice callback joins every Trainer as under swift
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
    run_dir = os.path.realpath(str(args.output_dir))  # where the file system puts it: `lnk/..` past a symlink
    versioned = bool(VERSIONED.match(os.path.basename(run_dir)))
    names = (
        "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
        "save_strategy", "save_steps", "save_only_model", "eval_strategy", "eval_steps",
        "resume_from_checkpoint", "ddp_timeout", "gradient_checkpointing",
    )  # fmt: skip
    return {
        "output_dir": os.path.dirname(run_dir) if versioned else run_dir,
        "run_dir": run_dir,
        "add_version": versioned,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),  # torchrun's; args.world_size would set up devices
        **{name: plain(getattr(args, name, None)) for name in names},
        "resume_only_model": None,  # no such field: the Trainer loads what the checkpoint holds
        "max_length": None,
        "deepspeed": plain(getattr(args, "hf_deepspeed_config", None) and args.hf_deepspeed_config.config),
    }


def _report(path: str, args: Any, **more: Any) -> None:
    _sibling("worker_notice").write_record(Path(path), {**resolved_args(args), **more}, indent=1)


# what the first Trainer's arguments get again when it is built: the fields a script may set after building its
# TrainingArguments (`args.per_device_train_batch_size = cli.bs`, `args.output_dir = ...`); the DeepSpeed config
# is read in __post_init__ alone, and the resume point goes to Trainer.train
REAPPLIED = (
    "per_device_train_batch_size", "gradient_accumulation_steps", "per_device_eval_batch_size",
    "dataloader_num_workers", "gradient_checkpointing", "save_only_model", "dataloader_pin_memory", "ignore_data_skip",
    "output_dir",
)  # fmt: skip


def patch_training_arguments() -> None:
    """safe-sft supervises the script's first Trainer. The watchdog's ddp_timeout (DDP_TIMEOUT_ENV) goes into
    every TrainingArguments where the script left transformers' default (a script's own parser may refuse the
    argument). What safe-sft chose (CHOSEN_ENV) goes into the first TrainingArguments the script builds, before
    transformers reads it, and again into the first Trainer's arguments when it is built; its resume point to
    that Trainer's first train(). A second stage's TrainingArguments, Trainer and train() stay the script's own
    (they had been given the first stage's output dir and resume point). Local rank 0 writes the arguments
    until the first Trainer is built, then that Trainer's (a script may change them after parsing:
    `args.output_dir = ...`), then no more."""
    path = os.environ.get(RESOLVED_ENV) if os.environ.get("LOCAL_RANK", "0") == "0" else None
    timeout = os.environ.get(DDP_TIMEOUT_ENV)
    chosen: dict[str, Any] = json.loads(os.environ.get(CHOSEN_ENV) or "{}")
    if not path and not timeout and not chosen:
        return
    import transformers
    from transformers import TrainingArguments

    original = TrainingArguments.__post_init__
    default = TrainingArguments.__dataclass_fields__["ddp_timeout"].default
    supervised: list[Any] = []  # the first Trainer, once built
    pending = dict(chosen)  # for the first TrainingArguments

    def post_init_and_report(self: Any) -> None:
        if timeout and self.ddp_timeout == default:
            self.ddp_timeout = int(timeout)
        for name, value in pending.items():  # before transformers reads them (the DeepSpeed config, the steps)
            setattr(self, name, value)
        pending.clear()
        original(self)  # type: ignore[no-untyped-call]
        _sibling("worker_gloo").gloo_before_zero3_on_cpu(self.use_cpu, self.deepspeed)
        if path and not supervised:
            _report(path, self)

    TrainingArguments.__post_init__ = post_init_and_report  # type: ignore[method-assign]
    built = transformers.Trainer.__init__

    @functools.wraps(built)
    def init_and_report(self: Any, *args: Any, **kwargs: Any) -> None:
        first = not supervised
        if first:
            supervised.append(self)
            given = kwargs.get("args", args[1] if len(args) > 1 else None)
            for name in REAPPLIED:
                if name in chosen and given is not None and getattr(given, name, None) != chosen[name]:
                    setattr(given, name, chosen[name])
            if given is not None and "output_dir" not in chosen:
                keep_earlier_checkpoints(given, chosen.get("resume_from_checkpoint"))
        built(self, *args, **kwargs)
        if first and "per_device_train_batch_size" in chosen:
            batch_as_told(self, trainer_class)
        if first and path:
            _report(path, self.args)

    trainer_class = transformers.Trainer  # transformers' own, before a script rebinds the name
    transformers.Trainer.__init__ = init_and_report  # type: ignore[method-assign]
    resume_where_told(transformers.Trainer, chosen.get("resume_from_checkpoint"), supervised, path)
    if os.environ.get(LAST_CHECKPOINT_ENV) and "output_dir" in chosen:
        last_checkpoint_as_found(chosen["output_dir"], os.environ[LAST_CHECKPOINT_ENV])


class BatchNotAppliedError(ValueError):
    """The script's own train DataLoader keeps a batch of its own: the micro-batch safe-sft set cannot reach it."""


def batch_as_told(trainer: Any, base: Any) -> None:
    """A Trainer subclass whose own get_train_dataloader batches by a value of the script's (`batch_size=
    cli.bs`) keeps its batch when safe-sft halves per_device_train_batch_size, while the accumulation doubles:
    the retry had trained on twice the global batch and said it was kept. The supervised Trainer's loader is
    checked as its training loop builds it, and such an attempt stops there: nothing trained, nothing saved."""
    own = type(trainer).get_train_dataloader
    if own is base.get_train_dataloader:
        return  # transformers' own loader batches by the arguments

    @functools.wraps(own)
    def get_train_dataloader(*args: Any, **kwargs: Any) -> Any:
        loader = own(trainer, *args, **kwargs)
        size, told = _loader_batch(loader), trainer.args.train_batch_size  # per process
        if size is not None and size != told:
            raise BatchNotAppliedError(
                f"safe-sft: the script's own get_train_dataloader batches {size} per process, not the "
                f"per_device_train_batch_size {told} safe-sft set: its smaller batch cannot reach this script, and "
                "with the accumulation raised the global batch would change; nothing was trained in this attempt. "
                "Run again with the script's own batch option smaller, or build the DataLoader from "
                "self._train_batch_size"
            )
        return loader

    trainer.get_train_dataloader = get_train_dataloader


def _loader_batch(loader: Any) -> int | None:
    size = getattr(loader, "batch_size", None)
    if size is None:  # accelerate's prepared loader on several processes: its batch sampler's
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


FRESH_DIR_ENV = "SAFE_SFT_FRESH_DIR"  # the name of this attempt's own dir, should it need one (v<N>-<run>)
CHECKPOINT_DIR = re.compile(r"^checkpoint-\d+$")


def keep_earlier_checkpoints(args: Any, resume: str | None) -> None:
    """An output dir the script chose in its own code, which safe-sft did not know, that holds an earlier
    run's checkpoint-N: this attempt writes to a fresh dir inside it (FRESH_DIR_ENV), never over them (a
    rerun had trained from step 0 there and saved over the earlier run's checkpoints). Not where it resumes
    from one of them, as safe-sft told it."""
    name = os.environ.get(FRESH_DIR_ENV)
    out = os.path.abspath(str(args.output_dir))
    if not name or (resume and os.path.dirname(os.path.abspath(resume)) == out):
        return
    try:
        earlier = sorted(entry for entry in os.listdir(out) if CHECKPOINT_DIR.match(entry))
    except OSError:
        return
    if not earlier:
        return
    args.output_dir = os.path.join(out, name)
    if os.environ.get("RANK", "0") == "0":
        print(
            f"safe-sft: {out} holds an earlier run's {earlier[-1]}"
            f"{f' (and {len(earlier) - 1} more)' if len(earlier) > 1 else ''}: this attempt writes to "
            f"{args.output_dir}, never over it",
            file=sys.stderr,
            flush=True,
        )


def resume_where_told(trainer: Any, checkpoint: str | None, supervised: list[Any], path: str | None) -> None:
    """The supervised (first) Trainer's first train() resumes from `checkpoint`, safe-sft's resume point (the
    newest complete checkpoint, or the user's), whatever the script passes it: None (a bare `trainer.train()`
    would train from step 0 and save over the checkpoints), or a checkpoint of its own search (which takes a
    half-written one too). Another Trainer's, or a later call, is the script's own. Where safe-sft told none,
    the checkpoint the script passes (its own `--init_ckpt`, its get_last_checkpoint) is reported as
    `trained_from`: the attempt went on from it, not from step 0."""
    original = trainer.train
    pending = [checkpoint]

    @functools.wraps(original)
    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        if pending and supervised and self is supervised[0]:
            told = pending.pop()
            if told is not None and args:
                args = (told, *args[1:])
            elif told is not None:
                kwargs["resume_from_checkpoint"] = told
            used = args[0] if args else kwargs.get("resume_from_checkpoint")
            if used is True:  # transformers' own search of the output dir
                from transformers.trainer_utils import get_last_checkpoint

                used = get_last_checkpoint(self.args.output_dir)  # type: ignore[no-untyped-call]
            if path:
                _report(path, self.args, trained_from=os.path.abspath(used) if isinstance(used, str) else None)
        return original(self, *args, **kwargs)

    trainer.train = train


LAST_CHECKPOINT_ENV = "SAFE_SFT_LAST_CHECKPOINT"  # the newest complete checkpoint where a fresh dir hides it


def last_checkpoint_as_found(fresh_dir: str, checkpoint: str) -> None:
    """An attempt sent to a fresh dir (the output dir holds an earlier run's checkpoints) hides them from the
    script's own `get_last_checkpoint(args.output_dir)` (run_clm.py's auto-resume): under plain torchrun the
    script would resume from the newest, under safe-sft it trained from step 0. Asked about the fresh dir, it
    now gets the newest complete checkpoint of the output dir (plain transformers would take a half-written
    one too), and the attempt says so."""
    from transformers import trainer_utils

    original: Callable[[Any], Any] = trainer_utils.get_last_checkpoint

    @functools.wraps(original)
    def get_last_checkpoint(folder: Any) -> Any:
        if os.path.abspath(str(folder)) != os.path.abspath(fresh_dir):
            return original(folder)
        if os.environ.get("RANK", "0") == "0":
            print(
                f"safe-sft: the script looks for its last checkpoint in {folder}, this attempt's fresh dir: it "
                f"gets {checkpoint}, the newest complete one in {os.path.dirname(os.path.abspath(fresh_dir))}",
                file=sys.stderr,
                flush=True,
            )
        return checkpoint

    trainer_utils.get_last_checkpoint = get_last_checkpoint


def log_steps() -> None:
    """The world's rank 0 appends each finished step, as swift's logging.jsonl has it, to the attempt's
    folder (SAFE_SFT_NOTICE_DIR): safe-sft's last step, lost work and resume checks read it there. A
    plain Trainer writes no such log, and the user's output dir gets nothing of safe-sft's."""
    folder = os.environ.get("SAFE_SFT_NOTICE_DIR")
    if not folder:
        return
    import transformers

    path = Path(folder) / "logging.jsonl"
    unwritable: list[OSError] = []

    class StepLog(transformers.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero and not unwritable:
                try:
                    with path.open("a") as handle:
                        handle.write(
                            json.dumps({"global_step/max_steps": f"{state.global_step}/{state.max_steps}"}) + "\n"
                        )
                except OSError as err:  # safe-sft's record: training goes on without it
                    unwritable.append(err)
                    _sibling("worker_notice").cannot_write(path, err)

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
