"""What one decoder layer and the loss save for the backward, per token, by model family: measured.

Contract: pure data and one lookup. `layer_bytes(model_type)` gives the family's `LayerBytes` for
config.json's `model_type` (a multimodal or MoE model takes its text decoder's family); a model type not
measured gets Llama's, the most common decoder layout. launcher/plan/estimate.py multiplies the widths in.

Every figure is what transformers' own model code (5.19, the version ms-swift installs) saves, counted by
scripts/measure_activations.py with saved-tensor hooks on tiny random-weight models in bf16 with sdpa
attention: per decoder layer and token, a·h + q·(heads x head_dim) + kv·(kv_heads x head_dim) + m·i, fitted
over four layer shapes (one varies the MLP, one the k/v heads, one the head size); and the bytes per
token x vocabulary entry the loss saves. tests/stack/test_activation_bytes_real.py measures every entry
again and fails when the code saves something else. Parameters are not counted (they are weights).

Why the families differ: an RMSNorm saves fp32 copies of its input and output (Llama has two norms per
layer; Gemma-2, Gemma-3 and GLM-4 add norms after attention and the MLP, the "sandwich" norms, and Gemma's
norms scale by 1 + weight in fp32, one more fp32 tensor each); Qwen3, Gemma-3 and OLMo-2 normalise q and
k as well (per head, or over the whole width in OLMo-2), which adds fp32 copies at the q and k/v widths;
Gemma-2 soft-caps the logits, so the loss saves the capped fp32 logits beside the log-softmax (6 bytes);
GPT-NeoX and Phi-2 run attention and MLP in parallel off one LayerNorm, and their MLP is not gated (GeLU:
4 bytes per intermediate entry, Phi-2's gelu_new 10). The table holds what was measured; these are the
reasons read off the model code, not inputs to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LayerBytes:
    """Saved bytes per token in 16-bit weights: per hidden, q-projection, k/v-projection and MLP-intermediate
    width of one decoder layer; and per token x vocabulary entry in the loss."""

    hidden: float
    q: float
    kv: float
    mlp: float
    logit_saved: float = 4

    def per_token(self, hidden: int, q_width: int, kv_width: int, mlp_width: int) -> float:
        return self.hidden * hidden + self.q * q_width + self.kv * kv_width + self.mlp * mlp_width


# model_type -> measured bytes (scripts/measure_activations.py prints this table).
MEASURED: dict[str, LayerBytes] = {
    "llama": LayerBytes(16, 4, 4, 8),
    "mistral": LayerBytes(16, 4, 4, 8),
    "qwen2": LayerBytes(16, 4, 4, 8),
    "granite": LayerBytes(16, 4, 4, 8),
    "qwen3": LayerBytes(16, 10, 10, 8),
    "gemma": LayerBytes(20, 4, 4, 8),
    "gemma2": LayerBytes(36, 4, 4, 8, logit_saved=6),
    "gemma3_text": LayerBytes(36, 12, 12, 8),
    "olmo2": LayerBytes(20, 12, 12, 8),
    "cohere": LayerBytes(14, 4, 4, 8),
    "phi3": LayerBytes(16, 6, 4, 8),
    "glm": LayerBytes(16, 6.5, 4, 8),  # partial rotary
    "glm4": LayerBytes(28, 6.5, 4, 8),
    "starcoder2": LayerBytes(8, 4, 4, 4),
    "phi": LayerBytes(4, 6, 4, 10),
    "gpt_neox": LayerBytes(16, 0, 0, 4),  # q, k, v come out of one fused projection, counted in h
}

# The same layers with their weights frozen, as LoRA leaves its base (measured the same way, the input
# embeddings requiring a gradient as swift's enable_input_require_grads makes them): a frozen linear keeps
# no input for a weight gradient, so the hidden-size terms about halve and a gated MLP keeps 6 bytes per
# intermediate entry (gate, up and the activation) instead of 8.
FROZEN_MEASURED: dict[str, LayerBytes] = {
    "llama": LayerBytes(8, 4, 4, 6),
    "mistral": LayerBytes(8, 4, 4, 6),
    "qwen2": LayerBytes(8, 4, 4, 6),
    "granite": LayerBytes(8, 4, 4, 6),
    "qwen3": LayerBytes(8, 8, 8, 6),
    "gemma": LayerBytes(8, 4, 4, 6),
    "gemma2": LayerBytes(16, 4, 4, 6, logit_saved=6),
    "gemma3_text": LayerBytes(16, 8, 8, 6),
    "olmo2": LayerBytes(8, 8, 8, 6),
    "cohere": LayerBytes(8, 4, 4, 6),
    "phi3": LayerBytes(8, 4, 4, 6),
    "glm": LayerBytes(8, 4.5, 4, 6),
    "glm4": LayerBytes(16, 4.5, 4, 6),
    "starcoder2": LayerBytes(4, 4, 4, 2),
    "phi": LayerBytes(2, 4, 4, 8),
    "gpt_neox": LayerBytes(10, 0, 0, 2),
}

# LoRA's adapters (peft on the same models, measured as a bf16 run trains them: under autocast, as
# accelerate runs single-GPU and DDP training, with dropout as CUDA runs it; DeepSpeed casts the adapters
# to bf16 instead, which keeps the same with dropout on), per token: each adapted linear keeps its own
# 16-bit copy of its input (the cast of peft's fp32 adapter input, or the dropout's output) and, with
# --lora_dropout (swift's 0.05), a 1-byte mask; its rank-wide middle at 16 bits. Without dropout under
# DeepSpeed the linears that read the same input share it (q, k, v), so that case is counted high.
DROPOUT_MASK_BYTES = 1


# DoRA (--use_dora true; peft's DoRA layer): each adapted linear runs its base weight once more on the input
# and scales that output and the adapters' by the trained magnitude over the weight's norm; the products keep
# both outputs at the weights' width for the backward (measured: 4 bytes per output element in bf16).
DORA_OUTPUTS_KEPT = 2


def adapter_bytes_per_token(inputs: Sequence[int], rank: int, weight_bytes: int, dropout: bool) -> float:
    """What LoRA's adapters on one decoder layer keep per token: `inputs` the adapted linears' input widths,
    at the training's `weight_bytes`."""
    per_entry = weight_bytes + (DROPOUT_MASK_BYTES if dropout else 0)
    return float(per_entry * sum(inputs) + len(inputs) * rank * weight_bytes)


# Eager attention, per head x length^2 and layer (scripts/measure_activations.py: eager minus sdpa, its
# length^2 term): transformers' shared eager_attention_forward saves the fp32 softmax for its backward and,
# with 16-bit weights, the 16-bit copy the matmul with v keeps (in fp32 the cast returns the same tensor);
# gpt-oss runs its softmax (over the scores and the sinks) at the weights' width, one copy; Gemma-2
# soft-caps the scores first, and tanh keeps its output at the weights' width. With the config's attention
# dropout above 0, the matmul keeps the dropout's output instead (a new tensor at the weights' width, also
# in fp32) and the dropout its 1-byte mask (CUDA's fused kernel; at p = 0 torch returns its input as is).
SOFTMAX_AT_WEIGHT_WIDTH = frozenset({"gpt_oss"})
SOFTCAPPED_SCORES = frozenset({"gemma2"})


def eager_score_bytes(model_type: str | None, weight_bytes: int, dropout: bool = False) -> int:
    """What one layer's eager attention saves per head x length^2 for a `model_type` model; `dropout`: its
    config drops attention probabilities while training (attention_dropout, attn_pdrop > 0)."""
    softmax = weight_bytes if model_type in SOFTMAX_AT_WEIGHT_WIDTH else 4
    # what the matmul with v keeps: the dropout's output (and its mask), or the softmax cast to the weights'
    # width, or nothing new where the softmax already is at that width
    cast = weight_bytes if weight_bytes != softmax else 0
    into_matmul = weight_bytes + DROPOUT_MASK_BYTES if dropout else cast
    return softmax + into_matmul + (weight_bytes if model_type in SOFTCAPPED_SCORES else 0)


# Model types whose text decoder layer is one measured above: the MoE and multimodal variants keep their
# family's attention and norms (the routed MLP is counted apart, in launcher/plan/estimate.py).
SAME_LAYER_AS: dict[str, str] = {
    "mixtral": "mistral",
    "qwen2_moe": "qwen2",
    "qwen2_vl": "qwen2",
    "qwen2_5_vl": "qwen2",
    "qwen3_moe": "qwen3",
    "qwen3_vl": "qwen3",
    "qwen3_vl_text": "qwen3",
    "qwen3_vl_moe": "qwen3",
    "qwen3_vl_moe_text": "qwen3",
    "gemma3": "gemma3_text",
    "llava": "llama",
    "phimoe": "phi3",
}

DEFAULT = MEASURED["llama"]

# A vision tower's block, per patch: a·vh + m·vi (vh the tower's width, vi its MLP's; its heads attend at
# the full width, so q and k/v fold into a), measured on the towers' own code by
# scripts/measure_activations.py. The Qwen towers are keyed by the multimodal model's model_type, as
# config.json's vision_config names no type of its own there; the others by the tower's model_type
# (vision_config.model_type), which many multimodal families share. Qwen2-VL: LayerNorm and a quick-GeLU
# MLP; Qwen2.5-VL: RMSNorm (fp32 copies) and a gated SiLU MLP; Qwen3-VL: LayerNorm and a tanh-GeLU MLP;
# CLIP: LayerNorm and a quick-GeLU MLP; SigLIP and Idefics3's: LayerNorm and a tanh-GeLU MLP; InternViT:
# SigLIP's and two layer-scale products; Pixtral: RMSNorm and a gated SiLU MLP, as a Llama layer.
VISION_MEASURED: dict[str, LayerBytes] = {
    "qwen2_vl": LayerBytes(22, 0, 0, 6),
    "qwen2_5_vl": LayerBytes(30, 0, 0, 8),
    "qwen3_vl": LayerBytes(22, 0, 0, 4),
    "clip_vision_model": LayerBytes(16, 0, 0, 6),
    "siglip_vision_model": LayerBytes(16, 0, 0, 4),
    "idefics3_vision": LayerBytes(16, 0, 0, 4),
    "internvl_vision": LayerBytes(20, 0, 0, 4),
    "pixtral": LayerBytes(24, 0, 0, 8),
}
VISION_SAME_AS: dict[str, str] = {
    "qwen3_vl_moe": "qwen3_vl",
    "qwen2_5_omni": "qwen2_5_vl",
    "clip": "clip_vision_model",
    "siglip": "siglip_vision_model",  # MiniCPM-V's remote config names its SigLIP so
    "idefics2_vision": "idefics3_vision",  # Idefics3's blocks are Idefics2's
    "smolvlm_vision": "idefics3_vision",
    "intern_vit_6b": "internvl_vision",  # InternVL's remote InternViT (300M: LayerNorm, layer scale)
}
# An unmeasured tower is counted as a Llama layer at full-width attention (24 vh + 8 vi).
VISION_DEFAULT = LayerBytes(DEFAULT.hidden + DEFAULT.q + DEFAULT.kv, 0, 0, DEFAULT.mlp)


def vision_family(model_type: str | None, tower_type: str | None = None) -> str | None:
    """The VISION_MEASURED key of a multimodal `model_type` model whose vision_config names `tower_type`:
    the model's own where measured, else its tower's; None where neither is."""
    for name in (model_type, tower_type):
        family = VISION_SAME_AS.get(name or "", name or "")
        if family in VISION_MEASURED:
            return family
    return None


def vision_layer_bytes(family: str | None) -> LayerBytes:
    """The measured bytes of a vision tower (a `vision_family` key); a Llama layer's where not measured."""
    return VISION_MEASURED.get(family or "", VISION_DEFAULT)


def family_of(model_type: str | None) -> str | None:
    """The measured family `model_type` belongs to; None where it was not measured."""
    if not model_type:
        return None
    family = SAME_LAYER_AS.get(model_type, model_type)
    return family if family in MEASURED else None


def layer_bytes(model_type: str | None, frozen: bool = False) -> LayerBytes:
    """The measured bytes of the family `model_type` belongs to, trained or with its weights `frozen`;
    Llama's where it was not measured."""
    table = FROZEN_MEASURED if frozen else MEASURED
    return table[family_of(model_type) or "llama"]


def describe(model_type: str | None) -> str:
    """One line for `plan --explain-memory`: whose measured layer the activations are counted as."""
    family = family_of(model_type)
    if family is not None:
        return f"activations: a {family} decoder layer, as measured on transformers' code"
    if model_type:
        return f"activations: model_type {model_type} is not measured, counted as a llama decoder layer"
    return "activations: no config.json model_type, counted as a llama decoder layer"
