"""A small real HF-Trainer training script, as a vendor's finetune.py is: HfArgumentParser over its own
dataclass and transformers' TrainingArguments, a causal LM on chat rows, `trainer.train(resume_from_
checkpoint=...)`. Run by tests/stack/test_backend_hf_real.py under `safe-sft torchrun` and plain torchrun.

    train.py --model_name_or_path DIR --data_path rows.jsonl --output_dir OUT [TrainingArguments...]

Fault injection and sample records, as tests/stack/plugins/faults.py does them for swift (without swift):
  SAFE_SFT_FAULT         oom_step:STEP:RANK (torch.OutOfMemoryError at the end of that step) or
                         oom_save:STEP:RANK (the same while that step's checkpoint is written, leaving it half-written)
  SAFE_SFT_FAULT_ONCE    a marker file: the fault fires only while it does not exist
  SAFE_SFT_FAULT_RECORD  a folder: samples-rank-N-PID.jsonl, per optimizer step a key for each sample trained on
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    HfArgumentParser,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

OOM_TEXT = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.32 GiB"


@dataclass
class ScriptArguments:
    model_name_or_path: str
    data_path: str
    model_max_length: int = 128


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _fault() -> tuple[str, int, int] | None:
    spec = os.environ.get("SAFE_SFT_FAULT")
    if not spec:
        return None
    kind, step, rank = spec.split(":")
    return kind, int(step), int(rank)


def _claim() -> bool:
    marker = os.environ.get("SAFE_SFT_FAULT_ONCE")
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _sample_keys(batch) -> list[str]:  # type: ignore[no-untyped-def]
    mask = batch.get("attention_mask")
    keys = []
    for index, row in enumerate(batch["input_ids"]):
        tokens = row if mask is None else row[mask[index].bool()]
        keys.append(hashlib.sha1(tokens.cpu().numpy().tobytes()).hexdigest()[:12])
    return keys


def _record_samples(trainer: Trainer) -> None:
    folder = os.environ.get("SAFE_SFT_FAULT_RECORD")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    path = Path(folder) / f"samples-rank-{_rank()}-{os.getpid()}.jsonl"
    original = trainer.get_batch_samples

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        batches, count = original(*args, **kwargs)
        keys = [key for batch in batches for key in _sample_keys(batch)]
        with path.open("a") as handle:
            handle.write(json.dumps({"step": trainer.state.global_step + 1, "samples": keys}) + "\n")
        return batches, count

    trainer.get_batch_samples = recording  # type: ignore[method-assign]


def _inject_faults(trainer: Trainer) -> None:
    fault = _fault()
    if fault is None or fault[2] != _rank():
        return
    kind, at, _ = fault
    if kind == "oom_save":
        original = trainer._save_checkpoint

        def failing_save(model, trial, *a, **kw):  # type: ignore[no-untyped-def]
            step = trainer.state.global_step
            if step == at and _claim():
                folder = Path(trainer.args.output_dir) / f"checkpoint-{step}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "config.json").write_text("{}")  # half-written: no weights, no trainer_state.json
                raise torch.OutOfMemoryError(OOM_TEXT)
            return original(model, trial, *a, **kw)

        trainer._save_checkpoint = failing_save  # type: ignore[method-assign]

    class StepFault(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            if kind == "oom_step" and state.global_step == at and _claim():
                raise torch.OutOfMemoryError(OOM_TEXT)

    trainer.add_callback(StepFault())


class ChatRows(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, path: str, tokenizer, max_length: int) -> None:  # type: ignore[no-untyped-def]
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        texts = [tokenizer.apply_chat_template(row["messages"], tokenize=False) for row in rows]
        self.items = [tokenizer(text, truncation=True, max_length=max_length) for text in texts]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return dict(self.items[index])


def main() -> None:
    parser = HfArgumentParser((ScriptArguments, TrainingArguments))
    script, training = parser.parse_args_into_dataclasses()
    tokenizer = AutoTokenizer.from_pretrained(script.model_name_or_path)
    model = AutoModelForCausalLM.from_pretrained(script.model_name_or_path)
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=ChatRows(script.data_path, tokenizer, script.model_max_length),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )
    _record_samples(trainer)
    _inject_faults(trainer)
    trainer.train(resume_from_checkpoint=training.resume_from_checkpoint)


if __name__ == "__main__":
    main()
