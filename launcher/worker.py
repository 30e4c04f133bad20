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


@record
def main() -> None:
    runpy.run_module("swift.cli.sft", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    die_with_parent()
    main()
