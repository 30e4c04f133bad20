"""Slowness for the real-stack tests, loaded into every rank by `--external_plugins`: long phases that
are not hangs. Configured by environment variables:
  SAFE_SFT_SLOW_ROW   seconds swift's dataset preprocessing (its length-adding map) spends on each row
  SAFE_SFT_SLOW_STEP  seconds each training step takes on top (`--callbacks safe_sft_slow`)
  SAFE_SFT_SLOW_EVAL  seconds each evaluation batch takes on top (`--callbacks safe_sft_slow`)
"""

from __future__ import annotations

import os
import time

from swift.callbacks import callbacks_map
from swift.callbacks.base import TrainerCallback
from swift.dataset.utils import AddLengthPreprocessor

ROW_SECONDS = float(os.environ.get("SAFE_SFT_SLOW_ROW", "0"))
STEP_SECONDS = float(os.environ.get("SAFE_SFT_SLOW_STEP", "0"))
EVAL_SECONDS = float(os.environ.get("SAFE_SFT_SLOW_EVAL", "0"))

if ROW_SECONDS > 0:
    _preprocess = AddLengthPreprocessor.preprocess

    def slow_preprocess(self, row):  # type: ignore[no-untyped-def]
        time.sleep(ROW_SECONDS)
        return _preprocess(self, row)

    AddLengthPreprocessor.preprocess = slow_preprocess  # type: ignore[method-assign]


class SlowStep(TrainerCallback):
    def __init__(self, args, trainer) -> None:  # type: ignore[no-untyped-def]
        super().__init__(args, trainer)
        if EVAL_SECONDS > 0:
            original = trainer.prediction_step

            def slow_prediction_step(*a, **kw):  # type: ignore[no-untyped-def]
                time.sleep(EVAL_SECONDS)
                return original(*a, **kw)

            trainer.prediction_step = slow_prediction_step

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if STEP_SECONDS > 0:
            time.sleep(STEP_SECONDS)


callbacks_map["safe_sft_slow"] = SlowStep
