"""The estimate's activation and logit bytes held against transformers' own model code (real, on the CPU).

scripts/measure_activations.py counts what autograd saves in a forward of a tiny random-weight model of
each family in launcher/plan/layer_bytes.py (transformers as installed with ms-swift: the code `swift sft`
trains): per decoder layer and token, and per token and vocabulary entry in the loss. The estimate
(launcher/plan/estimate.py) must say the same for every family and shape: a change of transformers that
saves more per token, or of the table, fails here.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from measure_activations import (
    HEADS,
    HIDDEN,
    SHAPES,
    LayerShape,
    Lora,
    Routing,
    eager_scores_bytes,
    logit_saved_bytes_per_entry,
    vision_block_bytes_per_patch,
)
from measure_activations import layer_bytes_per_token as measured_layer

from launcher.plan.estimate import (
    EAGER_BACKWARD_FP32_BYTES,
    LOGIT_GRADIENT_BYTES,
    Adapters,
    TrainShape,
    activation_parts,
    adapter_inputs,
    adapter_outputs,
    all_linears,
    layer_bytes_per_token,
)
from launcher.plan.layer_bytes import (
    FROZEN_MEASURED,
    MEASURED,
    SOFTCAPPED_SCORES,
    SOFTMAX_AT_WEIGHT_WIDTH,
    VISION_MEASURED,
    eager_score_bytes,
    layer_bytes,
    vision_layer_bytes,
)


def shape_of(model_type: str, layer: LayerShape, vocab: int = 4000, routing: Routing | None = None) -> TrainShape:
    moe = routing or Routing(0, 0, 0)
    return TrainShape(
        num_experts=moe.experts or None, experts_per_token=moe.per_token or None,
        moe_intermediate_size=moe.width or None, shared_expert_intermediate_size=moe.shared or None,
        total_params=1, trainable_params=1, largest_layer_params=1, hidden_size=layer.hidden, num_layers=1,
        vocab_size=vocab, micro_batch=1, seq_len=1024, gradient_checkpointing=False, gpus_per_node=1,
        nnodes=1, intermediate_size=layer.intermediate, num_heads=HEADS, num_kv_heads=layer.kv_heads,
        head_dim=layer.head_dim, model_type=model_type,
    )  # fmt: skip


@pytest.mark.parametrize("model_type", sorted(MEASURED))
def test_a_layers_saved_bytes_per_token_are_the_estimates(stack_installed: None, model_type: str) -> None:
    """Each family at every shape (MLP, k/v heads and head size varied): within 2 % of what its code saves."""
    for layer in SHAPES:
        measured = measured_layer(model_type, layer)
        ours = layer_bytes_per_token(shape_of(model_type, layer))
        assert ours == pytest.approx(measured, rel=0.02), (model_type, layer, measured, ours)


@pytest.mark.parametrize("model_type", sorted(FROZEN_MEASURED))
def test_a_frozen_layers_saved_bytes_per_token_are_the_estimates(stack_installed: None, model_type: str) -> None:
    """LoRA's base, its weights frozen (no adapters yet), at every shape: within 2 % of what its code saves."""
    for layer in SHAPES:
        measured = measured_layer(model_type, layer, frozen=True)
        ours = layer_bytes_per_token(replace(shape_of(model_type, layer), adapters=Adapters(())))
        assert ours == pytest.approx(measured, rel=0.02), (model_type, layer, measured, ours)


LORA_CASES = [
    ("llama", Lora()),
    ("llama", Lora(dropout=0.0)),
    ("llama", Lora(targets=("q_proj", "k_proj", "v_proj"))),
    ("llama", Lora(targets=("o_proj", "down_proj"), rank=16)),
    ("qwen3", Lora()),
    ("gemma2", Lora(rank=32)),
    ("llama", Lora(dora=True)),
    ("qwen3", Lora(targets=("q_proj", "v_proj"), dropout=0.0, dora=True)),
    ("phi3", Lora(targets=all_linears("phi3"))),  # fused qkv_proj and gate_up_proj: one adapter each
    ("glm4", Lora(targets=all_linears("glm4"), dora=True)),
]


@pytest.mark.parametrize(("model_type", "lora"), LORA_CASES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(LORA_CASES)])
def test_a_lora_layers_saved_bytes_per_token_are_the_estimates(
    stack_installed: None, model_type: str, lora: Lora
) -> None:
    """peft's adapters on the frozen layer, as a bf16 run trains them (autocast, CUDA's dropout mask): each
    adapted linear keeps a 16-bit copy of its input, a 1-byte mask with dropout and its 16-bit middle, and
    under DoRA two 16-bit copies of its output; the whole layer within 1 %."""
    for layer in (SHAPES[0], SHAPES[3]):
        measured = measured_layer(model_type, layer, lora=lora)
        inputs = adapter_inputs(layer.hidden, layer.q_width, layer.intermediate, lora.targets, model_type)
        outputs = adapter_outputs(
            layer.hidden, layer.q_width, layer.kv_width, layer.intermediate, lora.targets, model_type
        )
        adapters = Adapters(inputs, lora.rank, dropout=lora.dropout > 0, dora_outputs=outputs if lora.dora else 0)
        ours = layer_bytes_per_token(replace(shape_of(model_type, layer), adapters=adapters))
        assert ours == pytest.approx(measured, rel=0.01), (model_type, lora, layer, measured, ours)
    assert set(lora.targets) <= set(all_linears(model_type))


ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
SHARED_EXPERT = tuple(f"shared_expert.{name}" for name in ("gate_proj", "up_proj", "down_proj"))
MOE_LORA_CASES = [
    ("qwen3_moe", Routing(8, 2, 128), Lora(targets=ATTENTION)),  # swift's all-linear: the experts are no linears
    ("mixtral", Routing(8, 2, 704), Lora(targets=ATTENTION)),
    ("qwen2_moe", Routing(8, 2, 128, shared=256), Lora(targets=ATTENTION + SHARED_EXPERT)),
]


@pytest.mark.parametrize(("model_type", "routing", "lora"), MOE_LORA_CASES, ids=[c[0] for c in MOE_LORA_CASES])
def test_a_frozen_moe_layer_with_adapters_is_the_estimate(
    stack_installed: None, model_type: str, routing: Routing, lora: Lora
) -> None:
    """An MoE layer under LoRA: frozen (each routed pair keeps 2h of dispatch copies, not 4h) and with
    adapters on its attention and shared expert, within 3 %."""
    layer = SHAPES[0] if model_type != "mixtral" else LayerShape(SHAPES[0].hidden, 2, routing.width)
    base = shape_of(model_type, layer, routing=routing)
    names = [target.rsplit(".", 1)[-1] for target in lora.targets]
    inputs = adapter_inputs(layer.hidden, layer.q_width, routing.shared or None, names)
    for measured, adapters in (
        (measured_layer(model_type, layer, routing, frozen=True), Adapters(())),
        (measured_layer(model_type, layer, routing, lora=lora), Adapters(inputs, lora.rank)),
    ):
        ours = layer_bytes_per_token(replace(base, adapters=adapters))
        assert ours == pytest.approx(measured, rel=0.03), (model_type, adapters, measured, ours)


@pytest.mark.parametrize("model_type", sorted({"llama", "qwen2", "gemma2"} & set(MEASURED)))
def test_the_loss_saves_what_the_estimate_counts(stack_installed: None, model_type: str) -> None:
    """The saved part of the logits' peak, exactly (Gemma-2's soft-capping saves more); the rest is the
    backward's two fp32 gradients of the same size (the ops' own shapes), at the peak the estimate takes."""
    saved = layer_bytes(model_type).logit_saved
    assert logit_saved_bytes_per_entry(model_type) == pytest.approx(saved, rel=0.01)
    tokens, vocab = 1024, 32000
    ours = activation_parts(shape_of(model_type, SHAPES[0], vocab=vocab))["gpu_logits"] / (tokens * vocab)
    assert ours == saved + LOGIT_GRADIENT_BYTES == saved + 2 * 4


EAGER_TYPES = sorted(MEASURED.keys() | SOFTMAX_AT_WEIGHT_WIDTH | SOFTCAPPED_SCORES)
EAGER_CASES = [(t, "bfloat16", 0.0) for t in EAGER_TYPES] + [
    (t, "float32", 0.0) for t in ("llama", "gemma2", "gpt_oss")
]
EAGER_CASES += [("llama", "bfloat16", 0.1), ("llama", "float32", 0.1), ("gemma2", "bfloat16", 0.1)]  # its dropout


@pytest.mark.parametrize(
    ("model_type", "dtype", "dropout"),
    EAGER_CASES,
    ids=[f"{t}-{d}" + ("-dropout" * (p > 0)) for t, d, p in EAGER_CASES],
)
def test_eager_attentions_saved_bytes_per_score_are_the_estimates(
    stack_installed: None, model_type: str, dtype: str, dropout: float
) -> None:
    """Under eager attention each layer saves per head x length^2 what the estimate counts, exactly: 6 bytes
    in bf16 (the fp32 softmax and its copy), 4 in fp32, gpt-oss's 16-bit softmax one copy, Gemma-2's
    soft-capping one more; with attention dropout the dropout's output and its 1-byte mask in place of the
    copy (7 in bf16, 9 in fp32); and the estimate's scores part is that per layer without checkpointing."""
    weight_bytes = 4 if dtype == "float32" else 2
    ours = eager_score_bytes(model_type, weight_bytes, dropout > 0)
    assert eager_scores_bytes(model_type, dtype, dropout) == pytest.approx(ours, abs=0.01)
    layers, tokens = 3, 1024
    shape = replace(
        shape_of(model_type, SHAPES[0]), eager_attention=True, weight_bytes=weight_bytes, num_layers=layers,
        seq_len=tokens, attention_dropout=dropout > 0,
    )  # fmt: skip
    backward = EAGER_BACKWARD_FP32_BYTES + weight_bytes
    assert activation_parts(shape)["gpu_attention_scores"] == HEADS * tokens**2 * (ours * layers + backward)


# An MoE layer: more experts per token, a wider expert, more experts, shared experts; Mixtral's layout (its
# experts intermediate_size wide), Qwen3-MoE's and Qwen2-MoE's (with shared experts).
ROUTINGS = (Routing(8, 2, 128), Routing(8, 4, 128), Routing(8, 2, 256), Routing(16, 2, 128))
MOE_CASES = [
    ("mixtral", (Routing(8, 2, 704), Routing(8, 4, 704), Routing(16, 2, 704))),
    ("qwen3_moe", ROUTINGS),
    ("qwen2_moe", tuple(Routing(r.experts, r.per_token, r.width, shared=256) for r in ROUTINGS)),
]


@pytest.mark.parametrize(("model_type", "routings"), MOE_CASES, ids=[case[0] for case in MOE_CASES])
def test_an_moe_layers_saved_bytes_per_token_are_the_estimates(
    stack_installed: None, model_type: str, routings: tuple[Routing, ...]
) -> None:
    """Each routed expert a token goes through saves its share of the hidden states and 8 bytes per entry
    of its width; the router 4 bytes per expert; a shared expert as a dense MLP of its width: within 3 %."""
    for routing in routings:
        layer = SHAPES[0] if model_type != "mixtral" else LayerShape(SHAPES[0].hidden, 2, routing.width)
        measured = measured_layer(model_type, layer, routing)
        ours = layer_bytes_per_token(shape_of(model_type, layer, routing=routing))
        assert ours == pytest.approx(measured, rel=0.03), (model_type, routing, measured, ours)


@pytest.mark.parametrize("model_type", sorted(VISION_MEASURED))
def test_a_vision_blocks_saved_bytes_per_patch_are_the_estimates(stack_installed: None, model_type: str) -> None:
    """Each measured vision tower at two MLP widths: a trained block saves what the table says per patch,
    within 2 %, and the estimate's vision part is that per patch and block."""
    for intermediate in (4 * HIDDEN, 8 * HIDDEN):
        measured = vision_block_bytes_per_patch(model_type, intermediate)
        ours = vision_layer_bytes(model_type).per_token(HIDDEN, 0, 0, intermediate)
        assert ours == pytest.approx(measured, rel=0.02), (model_type, intermediate, measured, ours)
    pixels, patch = 448 * 448, 14
    vl = replace(
        shape_of("qwen2", SHAPES[0]), vision_hidden_size=HIDDEN, vision_layers=4, vision_intermediate_size=4 * HIDDEN,
        image_pixels=pixels, vision_patch_size=patch, vision_type=model_type, vision_trainable=True,
    )  # fmt: skip
    per_patch = vision_layer_bytes(model_type).per_token(HIDDEN, 0, 0, 4 * HIDDEN)
    assert activation_parts(vl)["gpu_vision"] == int(pixels / patch**2 * per_patch * 4)
