"""swift's features read from its argv (launcher/plan/features.py) and modelled in the estimate.

Expected values by hand from the models' config.json shapes; what each argument does is read from
ms-swift 4.6's source (the module's docstring says where).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.errors import SafeSftError
from launcher.model import ModelFacts, Strategy
from launcher.plan.estimate import DATA_PARTS, activation_parts, estimate, vision_checkpointed
from launcher.plan.features import read_features
from launcher.plan.sizing import train_shape
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from tests.conftest import gpus

# Qwen2.5-3B-Instruct (huggingface.co/Qwen/Qwen2.5-3B-Instruct config.json): hidden 2048, 36 layers,
# intermediate 11008, vocab 151936, 16 heads, 2 key/value heads, tied embeddings.
QWEN3B = ModelFacts(
    name="Qwen2.5-3B", total_params=3_085_938_688, source="config", largest_layer_params=151936 * 2048,
    hidden_size=2048, num_layers=36, intermediate_size=11008, vocab_size=151936, num_attention_heads=16,
    num_key_value_heads=2, tie_word_embeddings=True,
)  # fmt: skip
# Qwen2.5-VL-7B-Instruct: the Qwen2.5-7B decoder (hidden 3584, 28 layers, intermediate 18944, vocab 152064,
# 28 heads, 4 kv heads) and a 32-layer, 1280-wide ViT of about 676M parameters.
QWEN_VL7B = ModelFacts(
    name="Qwen2.5-VL-7B", total_params=8_292_166_656, source="config", largest_layer_params=152064 * 3584,
    hidden_size=3584, num_layers=28, intermediate_size=18944, vocab_size=152064, num_attention_heads=28,
    num_key_value_heads=4, is_multimodal=True, vision_params=676_000_000, vision_hidden_size=1280,
    vision_layers=32, model_type="qwen2_5_vl",
)  # fmt: skip
# Qwen3-30B-A3B: hidden 2048, 48 layers, 128 experts of intermediate 768, 8 per token, 32 heads, 4 kv heads.
QWEN3_MOE = ModelFacts(
    name="Qwen3-30B-A3B", total_params=30_532_122_624, source="config", largest_layer_params=151936 * 2048,
    hidden_size=2048, num_layers=48, intermediate_size=6144, vocab_size=151936, num_attention_heads=32,
    num_key_value_heads=4, num_experts=128, experts_per_token=8, moe_intermediate_size=768,
)  # fmt: skip


def features(model: ModelFacts, *argv: str, env: dict[str, str] | None = None, world: int = 8):  # type: ignore[no-untyped-def]
    return read_features(parse_swift_argv(["--model", "m", *argv]), model, env or {}, world)


def shape(model: ModelFacts, *argv: str, n_gpus: int = 8, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    topo = resolve_topology(TopologyRequest(), {}, gpus(n_gpus, 80), free_port=1)
    return train_shape(parse_swift_argv(["--model", "m", *argv]), model, topo, env or {})


H3, I3, L3 = 2048, 11008, 36
H7, I7, L7 = 3584, 18944, 28
# in + out of q, k, v and o: q heads x head_dim wide, k and v kv_heads x head_dim (GQA), o back to h
ATT3 = (H3 + 16 * 128) + 2 * (H3 + 2 * 128) + (16 * 128 + H3)  # 16 heads, 2 kv heads of 128
ATT7 = (H7 + 28 * 128) + 2 * (H7 + 4 * 128) + (28 * 128 + H7)  # 28 heads, 4 kv heads of 128
ATT_MOE = (2048 + 32 * 64) + 2 * (2048 + 4 * 64) + (32 * 64 + 2048)  # 32 heads, 4 kv heads of 64


@pytest.mark.parametrize(
    ("model", "argv", "expected"),
    [
        pytest.param(QWEN3B, (), L3 * 8 * (ATT3 + 3 * (H3 + I3)), id="lora-all-linear-default"),
        pytest.param(
            QWEN3B,
            ("--target_modules", "q_proj", "v_proj"),
            L3 * 8 * ((H3 + 16 * 128) + (H3 + 2 * 128)),
            id="lora-q-v-only",
        ),
        pytest.param(
            QWEN3B,
            ("--lora_rank", "64", "--target_modules", "all-linear"),
            L3 * 64 * (ATT3 + 3 * (H3 + I3)),
            id="lora-rank-64",
        ),
        pytest.param(
            QWEN3B,
            ("--modules_to_save", "embed_tokens", "lm_head"),
            L3 * 8 * (ATT3 + 3 * (H3 + I3)) + 151936 * H3,
            id="lora-modules-to-save-tied-counted-once",
        ),
        pytest.param(QWEN3B, ("--tuner_type", "full"), 3_085_938_688, id="full"),
        pytest.param(QWEN_VL7B, ("--tuner_type", "full"), 8_292_166_656 - 676_000_000, id="vl-full-vit-frozen"),
        pytest.param(
            QWEN_VL7B, ("--tuner_type", "full", "--freeze_vit", "false"), 8_292_166_656, id="vl-full-vit-trained"
        ),
        pytest.param(
            QWEN_VL7B,
            ("--tuner_type", "full", "--freeze_llm", "true", "--freeze_vit", "false"),
            676_000_000,
            id="vl-full-llm-frozen",
        ),
        pytest.param(
            QWEN_VL7B,
            ("--freeze_vit", "false"),
            L7 * 8 * (ATT7 + 3 * (H7 + I7)) + 32 * 8 * 16 * 1280,
            id="vl-lora-on-vit-too",
        ),
        pytest.param(
            QWEN_VL7B,
            ("--freeze_llm", "true", "--freeze_vit", "false"),
            32 * 8 * 16 * 1280,
            id="vl-lora-vit-only",
        ),
        pytest.param(
            QWEN_VL7B,
            ("--trainable_parameters", "visual"),
            L7 * 8 * (ATT7 + 3 * (H7 + I7)) + 676_000_000,
            id="vl-lora-plus-full-vit-by-prefix",
        ),
        pytest.param(
            QWEN_VL7B,
            ("--tuner_type", "lora_llm", "--lora_rank", "16"),
            L7 * 16 * (ATT7 + 3 * (H7 + I7)) + 676_000_000,
            id="vl-lora-llm-full-vit",
        ),
        pytest.param(
            QWEN3_MOE,
            ("--target_modules", "q_proj", "k_proj", "v_proj", "o_proj"),
            48 * 8 * ATT_MOE,
            id="moe-lora-attention-only",
        ),
        # transformers 5's routed experts are fused parameters: all-linear reaches attention only
        pytest.param(QWEN3_MOE, (), 48 * 8 * ATT_MOE, id="moe-lora-all-linear"),
        pytest.param(
            QWEN3_MOE,
            ("--target_parameters", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"),
            48 * 8 * (ATT_MOE + 128 * ((2048 + 2 * 768) + (768 + 2048))),
            id="moe-lora-every-expert-by-target_parameters",
        ),
        pytest.param(
            replace(QWEN3_MOE, shared_expert_intermediate_size=5632),
            (),
            48 * 8 * (ATT_MOE + 3 * (2048 + 5632)),
            id="moe-lora-shared-experts",
        ),
    ],
)
def test_trainable_parameters(model: ModelFacts, argv: tuple[str, ...], expected: int) -> None:
    assert features(model, *argv).trainable_params == expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(("--freeze_parameters_ratio", "0.25"), 3_085_938_688 * 3 // 4, id="ratio"),
        # tied: the one embedding matrix is the head too
        pytest.param(("--freeze_parameters", "model.embed_tokens"), 3_085_938_688 - 151936 * 2048, id="named"),
        # the embeddings lie inside the first quarter: the larger of the two freezes, not their sum
        pytest.param(
            ("--freeze_parameters_ratio", "0.25", "--freeze_parameters", "model.embed_tokens"),
            3_085_938_688 * 3 // 4,
            id="both",
        ),
        pytest.param(("--freeze_parameters_ratio", "abc"), 3_085_938_688, id="not-a-number-is-swifts-to-refuse"),
    ],
)
def test_a_partly_frozen_full_tuning_trains_what_swift_leaves_unfrozen(argv: tuple[str, ...], expected: int) -> None:
    found = features(QWEN3B, "--tuner_type", "full", *argv).trainable_params
    assert found == pytest.approx(expected, abs=1)


def test_unknown_target_module_and_prefix_are_warned_not_guessed() -> None:
    found = features(QWEN3B, "--target_modules", "in_proj", "--trainable_parameters", "model.norm")
    assert any("in_proj" in w and "not counted" in w for w in found.warnings)
    assert any("model.norm" in w for w in found.warnings)


@pytest.mark.parametrize(
    ("sp", "ring"), [(2, False), (4, True), (8, True)], ids=["sp2-ulysses", "sp4-ring", "sp8-ring"]
)
def test_sequence_parallel_uses_ring_beyond_the_kv_heads(sp: int, ring: bool) -> None:
    # gcd(2 kv heads, S) = 2: S=2 is Ulysses alone, S=4 and 8 add ring attention (swift's _init_device_mesh)
    found = features(QWEN3B, "--sequence_parallel_size", str(sp), "--padding_free", "true", "--attn_impl", "flash_attn")
    assert (found.sequence_parallel, found.sequence_ring) == (sp, ring)
    assert not found.logits_on_labels  # swift turns use_logits_to_keep off under sequence parallelism
    assert not found.warnings


def test_ring_without_padding_free_and_a_size_that_does_not_divide_are_warned() -> None:
    found = features(QWEN3B, "--sequence_parallel_size", "4", world=6)
    assert any("ring attention" in w and "--padding_free true" in w for w in found.warnings)
    assert any("does not divide the 6" in w for w in found.warnings)


def test_sequence_parallel_divides_the_data_parts_and_adds_its_buffers() -> None:
    argv = ("--max_length", "65536", "--padding_free", "true", "--attn_impl", "flash_attn")
    one = shape(QWEN3B, *argv)
    eight = shape(QWEN3B, *argv, "--sequence_parallel_size", "8")
    assert eight.tokens == one.tokens // 8
    p1, p8 = activation_parts(one), activation_parts(eight)
    assert p8["gpu_activations"] == pytest.approx(p1["gpu_activations"] / 8, rel=0.01)
    assert p8["gpu_logits"] == pytest.approx(p1["gpu_logits"] / 8, rel=0.01)
    # full-length embeddings (65536 x 2048 x 2) + all-to-all copies of q, k, v, out for 8192 local tokens
    # (kv width 2048 x 2 / 16 = 256), + ring's k/v blocks in flight
    kv = 256
    expected = 65536 * H3 * 2 + 2 * (2 * H3 + 2 * kv) * 8192 * 2 + 2 * 2 * kv * 8192 * 2
    assert p8["gpu_sequence_parallel"] == expected and p1["gpu_sequence_parallel"] == 0
    zero = None
    e1 = estimate(Strategy.DDP, one, None, None, zero)
    e8 = estimate(Strategy.DDP, eight, None, None, zero)
    assert e1.gpu_fixed_bytes == e8.gpu_fixed_bytes
    assert e8.gpu_need_bytes < e1.gpu_need_bytes / 4


def test_chunked_loss_under_sequence_parallel_keeps_only_a_chunk_in_fp32() -> None:
    argv = ("--max_length", "65536", "--sequence_parallel_size", "8", "--padding_free", "true")
    whole = activation_parts(shape(QWEN3B, *argv))["gpu_logits"]
    chunked = activation_parts(shape(QWEN3B, *argv, env={"CELOSS_PARALLEL_SIZE": "2048"}))["gpu_logits"]
    assert whole == 8192 * 151936 * 12
    # the 16-bit logits and their gradient whole (2 + 2), the loss's fp32 bytes (12) for one chunk
    assert chunked == 8192 * 151936 * 4 + 2048 * 151936 * 12


def test_padding_free_runs_no_length_squared_scores_even_with_eager() -> None:
    eager = shape(QWEN3B, "--attn_impl", "eager", "--max_length", "8192")
    assert activation_parts(eager)["gpu_attention_scores"] > 0
    free = shape(QWEN3B, "--attn_impl", "eager", "--max_length", "8192", "--padding_free", "true")
    assert activation_parts(free)["gpu_attention_scores"] == 0
    warned = features(QWEN3B, "--attn_impl", "eager", "--padding_free", "true").swift_warnings
    assert any("needs a flash attention" in w and "eager" in w for w in warned)


@pytest.mark.parametrize(
    ("model_type", "argv", "eager"),
    [
        ("qwen2", (), False),  # transformers' sdpa
        ("gemma3_text", (), True),  # swift's loader picks eager for Gemma-3
        ("gemma3", ("--attn_impl", "sdpa"), False),  # unless the user asks
        ("bloom", (), True),  # no sdpa path in transformers
        ("gpt_oss", ("--attn_impl", "flash_attn"), False),
    ],
)
def test_an_unset_attn_impl_is_what_swift_and_transformers_pick(
    model_type: str, argv: tuple[str, ...], eager: bool
) -> None:
    model = replace(QWEN3B, model_type=model_type)
    assert features(model, *argv).eager_attention is eager
    assert (activation_parts(shape(model, *argv))["gpu_attention_scores"] > 0) is eager


def test_no_sdpa_lever_where_transformers_has_no_sdpa_path() -> None:
    """Gemma-3 can run sdpa when asked (a lever); BLOOM cannot (transformers refuses it)."""
    from launcher.plan.estimate import lever_changes

    def levers(model_type: str) -> list[str]:
        model = replace(QWEN3B, model_type=model_type, decoder_type=model_type)
        return [name for name, _ in lever_changes(shape(model))]

    assert "attn_impl eager -> sdpa" in levers("gemma3_text")
    assert "attn_impl eager -> sdpa" not in levers("bloom")


def test_lora_adapters_are_read_from_swifts_arguments() -> None:
    """The adapted projections' input widths (q, k, v and gate, up read h; o q's width; down the MLP's),
    the rank and the dropout; none for full tuning; an MoE layer's MLP adapters are its shared experts'."""
    default = features(QWEN3B).adapters
    assert default is not None and default.rank == 8 and default.dropout
    q = 16 * 128
    assert dict(default.inputs) == {
        "q_proj": H3, "k_proj": H3, "v_proj": H3, "o_proj": q, "gate_proj": H3, "up_proj": H3, "down_proj": I3,
    }  # fmt: skip
    some = features(QWEN3B, "--target_modules", "q_proj", "v_proj", "--lora_dropout", "0", "--lora_rank", "64")
    assert some.adapters is not None
    assert (dict(some.adapters.inputs), some.adapters.rank, some.adapters.dropout) == (
        {"q_proj": H3, "v_proj": H3}, 64, False,
    )  # fmt: skip
    assert features(QWEN3B, "--tuner_type", "full").adapters is None
    for value, on in (("0.00", False), ("0.1", True), ("none", True)):
        found = features(QWEN3B, "--lora_dropout", value).adapters
        assert found is not None and found.dropout is on, value
    moe = features(QWEN3_MOE).adapters
    assert moe is not None and set(dict(moe.inputs)) == {"q_proj", "k_proj", "v_proj", "o_proj"}


# Phi-3-mini: hidden 3072, 32 heads of 96 (no grouped k/v), intermediate 8192; q, k and v in one qkv_proj,
# gate and up in one gate_up_proj.
PHI3_MINI = replace(
    QWEN3B, name="Phi-3-mini", hidden_size=3072, num_layers=32, intermediate_size=8192, num_attention_heads=32,
    num_key_value_heads=32, model_type="phi3", decoder_type="phi3",
)  # fmt: skip


def test_a_familys_fused_linears_are_one_adapter_each() -> None:
    """swift's all-linear adapts a family's own linears (launcher.plan.estimate.FAMILY_LINEARS): Phi-3's
    qkv_proj reads h once and writes q, k and v; gate_up_proj writes gate and up. A Llama name that is not
    among them is warned about, not counted."""
    h, i = 3072, 8192
    found = features(PHI3_MINI)
    assert found.adapters is not None
    assert dict(found.adapters.inputs) == {"qkv_proj": h, "o_proj": h, "gate_up_proj": h, "down_proj": i}
    per_layer = (h + 3 * h) + (h + h) + (h + 2 * i) + (i + h)
    assert found.trainable_params == 32 * 8 * per_layer
    dora = features(PHI3_MINI, "--use_dora", "true").adapters
    assert dora is not None and dora.dora_outputs == 3 * h + h + 2 * i + h
    named = features(PHI3_MINI, "--target_modules", "q_proj", "qkv_proj")
    assert named.trainable_params == 32 * 8 * (h + 3 * h)
    assert any(
        w.startswith("--target_modules q_proj: not a linear of this model's decoder layers") for w in named.warnings
    )


def test_dora_keeps_two_copies_of_each_adapted_output() -> None:
    """--use_dora true: the adapted projections' outputs summed (q 16 x 128, k and v 2 x 128, o and down h,
    gate and up i), each kept twice at 16 bits per token and layer on top of LoRA's."""
    lora = shape(QWEN3B)
    dora = shape(QWEN3B, "--use_dora", "true")
    assert lora.adapters is not None and lora.adapters.dora_outputs == 0
    outputs = 16 * 128 + 2 * (2 * 128) + H3 + 2 * I3 + H3
    assert dora.adapters is not None and dora.adapters.dora_outputs == outputs
    from launcher.plan.estimate import layer_bytes_per_token

    assert layer_bytes_per_token(dora) - layer_bytes_per_token(lora) == 2 * 2 * outputs
    qv = features(QWEN3B, "--use_dora", "true", "--target_modules", "q_proj", "v_proj").adapters
    assert qv is not None and qv.dora_outputs == 16 * 128 + 2 * 128
    # and trains a magnitude vector per adapted linear, one entry per output
    assert dora.trainable_params - lora.trainable_params == QWEN3B.num_layers * outputs  # type: ignore[operator]


def test_a_bitsandbytes_4bit_base_keeps_what_a_frozen_layer_keeps() -> None:
    """bitsandbytes' 4-bit matmul keeps no input for the backward; its 8-bit one keeps it, as a trained
    linear does, and GPTQ/AWQ kernels are not read: those stay counted as trained layers."""
    from launcher.plan.estimate import frozen_base, layer_bytes_per_token

    def base(*argv: str, model: ModelFacts = QWEN3B):  # type: ignore[no-untyped-def]
        found = shape(model, *argv)
        return frozen_base(found), layer_bytes_per_token(found)

    plain, nf4 = base(), base("--quant_method", "bnb", "--quant_bits", "4")
    assert plain[0] and nf4 == plain
    assert base("--quant_method", "bnb", "--quant_bits", "8")[0] is False
    gptq = replace(QWEN3B, quant_bits=4, quant_method="gptq")
    assert base(model=gptq)[0] is False and base(model=gptq)[1] > plain[1]
    assert base(model=replace(QWEN3B, quant_bits=4, quant_method="bnb")) == plain


def test_quant_bits_without_a_method_is_warned_and_counted_unquantized() -> None:
    found = features(QWEN3B, "--quant_bits", "4")
    said = "--quant_bits 4 without --quant_method: ms-swift 4.6 loads the model unquantized"
    assert any(said in w for w in found.swift_warnings)  # swift's own behaviour: for its backend alone
    quantized = features(QWEN3B, "--quant_method", "bnb", "--quant_bits", "4")
    assert not any("quant_method" in w for w in quantized.swift_warnings)
    assert shape(QWEN3B, "--quant_bits", "4").quant_bits is None


def test_a_lora_layer_keeps_its_frozen_base_and_its_adapters_inputs() -> None:
    """By hand (launcher/plan/layer_bytes.py): Qwen2.5-3B's frozen layer 8h + 4q + 4kv + 6i, and per adapted
    projection its input at 2 bytes plus the 1-byte dropout mask, and 8 x 2 bytes of middle."""
    from launcher.plan.estimate import layer_bytes_per_token

    q, kv = 16 * 128, 2 * 128
    frozen = 8 * H3 + 4 * q + 4 * kv + 6 * I3
    adapters = 3 * (5 * H3 + q + I3) + 7 * 8 * 2
    assert layer_bytes_per_token(shape(QWEN3B)) == frozen + adapters
    trained = 16 * H3 + 4 * q + 4 * kv + 8 * I3
    assert layer_bytes_per_token(shape(QWEN3B, "--tuner_type", "full")) == trained


def test_logits_to_keep_counts_only_label_tokens_when_the_data_says_so() -> None:
    kept = shape(QWEN3B, "--max_length", "4096")
    assert kept.logits_on_labels
    worst = activation_parts(kept)["gpu_logits"]
    assert worst == 4096 * 151936 * 12  # the worst case: every token a label
    assert activation_parts(replace(kept, label_fraction=0.25))["gpu_logits"] == worst // 4
    off = shape(QWEN3B, "--max_length", "4096", "--use_logits_to_keep", "false")
    assert activation_parts(replace(off, label_fraction=0.25))["gpu_logits"] == worst


def test_batched_mm_experts_gather_weights_per_token() -> None:
    grouped = shape(QWEN3_MOE, "--experts_impl", "grouped_mm", "--max_length", "2048")
    batched = shape(QWEN3_MOE, "--experts_impl", "batched_mm", "--max_length", "2048")
    assert activation_parts(grouped)["gpu_moe_experts"] == 0
    assert activation_parts(batched)["gpu_moe_experts"] == 2048 * 8 * 3 * 2048 * 768 * 2


def test_image_token_limit_wins_over_max_pixels() -> None:
    env = {"IMAGE_MAX_TOKEN_NUM": "1024", "MAX_PIXELS": "1003520"}
    assert features(QWEN_VL7B, env=env).image_pixels == 1024 * 28 * 28
    assert features(QWEN_VL7B, env={"MAX_PIXELS": "1003520"}).image_pixels == 1003520
    # the swift config's ENV block counts as the environment of the workers
    config = {"ENV": {"IMAGE_MAX_TOKEN_NUM": "256"}, "model": "m"}
    swift = parse_swift_argv(["cfg.yaml"], config)
    topo = resolve_topology(TopologyRequest(), {}, gpus(1, 80), free_port=1)
    assert train_shape(swift, QWEN_VL7B, topo, {}).image_pixels == 256 * 28 * 28


@pytest.mark.parametrize("value", ["lots", "1003520.0", "0", "-1", "1,003,520"])
def test_a_budget_swift_would_stop_on_stops_the_plan(value: str) -> None:
    """swift reads MAX_PIXELS and IMAGE_MAX_TOKEN_NUM with int() as the model loads; the plan stops first,
    naming the value and the fix. A family that reads no budget leaves the variable alone, as swift does."""
    for name in ("MAX_PIXELS", "IMAGE_MAX_TOKEN_NUM"):
        with pytest.raises(SafeSftError, match=f"^{name}='{value}' is not a positive whole number") as raised:
            features(QWEN_VL7B, env={name: value})
        assert raised.value.hint.startswith(f"set {name} to a whole number such as ")
    internvl = replace(QWEN_VL7B, model_type="internvl_chat")
    assert features(internvl, env={"MAX_PIXELS": value}).image_pixels == features(internvl).image_pixels
    assert features(QWEN_VL7B, env={"MAX_PIXELS": " 1_003_520\n"}).image_pixels == 1003520  # as int() reads it


@pytest.mark.parametrize(
    ("model_type", "patch", "argv", "env", "pixels"),
    [
        # qwen_vl_utils' cap when nothing is set: 16384 tokens of (2 x patch)^2 pixels, up to max_length tokens
        pytest.param("qwen2_5_vl", 14, ("--max_length", "32768"), {}, 16384 * 28 * 28, id="qwen2.5-vl-cap"),
        pytest.param("qwen3_vl", 16, ("--max_length", "32768"), {}, 16384 * 32 * 32, id="qwen3-vl-cap"),
        pytest.param("qwen2_5_vl", 14, ("--max_length", "4096"), {}, 4096 * 28 * 28, id="no-more-than-max-length"),
        pytest.param("qwen2_5_vl", 14, (), {}, 2048 * 28 * 28, id="max-length-unset-as-the-plan-assumes"),
        pytest.param("qwen2_5_vl", 14, ("--max_length", "8192"), {"MAX_PIXELS": "1003520"}, 1003520, id="users"),
        # a family whose processor reads no budget: the assumed image, whatever max_length
        pytest.param("llava", 14, ("--max_length", "512"), {}, 1344 * 1792, id="llava-assumed"),
    ],
)  # fmt: skip
def test_an_unset_image_budget_is_the_processors_cap(
    model_type: str, patch: int, argv: tuple[str, ...], env: dict[str, str], pixels: int
) -> None:
    model = replace(QWEN_VL7B, model_type=model_type, vision_patch_size=patch)
    assert features(model, *argv, env=env).image_pixels == pixels


def test_data_parts_are_exactly_the_activation_parts() -> None:
    assert set(activation_parts(shape(QWEN3B))) == DATA_PARTS


def test_levers_name_liger_and_a_larger_sequence_parallel_size() -> None:
    from launcher.plan.estimate import levers

    long = shape(QWEN3B, "--max_length", "65536", "--sequence_parallel_size", "2", "--padding_free", "true")
    texts = [text for text, _ in levers(Strategy.ZERO2, long, None)]
    assert "--sequence_parallel_size 2 -> 4" in texts and "--use_liger_kernel true" in texts
    short = shape(QWEN3B, "--max_length", "2048", "--use_liger_kernel", "true")
    assert not any("sequence_parallel" in t or "liger" in t for t, _ in levers(Strategy.ZERO2, short, None))


def test_plan_says_how_many_samples_a_sequence_parallel_step_trains_on() -> None:
    from launcher.plan.build import LaunchPaths, build_plan
    from tests.conftest import host

    facts = host(gpus(8, 80), ram_gib=1024)
    swift = parse_swift_argv(["--model", "m", "--sequence_parallel_size", "4", "--per_device_train_batch_size", "2"])
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    plan = build_plan(swift, topo, facts, QWEN3B, env={}, paths=LaunchPaths("python", "worker.py", "/cfg"))
    # swift's default accumulation counts all 8 processes: ceil(16 / 2 / 8) = 1; 2 data-parallel ranks
    assert any("a step trains on 4 samples (micro-batch 2 x accumulation 1 x 2)" in n for n in plan.notes)


def test_a_plan_reads_swifts_features_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.plan import build, sizing
    from tests.conftest import host

    calls = []
    monkeypatch.setattr(sizing, "read_features", lambda *a: calls.append(a) or read_features(*a))
    facts = host(gpus(8, 80), ram_gib=1024)
    swift = parse_swift_argv(["--model", "m", "--sequence_parallel_size", "3"])  # 3 does not divide 8: a warning
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    plan = build.build_plan(swift, topo, facts, QWEN3B, env={}, paths=build.LaunchPaths("python", "w.py", "/cfg"))
    # once per layout: 8 processes, and device_map's one process (its sequence parallelism splits differently)
    assert [call[3] for call in calls] == [8, 1]
    assert any("sequence_parallel_size" in w for w in plan.warnings)


def test_the_vision_towers_checkpointing_follows_swifts_default() -> None:
    """swift's vit_gradient_checkpointing, unset, is gradient_checkpointing (sft_args.py), also after a lever
    turns gradient checkpointing on; given, it stays as given."""
    assert vision_checkpointed(shape(QWEN_VL7B, "--freeze_vit", "false")) is True
    no_gc = shape(QWEN_VL7B, "--freeze_vit", "false", "--gradient_checkpointing", "false")
    assert vision_checkpointed(no_gc) is False
    assert vision_checkpointed(replace(no_gc, gradient_checkpointing=True)) is True
    off = shape(QWEN_VL7B, "--freeze_vit", "false", "--vit_gradient_checkpointing", "false")
    assert off.gradient_checkpointing is True and vision_checkpointed(off) is False


def test_image_tokens_are_pixels_at_the_towers_patch_size() -> None:
    """IMAGE_MAX_TOKEN_NUM counts merged tokens of 2 x 2 patches: 28 x 28 pixels each with Qwen2.5-VL's
    14-pixel patches, 32 x 32 with Qwen3-VL's 16."""
    env = {"IMAGE_MAX_TOKEN_NUM": "1024"}
    assert features(QWEN_VL7B, env=env).image_pixels == 1024 * 28 * 28
    assert features(replace(QWEN_VL7B, vision_patch_size=16), env=env).image_pixels == 1024 * 32 * 32


@pytest.mark.parametrize(
    ("argv", "model", "named"),
    [
        (
            ("--tuner_type", "full", "--quant_method", "bnb", "--quant_bits", "4"),
            QWEN3B,
            "--quant_method bnb --quant_bits 4",
        ),
        (("--tuner_type", "full"), replace(QWEN3B, quant_bits=4, quant_method="gptq"), "gptq, 4-bit"),
    ],
)
def test_a_full_fine_tune_of_a_quantized_model_is_warned_of(
    argv: tuple[str, ...], model: ModelFacts, named: str
) -> None:
    """transformers' Trainer (validate_quantization_for_training) stops every rank on a quantized model without
    adapters; the plan had planned it, unquantized, with no word."""
    [said] = [w for w in features(model, *argv).warnings if "quantized model" in w]
    assert f"a full fine-tune of a quantized model ({named})" in said and "purely quantized" in said
    lora = features(model, *argv[2:], "--tuner_type", "lora")
    assert not any("quantized model" in w for w in lora.warnings)


def test_an_fp8_checkpoint_is_warned_of_what_the_gpus_compute_capability_decides() -> None:
    """Qwen3-32B-FP8's quantization_config (quant_method fp8) was read by nothing: its plan equalled the bf16
    model's, with no word that transformers trains it only where it dequantizes it."""
    fp8 = replace(QWEN3B, name="Qwen3-32B-FP8", quant_method="fp8")
    [said] = [w for w in features(fp8, "--tuner_type", "lora").warnings if "FP8" in w]
    assert said.startswith("Qwen3-32B-FP8 is saved in FP8 (fp8): on GPUs of compute capability 8.9 or later")
    assert not [w for w in features(QWEN3B, "--tuner_type", "lora").warnings if "FP8" in w]
