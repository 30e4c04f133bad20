"""The backend interface: what safe-sft knows about one trainer, in one place.

A backend says how to read the user's arguments (`read`: argv -> BackendArgs), which of the ladder's
knobs the trainer has (`missing`: the ones it does not; the ladder leaves those alone and the plan says
so), the trainer's defaults where they differ from swift's, the worker torchrun runs in every rank
(under torchelastic's `@record`), where checkpoints land when a later attempt must not write over a
half-written one, and whether it can run one process over several GPUs (device_map).

Every backend hands the planner the same value, a SwiftArgs keyed by swift's field names (the names
HF TrainingArguments uses), so the planner, the ladder, resume and the report stay trainer-blind.
Writing back is SwiftArgs.argv(): the user's tokens, with the knobs the ladder changed replaced in
place or appended. Pure: no torch, no trainer import (`safe-sft plan` stays fast).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from launcher.model import EnvSetting
from launcher.plan.swift_args import SwiftArgs

WORKER_DIR = Path(__file__).resolve().parent.parent  # launcher/: the worker files run as scripts


def read_option_table(path: Path) -> tuple[str, dict[str, tuple[str, ...]]]:
    """A trainer's option table (launcher/backends/*_options.txt, scripts/option_table.py's format): its
    comment line (the trainer and its versions), and each option's name -> its kind and allowed values."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = (line.split() for line in lines if line and not line.startswith("#"))
    return (lines[0] if lines else ""), {name: tuple(kind) for name, *kind in rows}


# The ladder's knobs by the name a backend can lack (launcher/plan/degrade.py Settings, settings.py writes them)
KNOBS = {
    "per_device_train_batch_size": "micro-batch (with gradient_accumulation_steps)",
    "gradient_checkpointing": "gradient checkpointing",
    "deepspeed": "the ZeRO stage (--deepspeed)",
    "save_only_model": "save_only_model after an OOM while saving",
    "dataloader_num_workers": "dataloader workers",
    "dataloader_pin_memory": "dataloader pinning",
    "per_device_eval_batch_size": "the evaluation batch",
    "max_length": "a shorter max_length",
    "image_budget": "the image budget (MAX_PIXELS / IMAGE_MAX_TOKEN_NUM)",
    "device_map": "one process over several GPUs (device_map) and its rebalance",
    "resume_only_model": "resume_only_model (a weights-only resume loads the weights and starts a fresh optimizer)",
    "add_version": "add_version (an attempt that would save over a checkpoint writes to a new v<N>-* dir)",
}


@dataclass(frozen=True)
class BackendArgs:
    """The user's arguments as a backend read them: what comes between the worker and the trainer's own
    arguments (a script's path), and the trainer's arguments."""

    worker_args: tuple[str, ...]
    args: SwiftArgs
    # the trainer's check of the files its arguments name (LLaMA-Factory's dataset_info.json), run with the
    # other such checks: a plan for another machine only warns of what is not here
    check_named: Callable[[], None] | None = None
    warnings: tuple[str, ...] = ()  # what the plan cannot count of what these arguments run
    # files the trainer reads again as each attempt starts (LLaMA-Factory's config): an edit while the run trains
    # would change the experiment between attempts, so a retry checks them first
    reread: tuple[str, ...] = ()


@dataclass(frozen=True)
class Backend:
    name: str  # as the plan's JSON and report.json name it
    command: str  # how the user starts it under safe-sft, for messages
    worker: Path  # what torchrun runs in every rank, under @record
    read: Callable[[list[str]], BackendArgs]  # argv (and config) -> BackendArgs; SafeSftError on bad input
    missing: frozenset[str] = frozenset()  # KNOBS the trainer does not have
    model_key: str = "model"  # the argument naming the model (a local dir is probed for its size)
    dataset_key: str | None = "dataset"  # the argument naming local data files to sample; None: not read
    # arguments naming more data files the trainer loads (its evaluation's): checked as the dataset's are,
    # not sampled for the estimate
    checked_data_keys: tuple[str, ...] = ("val_dataset",)
    device_map: bool = True  # can run one process over several GPUs
    # the trainer resumes from the newest checkpoint-N in its output dir by itself, complete or not
    # (LLaMA-Factory, unless overwrite_output_dir): the first attempt names the newest complete one instead
    resumes_latest: bool = False
    # the trainer resumes where it is told (--resume_from_checkpoint): False for a user's own script, which may
    # never hand it to trainer.train() and so train from step 0 over the checkpoints it was to resume from
    resumes_as_told: bool = True
    # --deepspeed takes swift's names (zero2, zero3_offload, ...) as well as a file or inline JSON
    deepspeed_names: bool = False
    # an image budget the trainer reads as an argument, not from the environment: swift's variable -> its argument
    budget_args: Mapping[str, str] = field(default_factory=dict)
    # what the trainer's own launcher sets in its ranks' environment (from the user's): safe-sft sets it too
    launch_env: Callable[[Mapping[str, str]], tuple[EnvSetting, ...]] = lambda _env: ()
    # the package every rank imports, and the distribution that installs it: the run path finds it (without
    # importing it) before anything starts; None where the trainer is the user's own script
    trainer: tuple[str, str] | None = None
    # what the plan assumes of this trainer that its arguments do not say (a script's tuning method), for its notes
    assumed: str | None = None
    # its command line may be a parser of its own (a script's argparse) that refuses what safe-sft would add
    # unasked (--ddp_timeout): the worker sets that in the TrainingArguments instead
    own_parser: bool = False
    # the trainer writes swift's args.json beside its checkpoints, which tells one experiment from another
    # (--resume-latest's check); without it, that check has nothing to read and says nothing
    writes_args_json: bool = True
    # the trainer makes its output and resume dirs absolute as text (swift's os.path.abspath: `lnk/../out` is
    # ./out), not as the file system resolves them (transformers: past a symlink, `..` is its target's parent)
    lexical_paths: bool = False

    def resumes_by_itself(self, args: SwiftArgs) -> bool:
        """The trainer will resume from the newest checkpoint-N in its output dir, complete or not: LLaMA-Factory,
        unless told to start afresh (overwrite_output_dir) or not to resume (resume_from_checkpoint: false,
        read as empty)."""
        fresh = args.get_bool("overwrite_output_dir", False) or args.get("resume_from_checkpoint") == ""
        return self.resumes_latest and not fresh

    def has(self, knob: str) -> bool:
        return knob not in self.missing

    def spelled(self, change: str) -> str:
        """A ladder change ("MAX_PIXELS 589824 -> 294912") in this trainer's names: an image budget it reads
        as an argument is named as that argument ("image_max_pixels 589824 -> 294912")."""
        for variable, argument in self.budget_args.items():
            change = re.sub(rf"\b{re.escape(variable)}\b", argument, change)
        return change

    def notes(self) -> tuple[str, ...]:
        """The plan's notes on this trainer: the knobs the ladder leaves alone, what the plan assumes of it."""
        notes = [f"backend {self.name}: {self.assumed}"] if self.assumed else []
        if self.missing:
            names = "; ".join(KNOBS[k] for k in sorted(self.missing))
            notes.append(f"backend {self.name}: the ladder skips what this trainer has no setting for: {names}")
        return tuple(notes)
