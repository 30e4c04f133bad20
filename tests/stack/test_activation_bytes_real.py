"""The estimate's activation and logit bytes held against transformers' own model code (real, on the CPU).

scripts/measure_activations.py counts what autograd saves in a forward of a tiny random-weight Llama and
Qwen2 (transformers as installed with ms-swift: the code `swift sft` trains): per decoder layer and token,
and per token and vocabulary entry in the loss. The estimate (launcher/plan/estimate.py) must say the
same: a change of transformers that saves more per token, or of the estimate's constants, fails here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from measure_activations import HEADS, SHAPES, logit_saved_bytes_per_entry
from measure_activations import layer_bytes_per_token as measured_layer

from launcher.plan.estimate import LOGIT_BYTES, LOGIT_SAVED_BYTES, TrainShape, activation_parts, layer_bytes_per_token


def shape_of(hidden: int, kv_heads: int, intermediate: int, vocab: int = 4000) -> TrainShape:
    return TrainShape(
        total_params=1, trainable_params=1, largest_layer_params=1, hidden_size=hidden, num_layers=1,
        vocab_size=vocab, micro_batch=1, seq_len=1024, gradient_checkpointing=False, gpus_per_node=1,
        nnodes=1, intermediate_size=intermediate, num_heads=HEADS, num_kv_heads=kv_heads,
    )  # fmt: skip


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
@pytest.mark.parametrize("layer", SHAPES, ids=lambda s: f"h{s.hidden}-kv{s.kv_heads}-i{s.intermediate}")
def test_a_layers_saved_bytes_per_token_are_the_estimates(stack_installed: None, model_type: str, layer) -> None:  # type: ignore[no-untyped-def]
    measured = measured_layer(model_type, layer)
    ours = layer_bytes_per_token(shape_of(layer.hidden, layer.kv_heads, layer.intermediate))
    assert ours == pytest.approx(measured, rel=0.02), (model_type, layer, measured, ours)


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_the_loss_saves_the_fp32_log_softmax_the_estimate_counts(stack_installed: None, model_type: str) -> None:
    """The saved part of the logits' peak, exactly; the rest of LOGIT_BYTES is the backward's two fp32
    gradients of the same size (the ops' own shapes), and the whole sits at the peak the estimate takes."""
    assert logit_saved_bytes_per_entry(model_type) == pytest.approx(LOGIT_SAVED_BYTES, rel=0.01)
    tokens, vocab = 1024, 32000
    ours = activation_parts(shape_of(256, 2, 704, vocab=vocab))["gpu_logits"] / (tokens * vocab)
    assert ours == LOGIT_BYTES == LOGIT_SAVED_BYTES + 2 * 4
