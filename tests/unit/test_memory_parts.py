"""The estimate's named parts: DeepSpeed's real buffers from the real config, quantized weights, packing,
eager attention, MoE, dtypes and plain DDP, held against DeepSpeed's own code and hand-computed values."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

from launcher.model import Strategy
from launcher.plan.build import LaunchPaths, PlanOptions, build_plan
from launcher.plan.ds_config import SHIPPED_ZERO, ZeroSettings, zero_settings
from launcher.plan.estimate import (
    DATA_PARTS,
    FRAGMENTATION_MARGIN,
    LORA_LINEARS,
    QUANT_BYTES,
    TrainShape,
    activation_parts,
    estimate,
    host_bytes,
    layer_linears,
    lever_changes,
    levers,
    lora_trainable_params,
    weight_parts,
)
from launcher.plan.layer_bytes import (
    VISION_DEFAULT,
    VISION_MEASURED,
    eager_score_bytes,
    vision_family,
    vision_layer_bytes,
)
from launcher.plan.sizing import train_shape
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.probe.model_size import probe_model, typical_shape
from tests.conftest import gpus, host
from tests.unit.test_probes import write_safetensors

REPO = Path(__file__).resolve().parents[2]
H = 4096


def shape(**changes: object) -> TrainShape:
    base = TrainShape(
        total_params=7_000_000_000,
        trainable_params=7_000_000_000,
        largest_layer_params=500_000_000,
        hidden_size=H,
        num_layers=32,
        vocab_size=32000,
        micro_batch=1,
        seq_len=2048,
        gradient_checkpointing=True,
        gpus_per_node=8,
        nnodes=1,
        intermediate_size=11008,
        num_heads=32,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def settings(rung: str, **zero: object) -> ZeroSettings:
    config = json.loads(json.dumps(SHIPPED_ZERO[rung]))
    config["zero_optimization"].update(zero)
    return zero_settings(config, H)


# ---- the config: "auto" as transformers fills it, missing keys as DeepSpeed's defaults ------------------


def test_auto_values_are_filled_from_the_hidden_size() -> None:
    zero = settings("zero3")
    assert zero.reduce_bucket == H * H
    assert zero.prefetch_bucket == int(0.9 * H * H)
    assert zero.persistence_threshold == 10 * H
    assert (zero.max_live_parameters, zero.sub_group_size) == (1_000_000_000, 1_000_000_000)


def test_missing_keys_take_deepspeeds_own_defaults() -> None:
    ours = zero_settings({"zero_optimization": {"stage": 3}}, H)
    ds = DeepSpeedZeroConfig(stage=3)
    assert ours.reduce_bucket == ds.reduce_bucket_size
    assert ours.allgather_bucket == ds.allgather_bucket_size
    assert ours.prefetch_bucket == ds.prefetch_bucket_size
    assert ours.max_live_parameters == ds.max_live_parameters
    assert ours.max_reuse_distance == ds.max_reuse_distance
    assert ours.persistence_threshold == ds.param_persistence_threshold
    assert ours.sub_group_size == ds.sub_group_size
    assert ours.overlap_comm is ds.overlap_comm is True  # on by default for stage 3 only
    assert (
        zero_settings({"zero_optimization": {"stage": 2}}, H).overlap_comm is DeepSpeedZeroConfig(stage=2).overlap_comm
    )


@pytest.mark.parametrize("rung", ["zero2", "zero3", "zero3_offload"])
def test_shipped_zero_sections_equal_the_files(rung: str) -> None:
    on_disk = json.loads((REPO / "deepspeed_configs" / f"{rung}.json").read_text())
    assert on_disk["zero_optimization"] == SHIPPED_ZERO[rung]["zero_optimization"]


# ---- model states against DeepSpeed's estimators ---------------------------------------------------------


@pytest.mark.parametrize("gpus_n", [1, 4, 8])
def test_zero2_full_model_states_equal_deepspeeds_estimator(gpus_n: int) -> None:
    s = shape(gpus_per_node=gpus_n)
    parts = weight_parts(Strategy.ZERO2, s, settings("zero2"))
    _, ds_gpu = estimate_zero2_model_states_mem_needs(s.total_params, gpus_n, 1, cpu_offload=False)
    states = parts["gpu_weights"] + parts["gpu_gradients"] + parts["gpu_step_gradients"] + parts["gpu_optimizer"]
    assert abs(states - ds_gpu) <= 2


@pytest.mark.parametrize("gpus_n", [1, 8])
def test_zero3_model_states_hold_at_least_deepspeeds_estimate(gpus_n: int) -> None:
    """DeepSpeed's 4L + 18P/N counts the fp32 gradient of the whole partition and no live parameters;
    DeepSpeed holds fp32 gradients for one sub-group at a time, and keeps up to max_live parameters."""
    s = shape(gpus_per_node=gpus_n)
    parts = weight_parts(Strategy.ZERO3, s, settings("zero3"))
    _, ds_gpu, _ = estimate_zero3_model_states_mem_needs(
        s.total_params, s.largest_layer_params, gpus_n, 1, cpu_offload=False
    )
    ours = sum(parts.values())
    partition = s.total_params // gpus_n
    beyond_sub_group = 4 * (partition - min(1_000_000_000, partition))
    live_and_buckets = 2 * (1_000_000_000 + int(0.9 * H * H)) + H * H * 2 + (32 * 4 * H + H) * 2
    assert ds_gpu <= ours + beyond_sub_group <= ds_gpu + live_and_buckets + 2 * partition


def test_zero2_buckets_hand_computed() -> None:
    # shipped zero2: reduce_bucket_size auto = h^2 elements, allgather 2e8, overlap_comm off; bf16 = 2 bytes
    assert weight_parts(Strategy.ZERO2, shape(), settings("zero2"))["gpu_zero_buckets"] == H * H * 2 + 200_000_000 * 2
    # a user's config with 5e8 buckets and overlap_comm: two reduce buffers
    user = settings("zero2", reduce_bucket_size=500_000_000, allgather_bucket_size=500_000_000, overlap_comm=True)
    assert weight_parts(Strategy.ZERO2, shape(), user)["gpu_zero_buckets"] == 2 * 500_000_000 * 2 + 500_000_000 * 2


def test_zero2_contiguous_gradient_partition_hand_computed() -> None:
    parts = weight_parts(Strategy.ZERO2, shape(), settings("zero2"))
    assert parts["gpu_gradients"] == 7_000_000_000 // 8 * 2  # the bf16 partition
    assert parts["gpu_step_gradients"] == 7_000_000_000 // 8 * 4  # its fp32 copy, made by the optimizer step


def test_zero3_live_parameters_follow_the_config() -> None:
    default = weight_parts(Strategy.ZERO3, shape(), settings("zero3"))
    assert default["gpu_zero3_live_params"] == (1_000_000_000 + int(0.9 * H * H)) * 2
    small = weight_parts(Strategy.ZERO3, shape(), settings("zero3", stage3_max_live_parameters=100_000_000))
    assert small["gpu_zero3_live_params"] == (500_000_000 + int(0.9 * H * H)) * 2  # never below the largest layer
    assert default["gpu_zero3_persistent"] == (32 * 4 * H + H) * 2  # norms and biases under 10h


def test_zero3_sub_group_caps_the_fp32_gradient() -> None:
    big = weight_parts(Strategy.ZERO3, shape(gpus_per_node=1), settings("zero3"))
    small = weight_parts(Strategy.ZERO3, shape(gpus_per_node=1), settings("zero3", sub_group_size=100_000_000))
    assert big["gpu_step_gradients"] - small["gpu_step_gradients"] == (1_000_000_000 - 100_000_000) * 4
    assert big["gpu_gradients"] == small["gpu_gradients"]


def test_offload_keeps_no_optimizer_or_partition_on_the_gpu() -> None:
    parts = weight_parts(Strategy.ZERO3_OFFLOAD, shape(), settings("zero3_offload"))
    assert parts["gpu_weights"] == parts["gpu_optimizer"] == 0
    assert parts["gpu_gradients"] == 500_000_000 * 2  # only the in-flight gradient of the largest layer
    assert parts["gpu_zero3_live_params"] > 2 * 10**9  # what DeepSpeed really keeps, not just 4L


def test_nvme_swap_keeps_only_deepspeeds_buffers_and_max_in_cpu_in_host_ram() -> None:
    """ZeRO-3 swapping to NVMe (offload_config.py's defaults: optimizer buffer_count 4; parameters
    buffer_count 5 x buffer_size 1e8, max_in_cpu 1e9) was estimated as a host offload: 18 bytes a
    parameter, for a config chosen because the host has far less."""
    nvme = {"device": "nvme", "nvme_path": "/nvme"}
    on_nvme = settings("zero3_offload", offload_optimizer=nvme, offload_param=nvme, sub_group_size=100_000_000)
    assert on_nvme.nvme is not None and on_nvme.nvme.optimizer_buffers == 4
    big = shape(total_params=70 * 10**9, trainable_params=70 * 10**9)  # a 8.75e9-element partition on each of 8
    partition = 70 * 10**9 / 8
    optimizer = 8 * 4 * (partition + (4 + 1) * 100_000_000)  # fp32 grad partition, 4 swap + 1 gradient buffers
    params = 8 * 2 * (1_000_000_000 + 5 * 100_000_000)  # max_in_cpu kept, 5 swap buffers of 1e8
    assert host_bytes(Strategy.ZERO3_OFFLOAD, big, on_nvme) == int((optimizer + params) * 1.5)
    on_host = host_bytes(Strategy.ZERO3_OFFLOAD, big, settings("zero3_offload"))
    assert on_host == int(18 * 70 * 10**9 * 1.5)  # DeepSpeed's estimator: 18 bytes a parameter
    assert host_bytes(Strategy.ZERO3_OFFLOAD, big, on_nvme) < on_host / 3
    # ZeRO 1 and 2 read an NVMe offload as a host offload (stage_1_and_2.py): nothing is swapped
    assert zero_settings({"zero_optimization": {"stage": 2, "offload_optimizer": nvme}}, H).nvme is None


# ---- phases: the optimizer step after the backward, the logits before the gradients ---------------------


def data_bytes(s: TrainShape) -> int:
    return sum(activation_parts(s).values())


def test_the_steps_fp32_gradients_count_only_beyond_the_backwards_activations() -> None:
    """DeepSpeed makes the fp32 gradient partition in step(), after the backward freed the activations."""
    zero2 = settings("zero2")
    step = 7_000_000_000 // 8 * 4  # 3.5 GB on each of 8 GPUs
    short = shape(seq_len=256)  # activations and logits well below the step's copy
    parts = estimate(Strategy.ZERO2, short, None, None, zero2).parts
    assert parts["gpu_step_gradients"] == step - data_bytes(short)
    long = shape(seq_len=8192, micro_batch=2)  # activations and logits above it
    assert data_bytes(long) > step
    long_est = estimate(Strategy.ZERO2, long, None, None, zero2)
    assert long_est.parts["gpu_step_gradients"] == 0
    # what the data cannot change still holds all of it
    fixed = sum(v for k, v in long_est.parts.items() if k.startswith("gpu_") and k not in DATA_PARTS)
    fixed += step - long_est.parts["gpu_fragmentation_margin"]
    assert long_est.gpu_fixed_bytes == fixed + int(fixed * FRAGMENTATION_MARGIN)


def test_without_accumulation_the_logits_peak_comes_before_the_gradients() -> None:
    """The loss's backward runs first; DDP's .grad and ZeRO-2's partition are made after it. With
    accumulation the earlier micro-batches' gradients are there; ZeRO-3's flat buffer always is."""
    one = shape(gpus_per_node=1, grad_accum=1, vocab_size=152064, micro_batch=4)
    logits = activation_parts(one)["gpu_logits"]
    grads = 7_000_000_000 * 2
    ddp_once = estimate(Strategy.DDP, one, None, None).parts["gpu_logits"]
    assert ddp_once == max(logits - grads, 0)
    assert estimate(Strategy.DDP, replace(one, grad_accum=2), None, None).parts["gpu_logits"] == logits
    assert estimate(Strategy.DDP, replace(one, grad_accum=None), None, None).parts["gpu_logits"] == logits
    eight = replace(one, gpus_per_node=8)
    zero2 = estimate(Strategy.ZERO2, eight, None, None, settings("zero2")).parts["gpu_logits"]
    assert zero2 == max(activation_parts(eight)["gpu_logits"] - grads // 8, 0)
    zero3 = estimate(Strategy.ZERO3, eight, None, None, settings("zero3")).parts["gpu_logits"]
    assert zero3 == activation_parts(eight)["gpu_logits"]


def test_explain_memory_says_which_parts_count_beyond_others() -> None:
    from launcher.plan.estimate import describe_activations

    lines = describe_activations(shape(grad_accum=1))
    assert any(line.startswith("step_gradients (ZeRO): the fp32 gradient copy") for line in lines)
    assert any(line.startswith("logits: no gradient accumulation") for line in lines)
    assert not any(line.startswith("logits:") for line in describe_activations(shape(grad_accum=4)))


def test_the_micro_batch_lever_accumulates_as_the_ladder_does() -> None:
    halved = dict(lever_changes(shape(micro_batch=4, grad_accum=1)))["micro-batch 4 -> 2"]
    assert (halved.micro_batch, halved.grad_accum) == (2, 2)
    assert dict(lever_changes(shape(micro_batch=4)))["micro-batch 4 -> 2"].grad_accum is None


# ---- dtypes, quantized weights, DDP ----------------------------------------------------------------------


def test_float32_has_no_master_copy() -> None:
    parts = weight_parts(Strategy.ZERO2, shape(weight_bytes=4, gpus_per_node=1), settings("zero2"))
    assert parts["gpu_weights"] == 4 * 7_000_000_000
    assert parts["gpu_gradients"] == 4 * 7_000_000_000
    assert parts["gpu_optimizer"] == 8 * 7_000_000_000


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_frozen_weights_hand_computed(bits: int) -> None:
    trainable = 40_000_000
    embeddings = 2 * 32000 * H
    quantized = 7_000_000_000 - embeddings
    s = shape(trainable_params=trainable, quant_bits=bits, quantized_params=quantized)
    parts = weight_parts(Strategy.ZERO2, s, settings("zero2"))
    frozen = 7_000_000_000 - trainable
    expected = trainable * 2 + quantized * QUANT_BYTES[bits] + (frozen - quantized) * 2
    assert parts["gpu_weights"] == int(expected)
    unquantized = weight_parts(Strategy.ZERO2, replace(s, quant_bits=None), settings("zero2"))["gpu_weights"]
    assert parts["gpu_weights"] < unquantized * (0.3 if bits == 4 else 0.55)


def test_kbit_preparation_upcasts_the_unquantized_weights_not_the_logits_peak() -> None:
    trainable = 40_000_000
    embeddings = 2 * 32000 * H
    quantized = 7_000_000_000 - embeddings
    s = shape(trainable_params=trainable, quant_bits=4, quantized_params=quantized, upcast_unquantized=True)
    frozen = 7_000_000_000 - trainable
    expected = trainable * 2 + quantized * QUANT_BYTES[4] + (frozen - quantized) * 4
    assert weight_parts(Strategy.ZERO2, s, settings("zero2"))["gpu_weights"] == int(expected)
    # the logits' peak is in the loss's backward, all fp32 (log-softmax 4, its gradient 4, its input's 4),
    # whatever the output layer's dtype
    assert activation_parts(s)["gpu_logits"] == 2048 * 32000 * 12
    assert activation_parts(replace(s, upcast_unquantized=False))["gpu_logits"] == 2048 * 32000 * 12


def test_pure_bf16_keeps_no_fp32_copies_under_zero() -> None:
    parts = weight_parts(Strategy.ZERO3, shape(pure_dtype=True, gpus_per_node=8), settings("zero3"))
    mixed = weight_parts(Strategy.ZERO3, shape(gpus_per_node=8), settings("zero3"))
    partition = 7_000_000_000 / 8
    assert parts["gpu_optimizer"] == int(partition * 4)  # two bf16 moments, no fp32 master
    assert mixed["gpu_optimizer"] == int(partition * 12)  # fp32 master + two fp32 moments


def test_the_eight_bit_optimizer_is_a_lever_of_a_full_fine_tune() -> None:
    s, zero = shape(), settings("zero2")
    found = dict(levers(Strategy.ZERO2, s, zero))
    moments = 7 * 10**9 / 8 * 2 * (4 - (1 + 4 / 2048))  # two fp32 moments -> 8-bit, this GPU's eighth
    saved = found["8-bit AdamW (--optim adamw_bnb_8bit)"]
    assert moments < saved < moments * 1.25  # plus the margin on it
    assert "8-bit AdamW (--optim adamw_bnb_8bit)" not in dict(levers(Strategy.ZERO2, shape(optimizer_bits=8), zero))


def test_torch_adamw_8bit_paged_and_in_backward_hand_computed() -> None:
    full = weight_parts(Strategy.DDP, shape(gpus_per_node=1), None)
    eight = weight_parts(Strategy.DDP, shape(gpus_per_node=1, optimizer_bits=8), None)
    assert eight["gpu_optimizer"] == int(7 * 10**9 * 2 * (1 + 4 / 2048))  # 8-bit moments + a scale per 2048
    paged = weight_parts(Strategy.DDP, shape(gpus_per_node=1, optimizer_bits=8, optimizer_paged=True), None)
    assert paged["gpu_optimizer"] == 0  # in host-backed pages
    in_bwd = weight_parts(Strategy.DDP, shape(gpus_per_node=1, optimizer_in_backward=True), None)
    assert in_bwd["gpu_gradients"] == 500_000_000 * 2  # the largest parameter's gradient, not all of them
    assert full["gpu_gradients"] == 7 * 10**9 * 2


def test_activation_offload_keeps_two_checkpoints_on_the_gpu() -> None:
    acts = activation_parts(shape(activation_offload=True))["gpu_activations"]
    one_layer = 2048 * (20 * H + 4 * H + 8 * 11008)  # 32 heads, 32 k/v heads: k/v as wide as h
    assert acts == 2 * 2048 * H * 2 + one_layer


def test_ddp_full_bf16_is_ten_bytes_per_parameter() -> None:
    parts = weight_parts(Strategy.DDP, shape(), None)
    assert parts == {"gpu_weights": 14 * 10**9, "gpu_gradients": 28 * 10**9, "gpu_optimizer": 28 * 10**9}


# ---- activations: packing, eager attention, MoE, logits, vision -------------------------------------------


def test_eager_attention_is_quadratic_and_packing_removes_it() -> None:
    eager = activation_parts(shape(eager_attention=True))
    # one layer (checkpointing), per head x length^2: the fp32 softmax and its bf16 copy it saved (6), and
    # its backward's fp32 gradient and the scores' bf16 gradient (6)
    assert eager["gpu_attention_scores"] == 32 * 2048**2 * (6 + 6)
    # without checkpointing every layer keeps its 6 bytes
    every = activation_parts(shape(eager_attention=True, gradient_checkpointing=False))
    assert every["gpu_attention_scores"] == 32 * 2048**2 * (6 * 32 + 6)
    doubled = activation_parts(shape(eager_attention=True, seq_len=4096))["gpu_attention_scores"]
    assert doubled == 4 * eager["gpu_attention_scores"]
    assert activation_parts(shape(eager_attention=True, packing=True))["gpu_attention_scores"] == 0
    assert activation_parts(shape())["gpu_attention_scores"] == 0  # sdpa / flash


def test_eager_attention_saves_by_dtype_and_gemma2_soft_caps() -> None:
    """fp32 weights: the softmax's output is the probabilities (no copy); Gemma-2's tanh saves one more."""
    fp32 = activation_parts(shape(eager_attention=True, weight_bytes=4))["gpu_attention_scores"]
    assert fp32 == 32 * 2048**2 * (4 + 8)
    gemma2 = activation_parts(shape(eager_attention=True, model_type="gemma2"))["gpu_attention_scores"]
    assert gemma2 == 32 * 2048**2 * (8 + 6)


def test_packing_counts_every_sample_at_max_length() -> None:
    packed = activation_parts(shape(packing=True, micro_batch=2, seq_len=4096))
    tokens = 2 * 4096
    per_token = 20 * H + 4 * H + 8 * 11008
    assert packed["gpu_activations"] == tokens * H * 2 * 32 + tokens * per_token
    assert packed["gpu_logits"] == tokens * 32000 * 12


def test_logits_of_a_150k_vocabulary_at_8k_tokens_are_several_gib() -> None:
    logits = activation_parts(shape(vocab_size=151936, seq_len=8192))["gpu_logits"]
    assert logits == 8192 * 151936 * 12
    assert 13 * 2**30 < logits < 14 * 2**30


def test_moe_activations_use_the_routed_experts_only() -> None:
    moe = shape(num_experts=64, experts_per_token=8, moe_intermediate_size=1408, intermediate_size=10944)
    tokens = 2048
    per_token = 20 * H + 4 * H + 8 * 8 * 1408 + 4 * 8 * H + 4 * 64
    assert activation_parts(moe)["gpu_activations"] == tokens * H * 2 * 32 + tokens * per_token


def test_lora_counts_rank_times_in_and_out_of_each_targeted_linear() -> None:
    """Hand-computed: q and o 2048 x 2048, k and v 2048 -> 256 (GQA), the MLP 2048 <-> 10944; an MoE layer's
    routed experts that are linears add their own adapters' widths."""
    linears = layer_linears(None, 2048, 2048, 256, 10944)
    attention = 2 * (2048 + 2048) + 2 * (2048 + 256)
    assert lora_trainable_params(linears, LORA_LINEARS, 24, 8) == 24 * 8 * (attention + 3 * (2048 + 10944))
    assert lora_trainable_params(linears, ("q_proj", "v_proj"), 24, 8) == 24 * 8 * (2 * 2048 + 2048 + 256)
    assert lora_trainable_params(linears, ("q_proj", "w1"), 24, 16) == 24 * 16 * 2 * 2048  # no w1: nothing
    experts = 64 * 3 * (2048 + 1408)
    assert lora_trainable_params(linears, ("q_proj",), 2, 8, experts) == 2 * 8 * (2 * 2048 + experts)


def test_vision_tower_activations_grow_with_max_pixels() -> None:
    vl = shape(vision_hidden_size=1280, vision_layers=32, image_pixels=1024 * 1024)
    patches = 1024 * 1024 / 14**2
    one_layer = patches * (20 * 1280 + 4 * 1280 + 8 * 4 * 1280)  # every vision head its own k/v
    assert activation_parts(vl)["gpu_vision"] == int(one_layer)  # frozen tower: no saved activations
    # a trained tower under swift's default vit_gradient_checkpointing (as gradient_checkpointing, on here):
    # each of the 32 blocks keeps its 2-byte input, one block is recomputed
    trained = replace(vl, vision_trainable=True)
    assert activation_parts(trained)["gpu_vision"] == int(patches * 1280 * 2 * 32 + one_layer)
    # --vit_gradient_checkpointing false, or the decoder's checkpointing off with the tower's unset: every block
    assert activation_parts(replace(trained, vision_checkpointing=False))["gpu_vision"] == int(one_layer * 32)
    no_gc = replace(trained, gradient_checkpointing=False)
    assert activation_parts(no_gc)["gpu_vision"] == int(one_layer * 32)
    assert activation_parts(replace(no_gc, vision_checkpointing=True))["gpu_vision"] < int(one_layer * 32) // 4


def test_a_trained_tower_without_checkpointing_names_the_lever() -> None:
    vl = shape(vision_hidden_size=1280, vision_layers=32, image_pixels=1024 * 1024, vision_trainable=True)
    changes = dict(lever_changes(replace(vl, vision_checkpointing=False)))
    assert changes["--vit_gradient_checkpointing true"].vision_checkpointing is True
    assert "--vit_gradient_checkpointing true" not in dict(lever_changes(vl))  # on already: no lever


# ---- model facts from config.json and safetensors ----------------------------------------------------------


def test_moe_config_counts_every_expert(tmp_path: Path) -> None:
    config = {
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "intermediate_size": 10944,
        "vocab_size": 102400,
        "num_attention_heads": 16,
        "n_routed_experts": 64,
        "num_experts_per_tok": 6,
        "moe_intermediate_size": 1408,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    per_layer = 4 * 2048 * 2048 + 64 * 3 * 2048 * 1408 + 2048 * 64
    assert facts.total_params == 2 * 102400 * 2048 + 24 * per_layer
    assert (facts.num_experts, facts.experts_per_token, facts.moe_intermediate_size) == (64, 6, 1408)


@pytest.mark.parametrize(
    ("architectures", "head"),
    [
        (["Qwen2ForSequenceClassification"], False),
        (["LlamaForTokenClassification"], False),
        (["GPTNeoXRewardModel"], False),
        (["AutoModelForCausalLMWithValueHead"], False),
        (["Qwen2ForCausalLM"], True),
        (["Qwen2ForCausalLM", "Qwen2ForSequenceClassification"], True),  # either head: count the larger
        (None, True),
    ],
)
def test_a_scoring_heads_model_has_no_output_layer_over_the_vocabulary(
    tmp_path: Path, architectures: list[str] | None, head: bool
) -> None:
    """A classifier's or reward model's config.json was counted with a vocabulary-wide output layer."""
    config: dict[str, object] = {"hidden_size": 512, "num_hidden_layers": 2, "intermediate_size": 1024,
                                 "vocab_size": 1000, "num_attention_heads": 8}  # fmt: skip
    if architectures is not None:
        config["architectures"] = architectures
    (tmp_path / "config.json").write_text(json.dumps(config))
    layers = 2 * (4 * 512 * 512 + 3 * 512 * 1024)
    assert probe_model(str(tmp_path), {}, tmp_path).total_params == (2 if head else 1) * 1000 * 512 + layers


@pytest.mark.parametrize("layout", ["layer_types", "full_attention_interval"])
def test_a_hybrid_decoders_linear_attention_layers_are_counted_as_gated_deltanet(tmp_path: Path, layout: str) -> None:
    """Qwen3.5's and Qwen3-Next's Gated DeltaNet layers were counted as full attention, and the gated
    attention's q projection (attn_output_gate) as one: a 9B model read as 8.6B from its config.json."""
    h, heads, kv, head_dim = 1024, 8, 2, 128
    config: dict[str, object] = {
        "hidden_size": h, "num_hidden_layers": 8, "intermediate_size": 3072, "vocab_size": 1000,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim, "attn_output_gate": True,
        "linear_num_key_heads": 4, "linear_key_head_dim": 64, "linear_num_value_heads": 8,
        "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4, "mtp_num_hidden_layers": 1,
    }  # fmt: skip
    if layout == "layer_types":
        config["layer_types"] = (
            ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]
        )
    else:
        config["full_attention_interval"] = 4  # transformers' rule: each 4th layer is full attention
    (tmp_path / "config.json").write_text(json.dumps(config))
    q, kv_width = heads * head_dim, kv * head_dim
    attention = h * 2 * q + h * q + 2 * h * kv_width  # q (and its gate), o, k, v
    keys, values = 4 * 64, 8 * 64
    conv = 2 * keys + values
    deltanet = h * conv + h * values + 2 * h * 8 + conv * 4 + values * h + 2 * 8 + 64
    mlp = 3 * h * 3072
    expected = 2 * 1000 * h + 2 * attention + 6 * deltanet + 8 * mlp  # no MTP layer: transformers drops it
    assert probe_model(str(tmp_path), {}, tmp_path).total_params == expected


@pytest.mark.parametrize(
    ("routing", "expected"),
    [
        # Mixtral's layout: no moe_intermediate_size, its intermediate_size is one expert's
        ({"num_local_experts": 8, "num_experts_per_tok": 2}, (8, 2, 1408, None)),
        # Qwen2-MoE: the shared experts' width stated
        (
            {"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 352,
             "shared_expert_intermediate_size": 1408},
            (60, 4, 352, 1408),
        ),
        # DeepSeek: n_shared_experts experts of moe_intermediate_size
        (
            {"n_routed_experts": 64, "num_experts_per_tok": 6, "moe_intermediate_size": 352, "n_shared_experts": 2},
            (64, 6, 352, 704),
        ),
        # ERNIE-4.5's spelling
        ({"moe_num_experts": 64, "moe_k": 6, "moe_intermediate_size": 352}, (64, 6, 352, None)),
        # one expert (Hunyuan's dense config) is a dense MLP
        ({"num_experts": 1, "moe_topk": 1}, (None, None, None, None)),
    ],
    ids=["mixtral", "qwen2_moe", "deepseek", "ernie", "one-expert"],
)  # fmt: skip
def test_moe_routing_is_read_in_every_spelling(tmp_path: Path, routing: dict[str, int], expected: tuple) -> None:  # type: ignore[type-arg]
    config = {"hidden_size": 512, "num_hidden_layers": 2, "intermediate_size": 1408, "vocab_size": 1000, **routing}
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    found = (facts.num_experts, facts.experts_per_token, facts.moe_intermediate_size)
    assert (*found, facts.shared_expert_intermediate_size) == expected
    experts, _, width, shared = expected
    mlp = (experts * width + (shared or 0)) * 3 * 512 + 512 * experts if experts else 3 * 512 * 1408
    assert facts.total_params == 2 * 1000 * 512 + 2 * (4 * 512 * 512 + mlp)


def test_gptq_packed_weights_are_counted_unpacked(tmp_path: Path) -> None:
    config = {"hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 100, "quantization_config": {"bits": 4}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(tmp_path / "a.safetensors", {"model.layers.0.mlp.up_proj.qweight": [8, 256]}, dtype="I32")
    write_safetensors(tmp_path / "b.safetensors", {"model.embed_tokens.weight": [100, 64]}, dtype="F16")
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert facts.quant_bits == 4
    assert facts.total_params == 8 * 256 * 8 + 6400  # eight 4-bit weights per int32


@pytest.mark.parametrize(
    ("quantization", "method"),
    [
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bnb"),
        ({"load_in_8bit": True}, "bnb"),
        ({"quant_method": "gptq", "bits": 4}, "gptq"),
        ({"quant_method": "AWQ", "w_bit": 4}, "awq"),
        ({"bits": 4}, None),
    ],
)
def test_a_checkpoints_quantization_method_is_read(tmp_path: Path, quantization: dict, method: str | None) -> None:  # type: ignore[type-arg]
    config = {"hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 100, "quantization_config": quantization}
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(tmp_path / "a.safetensors", {"model.embed_tokens.weight": [100, 64]}, dtype="F16")
    assert probe_model(str(tmp_path), {}, tmp_path).quant_method == method


@pytest.mark.parametrize(
    ("lengths", "expected"),
    [
        ({"max_position_embeddings": 32768}, 32768),
        ({"max_position_embeddings": 32768, "seq_length": 8192}, 8192),  # swift takes the smallest
        ({"text_config": {"hidden_size": 64, "max_position_embeddings": 128000}}, 128000),
        ({}, None),
    ],
)
def test_the_models_own_length_limit_is_read_as_swift_reads_it(
    tmp_path: Path, lengths: dict[str, object], expected: int | None
) -> None:
    config = {"hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 100, **lengths}
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(tmp_path / "a.safetensors", {"model.embed_tokens.weight": [100, 64]}, dtype="F16")
    assert probe_model(str(tmp_path), {}, tmp_path).max_model_len == expected


@pytest.mark.parametrize(
    ("dropout", "expected"),
    [
        ({"attention_dropout": 0.0}, False),  # Llama's and most families' default
        ({"attn_pdrop": 0.1}, True),  # GPT-2, StarCoder (gpt_bigcode)
        ({"text_config": {"hidden_size": 64, "attention_dropout": 0.05}}, True),
        ({"attention_dropout": "0.1"}, False),  # not a number: transformers would not read it as one either
        ({}, False),
        ({"model_type": "llama"}, False),  # no key: the class default, 0 for Llama
        ({"model_type": "gpt2"}, True),  # no key: GPT-2's class default is 0.1
        ({"model_type": "gpt2", "attn_pdrop": 0}, False),  # a key set wins over the class default
        ({"text_config": {"hidden_size": 64, "model_type": "gpt_bigcode"}}, True),
    ],
)
def test_the_configs_attention_dropout_is_read(tmp_path: Path, dropout: dict[str, object], expected: bool) -> None:
    config = {"hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 100, **dropout}
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(tmp_path / "a.safetensors", {"model.embed_tokens.weight": [100, 64]}, dtype="F16")
    assert probe_model(str(tmp_path), {}, tmp_path).attention_dropout is expected


def test_eager_attention_with_dropout_keeps_its_output_and_mask() -> None:
    """Hand-computed per head x length^2 and layer: the fp32 softmax (4), then without dropout its 16-bit
    copy (2; none in fp32), with dropout the dropout's output at the weights' width and a 1-byte mask."""
    assert eager_score_bytes("llama", 2) == 4 + 2 and eager_score_bytes("llama", 4) == 4
    assert eager_score_bytes("llama", 2, dropout=True) == 4 + 2 + 1
    assert eager_score_bytes("llama", 4, dropout=True) == 4 + 4 + 1
    assert eager_score_bytes("gpt_oss", 2, dropout=True) == 2 + 2 + 1  # its softmax at the weights' width
    base = shape(eager_attention=True, gradient_checkpointing=False, num_layers=4, seq_len=1024)
    plain, dropped = (activation_parts(replace(base, attention_dropout=d))["gpu_attention_scores"] for d in (0, 1))
    assert dropped - plain == 32 * 1024**2 * 4  # one more byte per score: 32 heads, in each of the 4 layers


def test_vision_tower_and_tied_embeddings_are_read(tmp_path: Path) -> None:
    config = {
        "tie_word_embeddings": True,
        "vision_config": {"embed_dim": 32, "depth": 2},
        "text_config": {"hidden_size": 16, "num_hidden_layers": 1, "vocab_size": 10},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(
        tmp_path / "m.safetensors",
        {"visual.blocks.0.attn.qkv.weight": [96, 32], "model.layers.0.mlp.up_proj.weight": [64, 16]},
    )
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert (facts.vision_params, facts.vision_hidden_size, facts.vision_layers) == (96 * 32, 32, 2)
    assert facts.tie_word_embeddings and facts.is_multimodal


# ---- the plan reads the real settings ---------------------------------------------------------------------

PATHS = LaunchPaths(python="python", worker="worker.py", config_dir="/cfg")


def plan_for(argv: list[str], options: PlanOptions | None = None, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    facts = host(gpus(8, 80), ram_gib=1024)
    swift = parse_swift_argv(["--model", "m", *argv])
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    return build_plan(swift, topo, facts, typical_shape("m", int(7e9)), env=env or {}, paths=PATHS, options=options)


def by_name(plan) -> dict:  # type: ignore[no-untyped-def]
    return {e.strategy.value: e for e in plan.estimates}


def test_swift_flags_reach_the_shape() -> None:
    facts = host(gpus(2, 80))
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    argv = [
        "--model",
        "m",
        "--torch_dtype",
        "float32",
        "--quant_method",
        "bnb",
        "--quant_bits",
        "4",
        "--packing",
        "true",
        "--attn_impl",
        "eager",
    ]
    s = train_shape(parse_swift_argv(argv), typical_shape("m", int(7e9)), topo)
    assert (s.weight_bytes, s.quant_bits, s.packing, s.eager_attention, s.gpus_per_node) == (4, 4, True, True, 2)
    assert s.quant_method == "bnb"
    assert s.quantized_params == int(7e9) - 2 * 152064 * 3584  # all but the untied embeddings
    # swift 4.6 quantizes nothing without --quant_method: the weights count unquantized
    unset = train_shape(parse_swift_argv(["--model", "m", "--quant_bits", "4"]), typical_shape("m", int(7e9)), topo)
    assert (unset.quant_bits, unset.quant_method) == (None, None)
    full = train_shape(
        parse_swift_argv(["--model", "m", "--tuner_type", "full", "--quant_method", "bnb", "--quant_bits", "4"]),
        typical_shape("m", int(7e9)),
        topo,
    )
    assert full.quant_bits is None  # a full fine-tune cannot train quantized weights
    paged = train_shape(
        parse_swift_argv(["--model", "m", "--optim", "paged_adamw_8bit"]), typical_shape("m", int(7e9)), topo
    )
    assert (paged.optimizer_bits, paged.optimizer_paged) == (8, True)
    eight = train_shape(
        parse_swift_argv(["--model", "m", "--optim", "adamw_bnb_8bit"]), typical_shape("m", int(7e9)), topo
    )
    assert (eight.optimizer_bits, eight.optimizer_paged) == (8, False)
    assert (full.optimizer_bits, full.optimizer_paged) == (32, False)
    # accumulation: as given, else swift's default for the world size (16 / micro-batch / 2 processes)
    for given, micro, accum in ((None, 1, 8), (None, 8, 1), (None, 16, 1), ("3", 8, 3)):
        argv = ["--model", "m", "--per_device_train_batch_size", str(micro)]
        argv += ["--gradient_accumulation_steps", given] if given else []
        assert train_shape(parse_swift_argv(argv), typical_shape("m", int(7e9)), topo).grad_accum == accum


def test_users_own_zero2_config_is_what_the_estimate_reads() -> None:
    mine = {
        "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8, "overlap_comm": True}
    }
    shipped = by_name(plan_for(["--tuner_type", "full"]))["zero2"]
    own = by_name(
        plan_for(
            ["--tuner_type", "full", "--deepspeed", "my.json"],
            PlanOptions(user_deepspeed_rung="zero2", user_deepspeed_config=mine),
        )
    )["zero2"]
    assert own.parts["gpu_zero_buckets"] == 2 * 500_000_000 * 2 + 500_000_000 * 2
    assert own.parts["gpu_zero_buckets"] > shipped.parts["gpu_zero_buckets"]


def test_parts_add_up_and_ddp_is_estimated() -> None:
    plan = plan_for(["--tuner_type", "full"])
    estimates = by_name(plan)
    assert set(estimates) == {"zero2", "zero3", "zero3_offload", "ddp", "device_map"}  # 8 GPUs: device_map too
    for est in plan.estimates:
        assert sum(v for k, v in est.parts.items() if k.startswith("gpu_")) == est.gpu_need_bytes
        assert est.parts["cpu_model_states"] + est.parts["cpu_processes"] == est.cpu_need_bytes
    assert estimates["ddp"].gpu_need_bytes > estimates["zero2"].gpu_need_bytes
    assert plan.strategy != "ddp"


def test_levers_name_the_saving_of_halving_the_micro_batch() -> None:
    s = shape(micro_batch=4, seq_len=4096)
    zero = settings("zero2")
    found = dict(levers(Strategy.ZERO2, s, zero))
    base = estimate(Strategy.ZERO2, s, None, None, zero).gpu_need_bytes
    half = estimate(Strategy.ZERO2, replace(s, micro_batch=2), None, None, zero).gpu_need_bytes
    assert found["micro-batch 4 -> 2"] == base - half > 0
    assert list(found) == sorted(found, key=lambda k: -found[k])


@pytest.mark.parametrize(
    ("vision", "expected"),
    [
        # Qwen2-VL-7B: vision_config's hidden_size is the language model's; the tower is embed_dim wide
        ({"embed_dim": 1280, "hidden_size": 3584, "mlp_ratio": 4, "depth": 32, "patch_size": 14}, (1280, 32, 5120, 14)),
        # Qwen2.5-VL-7B and Qwen3-VL: the width is hidden_size, the MLP's intermediate_size
        ({"hidden_size": 1280, "intermediate_size": 3420, "depth": 32, "patch_size": 14}, (1280, 32, 3420, 14)),
        ({"hidden_size": 1152, "intermediate_size": 4304, "depth": 27, "patch_size": 16}, (1152, 27, 4304, 16)),
        # InternVL's patch side as a pair
        ({"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "patch_size": [14, 14]},
         (1024, 24, 4096, 14)),
    ],
    ids=["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "internvl"],
)  # fmt: skip
def test_the_vision_towers_shape_is_read_from_vision_config(
    tmp_path: Path, vision: dict[str, object], expected: tuple[int, int, int, int]
) -> None:
    config = {"hidden_size": 3584, "num_hidden_layers": 2, "intermediate_size": 18944, "vocab_size": 1000,
              "vision_config": vision}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    found = (facts.vision_hidden_size, facts.vision_layers, facts.vision_intermediate_size, facts.vision_patch_size)
    assert found == expected


def test_a_measured_vision_tower_counts_its_own_bytes_per_patch() -> None:
    """Qwen3-VL's tower (22 vh + 4 vi per patch and block, 16-pixel patches), against a tower not measured
    (a Llama layer at full width: 24 vh + 8 vi, 14-pixel patches where config.json gives none)."""
    pixels = 1024 * 1024
    vl = shape(vision_hidden_size=1152, vision_layers=27, vision_intermediate_size=4304, image_pixels=pixels,
               vision_patch_size=16, vision_type="qwen3_vl")  # fmt: skip
    assert activation_parts(vl)["gpu_vision"] == int(pixels / 16**2 * (22 * 1152 + 4 * 4304))
    other = replace(vl, vision_type="llava", vision_patch_size=14, vision_intermediate_size=None)
    assert activation_parts(other)["gpu_vision"] == int(pixels / 14**2 * (24 * 1152 + 8 * 4 * 1152))


@pytest.mark.parametrize(
    ("model_type", "tower_type", "family"),
    [
        ("qwen3_vl_moe", "qwen3_vl", "qwen3_vl"),  # the model's own measured tower first
        ("gemma3", "siglip_vision_model", "siglip_vision_model"),  # else its tower's, shared by families
        ("llava", "clip_vision_model", "clip_vision_model"),
        ("internvl_chat", "intern_vit_6b", "internvl_vision"),  # remote-code names of measured towers
        ("minicpmv", "siglip", "siglip_vision_model"),
        ("smolvlm", "smolvlm_vision", "idefics3_vision"),
        ("janus", "janus_vision_model", None),  # not measured: a Llama layer's bytes
        ("llava", None, None),
    ],
)
def test_a_vision_tower_is_measured_by_the_model_or_by_its_own_type(
    model_type: str, tower_type: str | None, family: str | None
) -> None:
    assert vision_family(model_type, tower_type) == family
    expected = VISION_MEASURED[family] if family else VISION_DEFAULT
    assert vision_layer_bytes(family) == expected


def test_a_plan_counts_a_siglip_tower_with_siglips_bytes(tmp_path: Path) -> None:
    """A Gemma 3 layout read from config.json: vision_config names its tower siglip_vision_model, so the
    plan counts 16 vh + 4 vi per patch and block (measured), not a Llama layer's 24 vh + 8 vi."""
    config = {
        "model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34,
                        "intermediate_size": 10240, "vocab_size": 262208},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                          "num_hidden_layers": 27, "patch_size": 14},
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert facts.vision_model_type == "siglip_vision_model"
    topo = resolve_topology(TopologyRequest(), {}, gpus(1, 80), free_port=1)
    argv = ["--model", str(tmp_path), "--freeze_vit", "false", "--vit_gradient_checkpointing", "false"]
    s = train_shape(parse_swift_argv(argv), facts, topo)
    assert s.vision_type == "siglip_vision_model"
    patches = s.image_pixels / 14**2
    assert activation_parts(s)["gpu_vision"] == int(patches * (16 * 1152 + 4 * 4304) * 27)
