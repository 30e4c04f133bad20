"""What safe-sft's worker sets in a script's real TrainingArguments and Trainer (transformers as installed):
the first TrainingArguments and the first Trainer get what safe-sft chose, a second stage's stay the script's.
Each case runs in a process of its own, as a rank does: the worker patches transformers' classes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.stack.conftest import REPO

SCRIPT = """
import json, sys
sys.path.insert(0, {repo!r})
import launcher.hf_worker as worker
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

told = []
Trainer.train = lambda self, resume_from_checkpoint=None, **kw: told.append(resume_from_checkpoint)  # no training
worker.patch_training_arguments()  # as the worker does before the script runs
model = AutoModelForCausalLM.from_pretrained({model!r})
first = TrainingArguments(output_dir={out!r} + "/stage1", per_device_train_batch_size=4, use_cpu=True, report_to=[])
second = TrainingArguments(output_dir={out!r} + "/stage2", per_device_train_batch_size=4, use_cpu=True, report_to=[])
at_build = (first.per_device_train_batch_size, second.per_device_train_batch_size)
first.per_device_train_batch_size = 16  # the script's own value, set after building: safe-sft's wins
stage1 = Trainer(model=model, args=first)
stage2 = Trainer(model=model, args=second)
stage1.train()
stage2.train()
print(json.dumps({{
    "at_build": at_build,
    "stage1": [stage1.args.per_device_train_batch_size, stage1.args.output_dir],
    "stage2": [stage2.args.per_device_train_batch_size, stage2.args.output_dir],
    "told": told,
}}))
"""


def test_the_first_stage_gets_what_safe_sft_chose_and_a_second_stage_keeps_its_own(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """A script with two TrainingArguments and two Trainers (stage 1, then stage 2): both had been given stage
    1's fresh output dir and resume point, and stage 2 saved over stage 1's checkpoint (hostile44tr F1). A batch
    the script set after building its TrainingArguments had kept the ladder's change from the trainer (F4)."""
    fresh, resume = str(tmp_path / "stage1" / "v2-run"), str(tmp_path / "stage1" / "checkpoint-2")
    chosen = {"per_device_train_batch_size": 2, "output_dir": fresh, "resume_from_checkpoint": resume}
    code = SCRIPT.format(repo=str(REPO), model=str(tiny["model"]), out=str(tmp_path))
    env = {**os.environ, "SAFE_SFT_TRAINING_ARGS": json.dumps(chosen)}  # one process, no torchrun
    env.pop("SAFE_SFT_RESOLVED_ARGS", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["at_build"] == [2, 4]  # the first TrainingArguments built, before transformers reads it
    assert seen["stage1"] == [2, fresh]  # set again on the first Trainer's arguments
    assert seen["stage2"] == [4, str(tmp_path / "stage2")]  # the second stage's own
    assert seen["told"] == [resume, None]  # the first Trainer's train() resumes; the second's is the script's
