"""What torchrun starts in every rank: swift's `sft` entry point under torchelastic's `@record`.

`@record` writes the rank's exception to TORCHELASTIC_ERROR_FILE (error.json), so torchrun's summary
and safe-sft's classifier get the real traceback of every failed rank. This file runs in the training
processes only; the launcher never imports it.
"""

import ctypes
import os
import runpy
import signal
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """torchrun starts workers in their own sessions: tie each to torchrun's life instead."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # torchrun died before the prctl took effect
        sys.exit(1)


def install_notice_callback() -> None:
    """Checkpoint on notice (launcher/worker_notice.py): every rank saves the step it agrees on, then stops."""
    import importlib.util

    # run as a script: its sibling is loaded by path, so the launcher package need not be importable here
    spec = importlib.util.spec_from_file_location(
        "safe_sft_worker_notice", Path(__file__).with_name("worker_notice.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()


@record
def main() -> None:
    runpy.run_module("swift.cli.sft", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    die_with_parent()
    install_notice_callback()
    main()
