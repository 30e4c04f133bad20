"""A decoder's shape as its family's config.json writes it, and its parameter count from that shape.

Contract: pure functions of config.json's (text) mapping and its model_type.
- `mlp_width`, `kv_heads`, `tied_unstated`: what a family means where its keys differ from
  Llama's: Qwen-1's intermediate_size is its two input projections' widths summed (for the count only:
  the estimate's layers take it as written, launcher.probe.model_size); MPT states a ratio;
  GPT-2, BLOOM and Falcon leave the MLP at 4 x hidden unstated; Falcon-7B's multi_query is one k/v head;
  and the families whose transformers config ties the output layer to the embeddings by default.
- `config_params(shape)` gives (all parameters, the largest layer's, the vision tower's): the embeddings
  (and an untied output layer), each layer's attention (q/k/v/o at the heads' widths, GQA included) and MLP
  (gated: three matrices; two otherwise; an MoE layer's routed experts, shared experts and router, after DeepSeek's
  first dense layers), and a vision tower's blocks. An approximation for a folder without weights to
  count: norms, biases and projectors are left out, as are layers of another kind (linear attention).
  Held to real config.json files and their weights' sizes in tests/unit/test_real_model_configs.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# Families whose MLP is up -> activation -> down (two matrices), not gated (three)
NOT_GATED = re.compile(
    r"(gpt2|gpt_neox\w*|gptj|gpt_bigcode|codegen|bloom|falcon|refinedweb\w*|mpt|opt|phi|phi-msft|mixformer\S*|"
    r"starcoder2|persimmon|nemotron)",
    re.IGNORECASE,
)
# transformers' configs of these families tie the output layer to the embeddings when config.json does not
# say (each config class's own default; Falcon's real 7B-180B checkpoints keep a separate lm_head)
TIED_BY_DEFAULT = frozenset(
    {"gemma", "gemma2", "gemma3", "gemma3_text", "gemma4", "gemma4_text", "paligemma", "t5gemma", "bloom",
     "gpt2", "gpt_bigcode", "mpt", "opt", "starcoder2", "cohere", "cohere2", "smollm3"}
)  # fmt: skip


def gated(model_type: str | None) -> bool:
    return not (model_type and NOT_GATED.fullmatch(model_type))


def mlp_width(text: Mapping[str, object], model_type: str | None, hidden: int | None, stated: int | None) -> int | None:
    """One MLP matrix's inner width: config.json's where it means that, else the family's rule."""
    if model_type == "qwen" and stated:
        return stated // 2  # Qwen-1: w1 and w2 are intermediate_size // 2 wide each
    if stated:
        return stated
    ratio = text.get("expansion_ratio")  # MPT
    if hidden and isinstance(ratio, int | float) and not isinstance(ratio, bool) and ratio > 0:
        return int(ratio * hidden)
    return 4 * hidden if hidden and not gated(model_type) else None


def kv_heads(text: Mapping[str, object], stated: int | None) -> int | None:
    """The k/v heads: Falcon-7B's `multi_query: true` is one for all query heads, whatever num_kv_heads says,
    unless its new_decoder_architecture (transformers' FalconAttention); else config.json's."""
    if text.get("multi_query") is True and text.get("new_decoder_architecture") is not True:
        return 1
    return stated


def tied_unstated(model_type: str | None) -> bool:
    return model_type in TIED_BY_DEFAULT


@dataclass(frozen=True)
class ConfigShape:
    hidden: int
    layers: int
    vocab: int
    intermediate: int | None  # one dense MLP matrix's inner width; None for a decoder of MoE layers only
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    tied: bool = False
    gated: bool = True
    num_experts: int | None = None
    moe_intermediate: int | None = None
    shared_intermediate: int | None = None
    dense_layers: int = 0  # DeepSeek's first_k_dense_replace: the first layers keep a dense MLP
    vision_hidden: int | None = None
    vision_layers: int | None = None
    vision_intermediate: int | None = None


def config_params(shape: ConfigShape) -> tuple[int, int, int] | None:
    """(total parameters, the largest layer's parameters, the vision tower's, which --freeze_vit freezes); None
    where the MLP's width is unknown."""
    h = shape.hidden
    moe = bool(shape.num_experts and shape.moe_intermediate)
    if shape.intermediate is None and not moe:
        return None
    if shape.heads:
        head_dim = shape.head_dim or h // shape.heads
        q_width, kv_width = shape.heads * head_dim, (shape.kv_heads or shape.heads) * head_dim
    else:
        q_width = kv_width = h
    attention = 2 * h * q_width + 2 * h * kv_width
    dense = (3 if shape.gated else 2) * h * (shape.intermediate or 0)
    if moe:
        experts = shape.num_experts or 0
        routed = experts * 3 * h * (shape.moe_intermediate or 0) + 3 * h * (shape.shared_intermediate or 0)
        sparse = routed + h * experts  # the router
        dense_layers = min(shape.dense_layers, shape.layers) if shape.intermediate else 0
        mlps = dense_layers * dense + (shape.layers - dense_layers) * sparse
        largest_mlp = max(sparse, dense if dense_layers else 0)
    else:
        mlps, largest_mlp = shape.layers * dense, dense
    embed = shape.vocab * h * (1 if shape.tied else 2)
    vision = 0
    if shape.vision_hidden and shape.vision_layers and shape.vision_intermediate:
        width = shape.vision_hidden
        vision = shape.vision_layers * (4 * width * width + 2 * width * shape.vision_intermediate)
    total = embed + shape.layers * attention + mlps + vision
    return total, max(attention + largest_mlp, shape.vocab * h), vision
