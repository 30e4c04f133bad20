"""Measure what transformers' own model code keeps for the backward, per token, on the CPU.

    python scripts/measure_activations.py

Two figures the memory estimate (launcher/plan/estimate.py) is built on, measured on the real model code
of the transformers this project trains with (random weights, bf16, sdpa attention):

- the bytes one decoder layer saves for the backward per token, without gradient checkpointing: every
  tensor autograd saves (torch.autograd.graph.saved_tensors_hooks), counted once per storage, parameters
  left out; the difference between 2 and 4 layers and between 256 and 512 tokens isolates one layer's
  per-token share. Fitted over three shapes as a·h + b·kv + c·i (h the hidden size, kv the k/v width, i the
  MLP's intermediate size).
- the bytes of the logits per token x vocabulary entry that the loss saves for its backward (exact, as
  above, at two vocabulary sizes). Their peak, in the loss's backward, adds the two fp32 gradients of the
  same shape that log-softmax's backward takes and makes; peak resident memory was tried as a meter of
  the whole and is too coarse (4.8 to 12.3 bytes between runs of the same code), so it is not used.

Saved tensors are what the CUDA kernels save as well (sdpa's flash and memory-efficient kernels keep q, k,
v, the output and the log-sum-exp, as the CPU one does). tests/stack/test_activation_bytes_real.py holds
the estimate's constants to these.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HIDDEN = 256
HEADS = 4
TOKENS = (256, 512)
LAYERS = (2, 4)


@dataclass(frozen=True)
class LayerShape:
    """A decoder layer's widths: hidden, k/v heads (of HEADS), intermediate."""

    hidden: int
    kv_heads: int
    intermediate: int

    @property
    def kv_width(self) -> int:
        return self.hidden * self.kv_heads // HEADS


# The decoder families the estimate's constants are for, and two whose extra norms it does not count yet
# (Qwen3's q/k norms, Gemma-2's sandwich norms and logit soft-capping): measured to show the gap.
MODELLED = ("llama", "qwen2", "mistral")
NOT_MODELLED = ("qwen3", "gemma2")
SHAPES = (LayerShape(HIDDEN, 2, 704), LayerShape(HIDDEN, 2, 1408), LayerShape(HIDDEN, 4, 704))


def _model(model_type: str, shape: LayerShape, layers: int, vocab: int) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        model_type,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_attention_heads=HEADS,
        num_key_value_heads=shape.kv_heads,
        num_hidden_layers=layers,
        vocab_size=vocab,
        max_position_embeddings=8192,
        head_dim=shape.hidden // HEADS,  # Gemma-2's config would default to 256
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.train()
    return model


def _saved_bytes(model: Any, tokens: int) -> int:
    """Bytes autograd saves for the backward in one forward with labels, parameters left out."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: Any) -> Any:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    ids = torch.randint(0, model.config.vocab_size, (1, tokens))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=ids, labels=ids)
    return sum(seen.values())


def layer_bytes_per_token(model_type: str, shape: LayerShape) -> float:
    """One decoder layer's saved bytes per token (no gradient checkpointing)."""
    per_token = []
    for layers in LAYERS:
        model = _model(model_type, shape, layers, vocab=4000)
        short, long = (_saved_bytes(model, tokens) for tokens in TOKENS)
        per_token.append((long - short) / (TOKENS[1] - TOKENS[0]))
    return (per_token[1] - per_token[0]) / (LAYERS[1] - LAYERS[0])


def layer_coefficients(model_type: str) -> tuple[float, float, float]:
    """(a, b, c) of a·h + b·kv + c·i bytes per token, from the three SHAPES."""
    base, wider_mlp, wider_kv = (layer_bytes_per_token(model_type, shape) for shape in SHAPES)
    c = (wider_mlp - base) / (SHAPES[1].intermediate - SHAPES[0].intermediate)
    b = (wider_kv - base) / (SHAPES[2].kv_width - SHAPES[0].kv_width)
    a = (base - b * SHAPES[0].kv_width - c * SHAPES[0].intermediate) / SHAPES[0].hidden
    return a, b, c


def logit_saved_bytes_per_entry(model_type: str, tokens: int = 512, vocabs: tuple[int, int] = (4000, 8000)) -> float:
    """Bytes per token x vocabulary entry the loss saves for its backward (exact: saved tensors)."""
    low, high = (_saved_bytes(_model(model_type, SHAPES[0], 2, vocab), tokens) for vocab in vocabs)
    return (high - low) / (tokens * (vocabs[1] - vocabs[0]))


def main() -> int:
    import transformers

    from launcher.plan import estimate

    print(f"transformers {transformers.__version__}, bf16, sdpa, CPU")
    print()
    print("| model code | per layer and token (bytes) | the estimate | logits saved per token x entry | the estimate |")
    print("| --- | --- | --- | --- | --- |")
    ours = f"{estimate.ATTN_BYTES_PER_HIDDEN} h + {estimate.KV_BYTES_PER_WIDTH} kv + "
    ours += f"{estimate.MLP_BYTES_PER_INTERMEDIATE} i"
    for model_type in MODELLED + NOT_MODELLED:
        a, b, c = layer_coefficients(model_type)
        saved = logit_saved_bytes_per_entry(model_type)
        mark = "" if model_type in MODELLED else " (not modelled)"
        measured = f"{a:.2f} h + {b:.2f} kv + {c:.2f} i"
        logits = f"{estimate.LOGIT_SAVED_BYTES} saved, {estimate.LOGIT_BYTES} at the peak"
        print(f"| {model_type}{mark} | {measured} | {ours} | {saved:.2f} | {logits} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
