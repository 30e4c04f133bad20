"""The HF-Trainer backend: `safe-sft torchrun [--] SCRIPT ARGS` for any script built on transformers'
TrainingArguments (a vendor's finetune.py, transformers' examples), run in every rank by
launcher/hf_worker.py under @record.

Its arguments are TrainingArguments' `--key value` / `--key=value` / bare `--flag`, the names swift
uses too, so the planner reads them as they are. What differs is the trainer's defaults (micro-batch
8, accumulation 1, checkpointing off, no dataloader workers, output to trainer_output) and the knobs it
lacks: no max_length, no image budget, no device_map, no resume_only_model (transformers loads whatever
a checkpoint holds: weights alone after save_only_model), no add_version (a later attempt that would
save over a checkpoint gets a fresh `<output_dir>/v<N>-safe-sft` as its --output_dir instead). A script
may ignore --resume_from_checkpoint (a plain `trainer.train()`): its resume point guards nothing, so an
attempt into a dir that holds any checkpoint gets the fresh dir.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

from launcher.backends.base import WORKER_DIR, Backend, BackendArgs, read_option_table
from launcher.errors import SafeSftError
from launcher.plan.swift_args import SwiftArgs, normalize_key, parse_swift_argv

# transformers 5.x TrainingArguments' defaults, where they differ from swift's; and a full fine-tune, since what
# a script trains is its own code's (an HF-Trainer script trains every parameter unless it wraps the model
# in adapters): planned as LoRA, a full fine-tune's optimizer states would be missing from the estimate
DEFAULTS = {
    "tuner_type": "full",
    "per_device_train_batch_size": "8",
    "per_device_eval_batch_size": "8",
    "gradient_accumulation_steps": "1",
    "gradient_checkpointing": "false",
    "dataloader_num_workers": "0",
    "output_dir": "trainer_output",
    "add_version": "false",
    "ddp_timeout": "1800",
}
OPTIONS_FILE = Path(__file__).with_name("training_options.txt")  # scripts/training_options.py writes it


@cache
def training_options() -> frozenset[str]:
    """TrainingArguments' option names (transformers 5.x), read without importing transformers: a script's
    HfArgumentParser takes an unambiguous prefix of one (`--output_d`), and so does safe-sft. The script's
    own fields are unknown here; a flag that is a prefix of one of them alone stays itself."""
    return frozenset(_option_kinds())


@cache
def _option_kinds() -> dict[str, tuple[str, ...]]:
    return read_option_table(OPTIONS_FILE)[1]


# what names a file, not a folder: a script's own `--out metrics.json` is no abbreviated --output_dir
FILE_SUFFIXES = (
    ".json", ".jsonl", ".txt", ".csv", ".tsv", ".log", ".yaml", ".yml", ".pt", ".pth", ".bin", ".safetensors",
    ".npy", ".npz", ".pkl", ".pickle", ".parquet", ".h5", ".png", ".jpg", ".md", ".html",
)  # fmt: skip


def _own_flags(args: SwiftArgs) -> frozenset[str]:
    """Abbreviated flags HfArgumentParser cannot be reading as the option they are a prefix of, so they are
    the script's own options: one given no value where that option takes one (HfArgumentParser would stop,
    "expected one argument"; argparse's `--resume` store_true had been read as --resume_from_checkpoint true
    and refused), and one for a folder (`--out` of --output_dir) whose value is a file, or is named as one
    (safe-sft had made its records folder at the script's `--out metrics.json`, and the script then failed
    writing it)."""
    kinds = _option_kinds()
    own = set()
    for flag, values in args.items:
        key = args.key_of(flag)
        if not flag.startswith("--") or key == normalize_key(flag) or key not in kinds:
            continue  # not an abbreviation of TrainingArguments' option
        given_none = not values and kinds[key][:1] not in (("bool",), ("flag",))
        a_file = key.endswith("_dir") and bool(values) and _names_a_file(values[-1])
        if given_none or a_file:
            own.add(flag)
    return frozenset(own)


def _names_a_file(value: str) -> bool:
    path = Path(value).expanduser()
    return path.is_file() or (not path.is_dir() and path.suffix.lower() in FILE_SUFFIXES)


USAGE = "use it as `safe-sft torchrun [OPTIONS] [--] train.py --output_dir OUT --per_device_train_batch_size 4 ...`"


# torchrun's own options (either spelling), which safe-sft's replace: the processes, the nodes, the rendezvous
RENDEZVOUS = "nothing: safe-sft sets up the rendezvous itself (several nodes: --master-addr, --master-port)"
TORCHRUN_OPTIONS = {
    "nproc_per_node": "safe-sft's --nproc N (CPU processes) or --gpus N|LIST, before the script",
    "nnodes": "safe-sft's --nnodes, --node-rank, --master-addr and --master-port, before the script",
    "node_rank": "safe-sft's --node-rank, before the script",
    "master_addr": "safe-sft's --master-addr, before the script",
    "master_port": "safe-sft's --master-port, before the script",
    "standalone": RENDEZVOUS,
    "rdzv_backend": RENDEZVOUS,
    "rdzv_endpoint": RENDEZVOUS,
    "rdzv_id": RENDEZVOUS,
    "rdzv_conf": RENDEZVOUS,
    "max_restarts": "safe-sft's --max-attempts, before the script",
}


def check_not_torchruns(arg: str) -> None:
    """A torchrun option (`--nproc_per_node 8`, `--standalone`) where the script or its module comes first:
    refused with safe-sft's option that replaces it."""
    option = arg.lstrip("-").split("=")[0].replace("-", "_")
    if arg.startswith("-") and option in TORCHRUN_OPTIONS:
        raise SafeSftError(f"{arg} is torchrun's option, which safe-sft replaces", f"use {TORCHRUN_OPTIONS[option]}")


def read(argv: list[str]) -> BackendArgs:
    if not argv:
        raise SafeSftError("no training script given", USAGE)
    if argv[0] in ("-m", "--module"):
        return _read_module(argv)
    script, rest = argv[0], argv[1:]
    if script.startswith("-"):
        check_not_torchruns(script)
        raise SafeSftError(f"{script} where the training script should come first", USAGE)
    path = Path(script)
    if path.is_dir() and not (path / "__main__.py").is_file():  # python runs a folder by its __main__.py
        raise SafeSftError(f"training script {script} is a directory without a __main__.py, not a script", USAGE)
    if not path.is_file() and not path.is_dir():
        exists = path.exists()  # a FIFO or a device: python would block on it, or read no script
        raise SafeSftError(f"training script {script} {'is not a regular file' if exists else 'does not exist'}", USAGE)
    return BackendArgs((str(path.resolve()),), _script_args(rest, script))


def _script_args(rest: list[str], script: str) -> SwiftArgs:
    # a script that reads its arguments from a file (HfArgumentParser.parse_yaml_file): its case is the
    # script's to check, and safe-sft reads neither spelling
    if rest and not rest[0].startswith("-") and rest[0].lower().endswith((".json", ".yaml", ".yml")):
        raise SafeSftError(
            f"{script} {rest[0]}: a script's JSON/YAML argument file is not read by safe-sft yet",
            "pass the script's arguments as --key value on the command line",
        )
    args = parse_swift_argv(rest, None, training_options()).with_defaults(DEFAULTS)
    own = _own_flags(args)
    return replace(args, own_flags=own) if own else args


def _read_module(argv: list[str]) -> BackendArgs:
    """`-m pkg.mod ARGS`, as `torchrun -m` (and `python -m`) runs a module, found from the working directory
    first: its top-level package must be there for every rank's import."""
    import importlib.machinery
    import os
    import sys

    if len(argv) < 2 or argv[1].startswith("-"):
        raise SafeSftError(f"{argv[0]} without a module name", "use it as `safe-sft torchrun -- -m pkg.module ARGS`")
    module, rest = argv[1], argv[2:]
    top = module.split(".")[0]
    if importlib.machinery.PathFinder.find_spec(top, [os.getcwd(), *sys.path[1:]]) is None and (
        top not in sys.builtin_module_names
    ):
        raise SafeSftError(
            f"module {module}: no package {top} in {os.getcwd()} or on this Python's path, which every rank imports",
            "run safe-sft from the folder that holds it, or install it (pip install -e .)",
        )
    return BackendArgs(("-m", module), _script_args(rest, f"-m {module}"))


HF_TRAINER = Backend(
    name="torchrun",
    command="safe-sft torchrun",
    worker=WORKER_DIR / "hf_worker.py",
    read=read,
    missing=frozenset({"max_length", "image_budget", "device_map", "resume_only_model", "add_version"}),
    model_key="model_name_or_path",
    dataset_key=None,  # a script's data arguments are its own
    checked_data_keys=(),
    device_map=False,
    resumes_as_told=False,
    assumed="what the script trains is its own code's: planned as a full fine-tune (every parameter with "
    "gradients and optimizer states), an upper bound for a script that trains adapters",
    own_parser=True,
    writes_args_json=False,
)
