"""A swift callback for scripts/bench_gpu_peaks.py: each step's torch allocator peaks, as JSON lines.

    swift sft ... --external_plugins scripts/peak_memory_plugin.py --callbacks safe_sft_peaks

Appends {"rank", "step", "allocated", "reserved"} (bytes: torch.cuda.max_memory_allocated and
max_memory_reserved since the start) to $SAFE_SFT_PEAKS_FILE after every step, so a run's measured peak can
be split into what its tensors held and what the caching allocator kept beside them. Does nothing without
CUDA or without the variable.
"""

from __future__ import annotations

import json
import os

import torch
from swift.callbacks import callbacks_map
from swift.callbacks.base import TrainerCallback


class PeakMemoryCallback(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        path = os.environ.get("SAFE_SFT_PEAKS_FILE")
        if not path or not torch.cuda.is_available():
            return
        record = {
            "rank": int(os.environ.get("RANK", "0")),
            "step": state.global_step,
            "allocated": torch.cuda.max_memory_allocated(),
            "reserved": torch.cuda.max_memory_reserved(),
        }
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")


callbacks_map["safe_sft_peaks"] = PeakMemoryCallback
