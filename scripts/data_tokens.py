"""A dataset's tokens per row as safe-sft estimates them and as swift really encodes them.

A library for scripts/bench_data_lengths.py and tests/stack/test_data_lengths_real.py:

- `estimated(path, wide, template)`: safe-sft's reading (launcher.probe.dataset sampling the file, then
  launcher.plan.data_lengths.row_tokens, characters by script, no tokenizer, and the template's default
  system prompt where a row has none), rows whose length it estimates;
- `Encoder(tokenizer_dir, template)`: swift's own reading: `swift.dataset.load_dataset` (its
  preprocessors, as `swift sft --dataset FILE` runs them) and the template's `encode` in train mode with a
  real tokenizer, no max_length; `encoder.lengths(path)` gives each row's input_ids length and the rows
  swift could not encode;
- `compare(estimated, real)`: the estimate / real ratio at the 50th, 95th and 100th percentile.

The model folder swift loads is a tiny decoder's config.json beside the real tokenizer's files (no weights
are read: swift's processor loads the tokenizer alone).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.backends.swift_models import swift_models  # noqa: E402
from launcher.plan.data_lengths import TOKENS_PER_CHAR, row_tokens, system_tokens  # noqa: E402
from launcher.probe.dataset import probe_dataset  # noqa: E402

# A tiny decoder's config.json: swift's processor reads it to pick the loader; no weights are loaded
MODEL_CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
                "num_key_value_heads": 1, "vocab_size": 152_064, "max_position_embeddings": 512,
                "torch_dtype": "float32"}  # fmt: skip
PERCENTILES = (50, 95, 100)
ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}


@dataclass(frozen=True)
class Lengths:
    rows: int  # rows read (safe-sft: in the file; swift: after its preprocessors)
    lengths: tuple[int, ...]  # tokens of each row whose length is known
    dropped: int = 0  # rows safe-sft found malformed, or swift could not encode


def estimated(path: Path, wide: float = TOKENS_PER_CHAR["wide"], template: str | None = None) -> Lengths:
    """safe-sft's estimate; `wide` is what launcher.plan.data_lengths.wide_char_tokens gives the model, and
    `template` the swift template whose default system prompt a row without its own gets (None: not known)."""
    sample = probe_dataset(str(path.resolve()), path.resolve().parent)
    system = system_tokens(swift_models().system_chars.get(template) if template else None, wide)
    lengths = tuple(n for row in sample.rows if (n := row_tokens(row, 0, wide, system)) is not None)
    return Lengths(rows=sample.rows_in_file or 0, lengths=lengths, dropped=sample.malformed)


def percentile(values: tuple[int, ...], p: int) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def compare(guess: Lengths, real: Lengths) -> dict[int, float]:
    """estimate / real at each of PERCENTILES (each side's own percentile)."""
    return {p: percentile(guess.lengths, p) / percentile(real.lengths, p) for p in PERCENTILES}


class Encoder:
    """swift's dataset loading and template encoding with a real tokenizer."""

    def __init__(self, tokenizer_dir: Path, template: str, model_type: str = "qwen2") -> None:
        from swift.model import get_processor
        from swift.template import get_template

        self._folder = Path(tempfile.mkdtemp(prefix="safe-sft-tokenizer-"))
        # the config's family picks the tokenizer class where tokenizer_config.json leaves it open
        config = {**MODEL_CONFIG, "model_type": model_type, "architectures": [ARCHITECTURES[model_type]]}
        (self._folder / "config.json").write_text(json.dumps(config))
        for file in tokenizer_dir.iterdir():
            if file.is_file() and file.name != "config.json":
                shutil.copy(file, self._folder / file.name)
        processor = get_processor(str(self._folder), model_type=model_type)
        # no truncation: max_length would default to the tiny config's 512 positions
        self.template = get_template(processor, template_type=template, max_length=1 << 30, agent_template="hermes")
        self.template.set_mode("train")

    def lengths(self, path: Path) -> Lengths:
        from swift.dataset import load_dataset

        dataset, _ = load_dataset([str(path)], num_proc=1, load_from_cache_file=False)
        lengths: list[int] = []
        dropped = 0
        for row in dataset:
            try:
                lengths.append(len(self._encode(row)["input_ids"]))
            except Exception:  # a row swift's EncodePreprocessor would drop with a warning
                dropped += 1
        return Lengths(rows=len(dataset), lengths=tuple(lengths), dropped=dropped)

    def _encode(self, row: dict[str, Any]) -> dict[str, Any]:
        return dict(self.template.encode(row))

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)
