#!/usr/bin/env python3
"""Make a tiny Qwen2-architecture model, its tokenizer, and a chat dataset, locally (no hub).

    python scripts/make_tiny_model.py OUT_DIR [--rows 64] [--shape qwen2.5-0.5b] [--answer-words 3000]

Writes OUT_DIR/model/ (config.json, model.safetensors, tokenizer files with a ChatML template) and
OUT_DIR/data.jsonl ({"messages": [...]} rows). Random weights: it trains, it does not learn anything.
Deterministic for a given seed, so tests can rely on the parameter count. `--shape qwen2.5-0.5b` gives
Qwen2.5-0.5B's real dimensions (its config.json: 494M parameters, a 151,936 vocabulary, tied embeddings)
in bfloat16, for measuring memory on a GPU; `--answer-words` makes every answer that long, so each sample
reaches a chosen --max_length (the 512-token vocabulary spells each word as about one token).
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


# the dimensions of a model's config.json; "tiny" is the default, small enough to train on a CPU in seconds
SHAPES: dict[str, dict[str, object]] = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    },
    "qwen2.5-0.5b": {  # Qwen/Qwen2.5-0.5B's config.json
        "vocab_size": 151936,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    },
}


def make_rows(count: int, seed: int, answer_words: int | None = None) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        words = answer_words or rng.randint(3, 24)
        answer = " ".join(rng.choice(WORDS) for _ in range(words))
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


def make_model(model_dir: Path, vocab_size: int, seed: int, shape: str = "tiny") -> int:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    dims = {"vocab_size": vocab_size, **SHAPES[shape]}  # a real shape keeps its own (larger) vocabulary
    config = Qwen2Config(**dims)
    model = Qwen2ForCausalLM(config)
    if dims["torch_dtype"] == "bfloat16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(model_dir, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--answer-words", type=int, help="every answer this many words (default: 3 to 24)")
    args = parser.parse_args()
    model_dir = args.out_dir / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    rows = make_rows(args.rows, args.seed, args.answer_words)
    corpus = [m["content"] for row in rows for m in row["messages"]]  # type: ignore[index]
    vocab = make_tokenizer(model_dir, corpus)
    params = make_model(model_dir, vocab, args.seed, args.shape)
    with (args.out_dir / "data.jsonl").open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    print(json.dumps({"model": str(model_dir), "dataset": str(args.out_dir / "data.jsonl"), "params": params}))


if __name__ == "__main__":
    main()
