#!/usr/bin/env python3
"""Make a tiny Qwen2-architecture model, its tokenizer, and a chat dataset, locally (no hub).

    python scripts/make_tiny_model.py OUT_DIR [--rows 64]

Writes OUT_DIR/model/ (config.json, model.safetensors, tokenizer files with a ChatML template) and
OUT_DIR/data.jsonl ({"messages": [...]} rows). Random weights: it trains, it does not learn anything.
Deterministic for a given seed, so tests can rely on the parameter count.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi rho sigma tau").split()  # noqa: SIM905


def make_rows(count: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 24)))
        rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]})
    return rows


def make_tokenizer(model_dir: Path, corpus: list[str]) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHATML
    fast.save_pretrained(model_dir)
    return len(fast)


def make_model(model_dir: Path, vocab_size: int, seed: int) -> int:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(model_dir, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model_dir = args.out_dir / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    rows = make_rows(args.rows, args.seed)
    corpus = [m["content"] for row in rows for m in row["messages"]]  # type: ignore[index]
    vocab = make_tokenizer(model_dir, corpus)
    params = make_model(model_dir, vocab, args.seed)
    with (args.out_dir / "data.jsonl").open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    print(json.dumps({"model": str(model_dir), "dataset": str(args.out_dir / "data.jsonl"), "params": params}))


if __name__ == "__main__":
    main()
