"""What torchrun starts in every rank: swift's `sft` entry point under torchelastic's `@record`.

`@record` writes the rank's exception to TORCHELASTIC_ERROR_FILE (error.json), so torchrun's summary
and safe-sft's classifier get the real traceback of every failed rank. On a full disk that file is left
empty or cut, and torchrun's agent stops on parsing it with a JSONDecodeError traceback of its own over
the rank's: `record` here removes such a file (torchrun then says `error_file: <N/A>`).

Once swift has parsed its arguments, local rank 0 writes the values safe-sft needs, as swift resolved
them (the output dir and the versioned run dir it writes, batch sizes, world size, save strategy,
resume flags), to the JSON file named by SAFE_SFT_RESOLVED_ARGS (launcher/run/resolved.py reads it).

When the training entry returns, every rank writes `finished-rank-<RANK>` into the attempt folder
(SAFE_SFT_NOTICE_DIR) and then releases its process group, as LLaMA-Factory does at its end: a gloo
group left to the interpreter's exit can abort the process there ("terminate called without an active
exception"). The marker tells safe-sft that a rank dying after it died after its training was done.
So safe-sft never re-derives swift's naming rules. The hook wraps swift's own argument parsing when
swift's pipeline module is first imported: importing swift here, before swift.cli.sft runs, would come
before its device and unsloth set-up that must precede torch and transformers.

This file runs in the training processes only; the launcher never imports it.
"""

import contextlib
import functools
import importlib.util
import json
import os
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _sibling(name: str) -> Any:
    """A module beside this file, loaded by path: run as a script, the launcher package need not be
    importable here, nor this folder be on sys.path (PYTHONSAFEPATH=1 leaves it off)."""
    spec = importlib.util.spec_from_file_location(f"safe_sft_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":  # before torch's import, which takes seconds: launcher/worker_tie.py says why
    _sibling("worker_tie").tie_to_torchrun()

from torch.distributed.elastic.multiprocessing.errors import record as torch_record  # noqa: E402 (after the tie)

RESOLVED_ENV = "SAFE_SFT_RESOLVED_ARGS"
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"  # torchrun names each rank's own
PIPELINE_MODULE = "swift.pipelines.base"  # defines SwiftPipeline._parse_args, which SwiftSft inherits


def _plain(value: Any) -> Any:
    """A JSON value: enums by their value, dicts and lists as they are, anything else as text."""
    value = getattr(value, "value", value)
    if value is None or isinstance(value, bool | int | float | str | dict | list):
        return value
    return str(value)


def resolved_args(args: Any) -> dict[str, Any]:
    """What safe-sft needs of swift's parsed arguments (the trainer's own copy where it has one)."""
    training = getattr(args, "training_args", None)

    def field(name: str) -> Any:
        if training is not None and hasattr(training, name):
            return _plain(getattr(training, name))
        return _plain(getattr(args, name, None))

    run_dir = field("output_dir")
    add_version = bool(getattr(args, "add_version", False))
    return {
        "output_dir": os.path.dirname(run_dir) if add_version and run_dir else run_dir,
        "run_dir": run_dir,
        "add_version": add_version,
        "world_size": _plain(getattr(args, "global_world_size", None)),
        **{
            name: field(name)
            for name in (
                "per_device_train_batch_size",
                "per_device_eval_batch_size",
                "gradient_accumulation_steps",
                "save_strategy",
                "save_steps",
                "save_only_model",
                "eval_strategy",
                "eval_steps",
                "resume_from_checkpoint",
                "max_length",
                "ddp_timeout",
            )
        },
        "resume_only_model": bool(getattr(args, "resume_only_model", False)),
        "deepspeed": _plain(getattr(args, "deepspeed", None)),
    }


def write_resolved(args: Any) -> None:
    path = os.environ.get(RESOLVED_ENV)
    if not path or os.environ.get("LOCAL_RANK", "0") != "0":
        return
    _sibling("worker_notice").write_record(Path(path), resolved_args(args), indent=1)


def _wrap_parse_args(module: Any) -> None:
    pipeline = module.SwiftPipeline
    parse = pipeline._parse_args

    def parse_and_report(self: Any, *a: Any, **kw: Any) -> Any:
        args = parse(self, *a, **kw)
        write_resolved(args)
        gloo = _sibling("worker_gloo")  # ZeRO-3 on the CPU: before swift builds the model
        gloo.gloo_before_zero3_on_cpu(getattr(args, "use_cpu", False), getattr(args, "deepspeed", None))
        return args

    pipeline._parse_args = parse_and_report


def drop_unreadable_error_file() -> None:
    """Remove this rank's error file where it does not parse: written on a full disk, it is empty or cut."""
    path = os.environ.get(ERROR_FILE_ENV)
    if not path:
        return
    try:
        with open(path, encoding="utf-8") as handle:
            json.load(handle)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError: a file torchrun's agent would stop on
        with contextlib.suppress(OSError):
            os.unlink(path)
    except OSError:  # none written (the rank exited cleanly), or unreadable: torchrun reads nothing either
        pass


def record(main: Callable[[], None]) -> Callable[[], None]:
    """torchelastic's `@record`, minus the error file a full disk leaves behind it."""
    recorded = torch_record(main)

    @functools.wraps(main)
    def wrapper() -> None:
        try:
            recorded()
        except BaseException:
            drop_unreadable_error_file()
            raise

    return wrapper


FINISHED_MARK = "finished-rank-{rank}"  # launcher/run/evidence.py ranks_finished reads these


def training_returned() -> None:
    """This rank's training entry returned: mark it, then release the process group."""
    folder = os.environ.get("SAFE_SFT_NOTICE_DIR")
    if folder:
        Path(folder, FINISHED_MARK.format(rank=os.environ.get("RANK", "0"))).touch()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as err:  # the training is done and saved: a failed clean-up is said, not raised
            sys.stderr.write(f"safe-sft worker: releasing the process group failed: {err}\n")


def run_training(run: Any) -> None:
    """Run the training entry; mark its return, a `sys.exit(0)` at its end included."""
    try:
        run()
    except SystemExit as exit_:
        if exit_.code in (0, None):
            training_returned()
        raise
    training_returned()


def script_folder_first(folder: str) -> None:
    """sys.path[0] as the command the user's trainer runs sets it (`python SCRIPT`: the script's folder;
    `python -m MODULE`: the working directory) in place of this worker's folder, whose modules (model.py,
    errors.py) must not answer the trainer's imports; under PYTHONSAFEPATH Python puts none there."""
    if not sys.flags.safe_path:
        sys.path[0] = folder


def install_notice_callback() -> None:
    """Checkpoint on notice (launcher/worker_notice.py): every rank saves the step it agrees on, then stops."""
    _sibling("worker_notice").install()


@record
def main() -> None:
    if os.environ.get(RESOLVED_ENV):
        _sibling("after_import").after_import(PIPELINE_MODULE, _wrap_parse_args)
    swift = importlib.util.find_spec("swift")  # found, not imported: the hook above waits for its import
    if swift is not None and swift.submodule_search_locations:  # `torchrun swift/cli/sft.py`, as swift runs it
        script_folder_first(os.path.join(next(iter(swift.submodule_search_locations)), "cli"))
    run_training(lambda: runpy.run_module("swift.cli.sft", run_name="__main__", alter_sys=True))


if __name__ == "__main__":
    install_notice_callback()
    main()
