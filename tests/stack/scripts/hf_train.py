"""A small real HF-Trainer training script, as a vendor's finetune.py is: HfArgumentParser over its own
dataclass and transformers' TrainingArguments, a causal LM on chat rows, `trainer.train(resume_from_
checkpoint=...)`. Run by tests/stack/test_backend_hf_real.py under `safe-sft torchrun` and plain torchrun.

    train.py --model_name_or_path DIR --data_path rows.jsonl --output_dir OUT [TrainingArguments...]

Faults and sample records come from tests/stack/hf_rank_hooks (sitecustomize, on PYTHONPATH), as for any
HF-Trainer program: this script is the user's, and knows nothing of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint


@dataclass
class ScriptArguments:
    model_name_or_path: str
    data_path: str
    model_max_length: int = 128
    # many users' scripts call a bare trainer.train(): --resume_from_checkpoint parses, and is ignored
    ignore_resume: bool = False
    # recipes that build the output dir in code, after parsing (from the model's name, a timestamp)
    output_dir_in_code: str = ""
    # recipes with a Trainer subclass whose train DataLoader batches by a value of their own
    own_loader_batch: int = 0
    # run_clm.py's auto-resume: train from get_last_checkpoint(output_dir), where it finds one
    resume_last: bool = False


class OwnLoaderTrainer(Trainer):
    batch = 0

    def get_train_dataloader(self):  # type: ignore[no-untyped-def]
        loader = torch.utils.data.DataLoader(
            self.train_dataset, batch_size=self.batch, shuffle=False, collate_fn=self.data_collator
        )
        return self.accelerator.prepare(loader)


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
    if script.output_dir_in_code:
        training.output_dir = script.output_dir_in_code
    tokenizer = AutoTokenizer.from_pretrained(script.model_name_or_path)
    model = AutoModelForCausalLM.from_pretrained(script.model_name_or_path)
    OwnLoaderTrainer.batch = script.own_loader_batch
    trainer = (OwnLoaderTrainer if script.own_loader_batch else Trainer)(
        model=model,
        args=training,
        train_dataset=ChatRows(script.data_path, tokenizer, script.model_max_length),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )
    resume = None if script.ignore_resume else training.resume_from_checkpoint
    if script.resume_last and resume is None:
        resume = get_last_checkpoint(training.output_dir)
    trainer.train(resume_from_checkpoint=resume)


if __name__ == "__main__":
    main()
