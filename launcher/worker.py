"""What torchrun starts in every rank: swift's `sft` entry point under torchelastic's `@record`.

`@record` writes the rank's exception to TORCHELASTIC_ERROR_FILE (error.json), so torchrun's summary
and safe-sft's classifier get the real traceback of every failed rank. This file runs in the training
processes only; the launcher never imports it.
"""

import runpy

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    runpy.run_module("swift.cli.sft", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
