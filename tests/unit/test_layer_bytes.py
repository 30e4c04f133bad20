"""launcher/plan/layer_bytes.py: the lookup from config.json's model_type to a measured family, and the
estimate's use of the widths (the measured figures themselves: tests/stack/test_activation_bytes_real.py)."""

from __future__ import annotations

from launcher.plan.estimate import TrainShape, attention_widths, layer_bytes_per_token, logit_bytes
from launcher.plan.layer_bytes import DEFAULT, MEASURED, layer_bytes


def shape(**changes: object) -> TrainShape:
    base: dict[str, object] = dict(
        total_params=1, trainable_params=1, largest_layer_params=1, hidden_size=3584, num_layers=42,
        vocab_size=256000, micro_batch=1, seq_len=1024, gradient_checkpointing=False, gpus_per_node=1,
        nnodes=1, intermediate_size=14336, num_heads=16, num_kv_heads=8,
    )  # fmt: skip
    return TrainShape(**{**base, **changes})  # type: ignore[arg-type]


def test_an_unmeasured_or_unknown_family_is_counted_as_llama() -> None:
    assert layer_bytes("some_new_decoder") is DEFAULT is layer_bytes(None) is MEASURED["llama"]


def test_moe_and_multimodal_variants_take_their_text_decoders_family() -> None:
    assert layer_bytes("qwen3_moe") is layer_bytes("qwen3_vl") is MEASURED["qwen3"]
    assert layer_bytes("gemma3") is MEASURED["gemma3_text"]
    assert layer_bytes("mixtral") is MEASURED["mistral"]


def test_head_dim_sets_q_and_kv_widths() -> None:
    """Gemma-2-9B: 16 heads of 256 make q 4096 wide on a 3584 hidden size; without head_dim, hidden / heads."""
    assert attention_widths(shape(head_dim=256)) == (4096, 2048)
    assert attention_widths(shape()) == (3584, 1792)
    assert attention_widths(shape(num_heads=None, head_dim=256)) == (3584, 3584)  # heads unknown: as MHA


def test_gemma2_layer_and_logits_by_hand() -> None:
    """36h + 4q + 4kv + 8i with h 3584, q 4096, kv 2048, i 14336; its loss saves 6 bytes, the peak 14."""
    gemma2 = shape(head_dim=256, model_type="gemma2")
    assert layer_bytes_per_token(gemma2) == 36 * 3584 + 4 * 4096 + 4 * 2048 + 8 * 14336
    assert logit_bytes(gemma2) == 6 + 8
    assert layer_bytes_per_token(shape(head_dim=256)) == 16 * 3584 + 4 * 4096 + 4 * 2048 + 8 * 14336
    assert logit_bytes(shape()) == 4 + 8
