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
  first dense layers), a hybrid decoder's linear-attention layers (Qwen3-Next's and Qwen3.5's Gated
  DeltaNet, `linear_mixer`) and a gated attention's doubled q projection, and a vision tower's blocks; a
  classifier's or reward model's scoring head (`vocab_head`) adds no vocabulary-wide output layer. An
  approximation for a folder without weights to count: norms, biases and projectors are left out, and so
  are multi-token-prediction layers (`mtp_num_hidden_layers`), which transformers does not load.
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


# transformers' head classes that score a sequence or its tokens (a classifier, a reward or value model):
# a few outputs per position, where a causal LM's head spans the vocabulary
_SCORING_HEAD = re.compile(r"For(?:Sequence|Token)Classification$|RewardModel$|ValueHead$|ForReward\w*$")


def vocab_head(architectures: object) -> bool:
    """Whether config.json's architectures end in an output layer over the vocabulary (True if unsaid)."""
    if not isinstance(architectures, (list, tuple)) or not architectures:
        return True
    return not all(isinstance(name, str) and _SCORING_HEAD.search(name) for name in architectures)


def _positive(text: Mapping[str, object], key: str) -> int | None:
    value = text.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def linear_mixer(text: Mapping[str, object], hidden: int, layers: int) -> tuple[int, int]:
    """(how many layers, one layer's token-mixer parameters) of a hybrid decoder's Gated DeltaNet layers, as
    transformers builds them (Qwen3-Next, Qwen3.5): layer_types names them, or every layer but each
    full_attention_interval-th; the q/k/v, z, b and a input projections, a depthwise conv over q/k/v, the
    output projection, and the per-head decay and norm. (0, 0) for a decoder without them."""
    key_heads, key_dim = _positive(text, "linear_num_key_heads"), _positive(text, "linear_key_head_dim")
    value_heads, value_dim = _positive(text, "linear_num_value_heads"), _positive(text, "linear_value_head_dim")
    if not (key_heads and key_dim and value_heads and value_dim):
        return 0, 0
    types = text.get("layer_types")
    interval = _positive(text, "full_attention_interval")
    if isinstance(types, list):
        count = sum(1 for kind in types[:layers] if kind == "linear_attention")
    elif interval:
        count = sum(1 for i in range(layers) if (i + 1) % interval)
    else:
        return 0, 0
    keys, values = key_heads * key_dim, value_heads * value_dim
    conv = 2 * keys + values  # the q, k and v channels the conv runs over
    kernel = _positive(text, "linear_conv_kernel_dim") or 4
    per_layer = hidden * conv + hidden * values + 2 * hidden * value_heads + conv * kernel + values * hidden
    return count, per_layer + 2 * value_heads + value_dim


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
    linear_layers: int = 0  # of `layers`, those whose token mixer is linear attention (Gated DeltaNet)
    linear_mixer: int = 0  # one such layer's token-mixer parameters (linear_mixer)
    q_gate: bool = False  # attn_output_gate: the q projection also makes the output gate (twice as wide)
    vocab_head: bool = True  # an output layer over the vocabulary; a classifier's or reward model's head is not
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
    attention = h * q_width * (2 if shape.q_gate else 1) + h * q_width + 2 * h * kv_width
    linear_layers = min(shape.linear_layers, shape.layers)
    mixers = (shape.layers - linear_layers) * attention + linear_layers * shape.linear_mixer
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
    embed = shape.vocab * h * (1 if shape.tied or not shape.vocab_head else 2)
    vision = 0
    if shape.vision_hidden and shape.vision_layers and shape.vision_intermediate:
        width = shape.vision_hidden
        vision = shape.vision_layers * (4 * width * width + 2 * width * shape.vision_intermediate)
    total = embed + mixers + mlps + vision
    mixer = max(attention, shape.linear_mixer if linear_layers else 0)
    return total, max(mixer + largest_mlp, shape.vocab * h), vision
