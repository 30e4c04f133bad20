"""A user's training script with a parser of its own (argparse, not HfArgumentParser), as many vendors'
finetune.py are: it takes a few options, refuses any other, and builds its TrainingArguments in code, here
by handing hf_train.py's parser the arguments it chose. It also reports the ddp_timeout its TrainingArguments
got, so a test sees what safe-sft's worker set in it.

    argparse_train.py --model_name_or_path DIR --data_path rows.jsonl --output_dir OUT [--max_steps N] [--out FILE]
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--model_name_or_path", required=True)
parser.add_argument("--data_path", required=True)
parser.add_argument("--output_dir", required=True)
parser.add_argument("--max_steps", type=int, default=4)
parser.add_argument("--out", help="a JSON file the script writes after training (its own, not --output_dir)")
given = parser.parse_args()  # an unknown option (--ddp_timeout) stops the script here, as argparse does

import transformers  # noqa: E402 (after the parser: a refused option fails fast)

built = transformers.TrainingArguments.__post_init__


def report_timeout(self) -> None:  # type: ignore[no-untyped-def]
    built(self)
    Path(given.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(given.output_dir) / "ddp_timeout.txt").write_text(str(self.ddp_timeout))


transformers.TrainingArguments.__post_init__ = report_timeout  # type: ignore[method-assign]
sys.argv = [
    "hf_train.py", "--model_name_or_path", given.model_name_or_path, "--data_path", given.data_path,
    "--output_dir", given.output_dir, "--max_steps", str(given.max_steps), "--save_steps", "2", "--use_cpu", "true",
    "--per_device_train_batch_size", "2", "--report_to", "none", "--dataloader_num_workers", "0",
]  # fmt: skip
runpy.run_path(str(Path(__file__).with_name("hf_train.py")), run_name="__main__")
if given.out:
    Path(given.out).write_text('{"trained": true}')
