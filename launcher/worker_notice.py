"""Checkpoint on notice, inside every training rank: a transformers TrainerCallback that, at the end of
each optimizer step, asks every rank whether a notice came (a SIGUSR1 to this rank, or the file safe-sft
writes into the attempt folder) and, if any rank says yes, has all of them save a checkpoint at that same
step and stop training. The agreement is one all-reduce (MAX) of a single integer per step, so every rank
saves the same step.

Contract with the supervisor (launcher/run/notice.py), all files in $SAFE_SFT_NOTICE_DIR:
  notice         safe-sft writes it when it gets the notice; ranks look for it at every step end.
  stopping.json  local rank 0 writes {"step": N} when the ranks agreed to stop at step N.
  timing.json    local rank 0 writes {"save_s", "step_s", "step"} after each checkpoint: the last save's and the
                 last plain step's durations, from which safe-sft decides whether a SIGTERM can checkpoint.
Runs in the training processes only; the launcher never imports this module.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

NOTICE_DIR_ENV = "SAFE_SFT_NOTICE_DIR"

_signalled = False


def _on_usr1(_signum: int, _frame: object) -> None:
    global _signalled
    _signalled = True


def write_record(path: Path, data: dict[str, Any], indent: int | None = None) -> None:
    """safe-sft's record, written whole (a reader never sees half a file); where it cannot be (a full or
    read-only records folder), training goes on: a bookkeeping file of safe-sft's had raised in every rank's
    on_save, and the worker's swift-args.json in rank 0, and ended runs swift would finish."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=indent))
        os.replace(tmp, path)
    except OSError as err:
        cannot_write(path, err)


_warned: set[str] = set()


def cannot_write(path: Path, err: OSError) -> None:
    """One line a file, on stderr: what safe-sft could not record, and that training goes on."""
    if path.name not in _warned:
        _warned.add(path.name)
        print(
            f"safe-sft: could not write {path} ({err.strerror or err}): training goes on", file=sys.stderr, flush=True
        )


def _any_rank(flag: bool, device: Any) -> bool:
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    value = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def make_callback(folder: Path) -> type:
    from transformers import TrainerCallback

    class NoticeCallback(TrainerCallback):
        def __init__(self) -> None:
            self.last_end: float | None = None
            self.step_s: float | None = None
            self.save_started: float | None = None

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            now = time.monotonic()
            if self.last_end is not None:
                self.step_s = now - self.last_end
            self.last_end = now
            if _any_rank(_signalled or (folder / "notice").exists(), args.device):
                control.should_save = True
                control.should_training_stop = True
                if state.is_local_process_zero:
                    write_record(folder / "stopping.json", {"step": state.global_step})
            self.save_started = now if control.should_save else None
            return control

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            now = time.monotonic()
            if self.save_started is not None and state.is_local_process_zero:
                timing = {"save_s": round(now - self.save_started, 3), "step_s": self.step_s, "step": state.global_step}
                write_record(folder / "timing.json", timing)
            self.last_end = now  # the next step's duration leaves the save out
            return control

    return NoticeCallback


def install() -> None:
    """Under safe-sft (SAFE_SFT_NOTICE_DIR set): catch SIGUSR1 and add the callback to every Trainer."""
    folder = os.environ.get(NOTICE_DIR_ENV)
    if not folder:
        return
    signal.signal(signal.SIGUSR1, _on_usr1)
    import transformers

    callback = make_callback(Path(folder))
    original = transformers.Trainer.__init__

    # swift replaces transformers' DEFAULT_CALLBACKS list when it loads, so the callback joins each trainer
    # as it is built, last: after the flow callback that sets should_save for save_steps
    @functools.wraps(original)
    def init_with_notice(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.add_callback(callback)

    transformers.Trainer.__init__ = init_with_notice  # type: ignore[method-assign]
