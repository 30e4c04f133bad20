"""The memory estimates of one run: the shape its argv and the facts give, and each strategy's estimate.

Contract: pure; every fact comes in as a value. `train_shape` turns swift's argv (through
launcher.plan.features) and the model's facts into the TrainShape launcher.plan.estimate counts;
`estimates_for` gives each strategy's estimate for a plan (at the max_length worst case and at the sampled
data's lengths), `attempt_estimate` the one an attempt runs with, and the device_map functions the split
of one process over several GPUs (launcher.plan.device_map). launcher.plan.build assembles the plan from
these; the supervisor asks for an attempt's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from launcher.model import (
    STRATEGY_ORDER,
    DataFacts,
    DataLengths,
    DeviceMapLayout,
    Estimate,
    HostFacts,
    ModelFacts,
    Source,
    Sourced,
    Strategy,
    Topology,
)
from launcher.plan.batch import swift_default_accum
from launcher.plan.data_lengths import TOKENS_PER_CHAR, data_lengths, wide_char_tokens
from launcher.plan.device_map import Pieces, estimate_device_map, parse_max_memory, pieces_of
from launcher.plan.device_map import levers as device_map_levers
from launcher.plan.ds_config import SHIPPED_ZERO, estimated_as, rung_of, zero_settings
from launcher.plan.estimate import VISION_PATCH, TrainShape, estimate, levers, planned_length
from launcher.plan.features import Features, is_lora, quantization_of, read_features
from launcher.plan.image_tiles import image_merge
from launcher.plan.layer_bytes import vision_family
from launcher.plan.swift_args import SwiftArgs

DTYPE_BYTES = {"float32": 4, "fp32": 4, "f32": 4, "float16": 2, "fp16": 2, "f16": 2, "bfloat16": 2, "bf16": 2}


def weight_bytes_of(swift: SwiftArgs, model: ModelFacts) -> int:
    """--torch_dtype, else the checkpoint's dtype (swift loads it as stored), else bfloat16."""
    dtype = (swift.get("torch_dtype") or model.dtype or "bfloat16").lower().replace("torch.", "")
    return DTYPE_BYTES.get(dtype, 2)


def checkpoint_floor_bytes(swift: SwiftArgs, model: ModelFacts | None) -> tuple[int, str] | None:
    """The least one checkpoint of a full fine-tune takes on disk, and what it counts: its weights at the
    training dtype, and unless --save_only_model Adam's two moments, each at least as large (LLaMA-Factory's
    freeze tuning: the weights alone, its moments are its few trained layers'); None for LoRA (adapters are
    small) or an unknown size. A floor, not an estimate: DeepSpeed's fp32 master weights come on top."""
    from launcher.plan.features import is_lora, tuner_of

    if model is None or model.total_params is None or is_lora(swift):
        return None
    weights = model.total_params * weight_bytes_of(swift, model)
    if swift.get_bool("save_only_model", False) or tuner_of(swift) == "freeze":
        return weights, "its weights"
    return 3 * weights, "its weights and Adam's two moments"


def quantizable_params(model: ModelFacts, total: int) -> int:
    """The decoder's linear weights: everything but the embeddings, the output head and the vision tower."""
    embeddings = (model.vocab_size or 0) * (model.hidden_size or 0) * (1 if model.tie_word_embeddings else 2)
    return max(total - embeddings - model.vision_params, 0)


def features_of(swift: SwiftArgs, model: ModelFacts, topology: Topology, env: Mapping[str, str] | None) -> Features:
    """swift's training features for this model and topology, read once per plan (launcher.plan.features)."""
    return read_features(swift, model, workers_env(swift, env), topology.world_size)


def train_shape(
    swift: SwiftArgs,
    model: ModelFacts,
    topology: Topology,
    env: Mapping[str, str] | None = None,
    features: Features | None = None,
) -> TrainShape:
    """What the estimate needs of the model and the run; `features` where the caller read them already."""
    features = features if features is not None else features_of(swift, model, topology, env)
    total = model.total_params or 0
    lora = is_lora(swift)
    quant_bits, quant_method = quantization_of(swift, model) if lora else (None, None)
    largest = model.largest_layer_params or (total // max(model.num_layers or 1, 1))
    checkpointing = swift.get_bool("gradient_checkpointing", True)
    # unset, swift checkpoints the tower as the decoder: left None, estimate.vision_checkpointed follows
    # gradient_checkpointing, also where a lever turns that on
    vit_checkpointing = swift.get("vit_gradient_checkpointing")
    return TrainShape(
        total_params=total,
        trainable_params=features.trainable_params,
        largest_layer_params=largest,
        hidden_size=model.hidden_size,
        num_layers=model.num_layers,
        vocab_size=model.vocab_size,
        micro_batch=swift.batch.micro_batch,
        # as swift computes an unset one for this world size; safe-sft's own (launcher.plan.batch) keeps
        # the global batch and differs from it only by rounding
        grad_accum=swift.batch.grad_accum or swift_default_accum(swift.batch.micro_batch, topology.world_size),
        seq_len=planned_length(swift.batch.max_length),
        gradient_checkpointing=checkpointing,
        gpus_per_node=max(topology.nproc_per_node.value, 1),
        nnodes=topology.nnodes.value,
        intermediate_size=model.intermediate_size,
        num_heads=model.num_attention_heads,
        weight_bytes=weight_bytes_of(swift, model),
        quant_bits=quant_bits,
        quant_method=quant_method,
        quantized_params=quantizable_params(model, total),
        eager_attention=features.eager_attention,
        attention_dropout=model.attention_dropout,
        adapters=features.adapters,
        packing=features.packing,
        num_experts=model.num_experts,
        experts_per_token=model.experts_per_token,
        moe_intermediate_size=model.moe_intermediate_size,
        shared_expert_intermediate_size=model.shared_expert_intermediate_size,
        vision_hidden_size=model.vision_hidden_size,
        vision_layers=model.vision_layers,
        image_pixels=features.image_pixels,
        vision_trainable=features.vision_trainable,
        vision_checkpointing=None
        if vit_checkpointing is None
        else swift.get_bool("vit_gradient_checkpointing", checkpointing),
        vision_intermediate_size=model.vision_intermediate_size,
        vision_patch_size=model.vision_patch_size or VISION_PATCH,
        vision_merge=image_merge(model.model_type),
        vision_type=vision_family(model.model_type, model.vision_model_type),
        fused_cross_entropy=swift.get_bool("use_liger_kernel", False),
        vocab_logits=(swift.get("task_type") or "causal_lm") == "causal_lm",
        optimizer_bits=8 if "8bit" in (swift.get("optim") or "").lower() else 32,  # adamw_bnb_8bit, ...
        optimizer_paged=(swift.get("optim") or "").lower().startswith("paged_"),  # paged_adamw_8bit, ...
        sequence_parallel=features.sequence_parallel,
        sequence_ring=features.sequence_ring,
        padding_free=features.padding_free,
        logits_on_labels=features.logits_on_labels,
        experts_impl=features.experts_impl,
        loss_chunk_tokens=features.loss_chunk_tokens,
        num_kv_heads=model.num_key_value_heads,
        head_dim=model.head_dim,
        model_type=model.decoder_type,
    )


def workers_env(swift: SwiftArgs, env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment swift's workers see: the swift config's ENV block fills what is not already set."""
    return {**swift.config_env, **(env or {})}


def lengths_of(swift: SwiftArgs, shape: TrainShape | None, data: DataFacts | None) -> DataLengths | None:
    """The sampled data's lengths at this run's max_length, truncation, micro-batch and image budget."""
    if data is None or not data.datasets:
        return None
    packing = swift.get_bool("packing", False)
    max_length = shape.seq_len if shape else planned_length(swift.batch.max_length)
    return data_lengths(
        data,
        max_length=max_length,
        # --max_length unset: swift's limit is the model's, far above the length assumed here, so a longer
        # row is trained, not dropped: count it at the assumed length, as the worst case does
        truncation_strategy=swift.get("truncation_strategy") or ("delete" if swift.has("max_length") else "right"),
        max_length_assumed=not swift.has("max_length"),
        micro_batch=swift.batch.micro_batch,
        padding_free=packing or swift.get_bool("padding_free", False),
        packing=packing,
        image_tokens=shape.image_pixels // (shape.vision_patch_size * shape.vision_merge) ** 2 if shape else 0,
        wide=wide_char_tokens(shape.model_type, shape.vocab_size) if shape else TOKENS_PER_CHAR["wide"],
    )


def at_data(shape: TrainShape, lengths: DataLengths | None) -> TrainShape | None:
    """The shape of one micro-batch at the data's lengths; None where not every dataset was sampled."""
    if lengths is None or not lengths.complete or lengths.batch_tokens is None:
        return None
    labels = lengths.batch_label_tokens  # counted where use_logits_to_keep keeps label positions (padding-free)
    fraction = min(labels / lengths.batch_tokens, 1.0) if labels is not None and lengths.batch_tokens else 1.0
    return replace(
        shape,
        batch_tokens=lengths.batch_tokens,
        batch_longest=lengths.batch_longest,
        batch_images=lengths.batch_images,
        label_fraction=fraction,
    )


def estimates_for(
    swift: SwiftArgs,
    model: ModelFacts | None,
    topology: Topology,
    host: HostFacts,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
    lengths: DataLengths | None = None,
    shape: TrainShape | None = None,
) -> tuple[Estimate, ...]:
    """The zero2, zero3, zero3_offload estimates (in the planner's order), then plain DDP's; each also at the
    data's sampled lengths where every dataset was sampled. `configs`: the DeepSpeed config each rung's
    estimate reads (the shipped ones where None); `shape`: the run's, where the caller has it."""
    if model is None or not model.total_params or not topology.gpus:
        return ()
    shape = shape if shape is not None else train_shape(swift, model, topology, env)
    sampled = at_data(shape, lengths)
    gpu_free = min(g.free_bytes for g in topology.gpus)
    configs = configs if configs is not None else SHIPPED_ZERO
    out = []
    for strategy in (*STRATEGY_ORDER, Strategy.DDP):
        zero = None if strategy is Strategy.DDP else zero_settings(configs[strategy.value], shape.hidden_size)
        est = estimate(strategy, shape, gpu_free, host.memory.available_bytes, zero)
        est = replace(est, levers=levers(strategy, shape, zero))
        if sampled is not None:
            data_est = estimate(strategy, sampled, gpu_free, host.memory.available_bytes, zero)
            est = replace(est, gpu_need_at_data_bytes=data_est.gpu_need_bytes, parts_at_data=data_est.parts)
        out.append(est)
    return tuple(out)


def attempt_estimate(
    swift: SwiftArgs,
    model: ModelFacts | None,
    topology: Topology,
    host: HostFacts,
    config: Mapping[str, Any] | None,
    env: Mapping[str, str] | None = None,
    assumed_length: int | None = None,
) -> Estimate | None:
    """The estimate for one attempt as it runs: its argv (micro-batch, length, checkpointing, MAX_PIXELS) and
    the DeepSpeed config it runs with (None: no DeepSpeed). `assumed_length` is the plan's length for an unset
    --max_length (Plan.assumed_length), so an attempt is estimated as its plan was. None when the model size or
    the GPUs are unknown."""
    if model is None or not model.total_params or not topology.gpus:
        return None
    if assumed_length:
        swift = swift.with_defaults({"max_length": str(assumed_length)})
    if config is None and is_device_map(topology):
        found = device_map_estimate(swift, model, topology, host, env)
        return found[0] if found is not None else None
    shape = train_shape(swift, model, topology, env)
    gpu_free = min(g.free_bytes for g in topology.gpus)
    if config is None:
        return estimate(Strategy.DDP, shape, gpu_free, host.memory.available_bytes)
    zero = zero_settings(config, shape.hidden_size)
    strategy = Strategy(estimated_as(rung_of(config)))  # the column the plan estimates this config in
    return estimate(strategy, shape, gpu_free, host.memory.available_bytes, zero)


def is_device_map(topology: Topology) -> bool:
    """swift's own rule (swift.utils.env.is_mp): one process per node with several GPUs splits the model."""
    return topology.nproc_per_node.value == 1 and len(topology.gpus) > 1


def device_map_pieces(
    swift: SwiftArgs, model: ModelFacts | None, topology: Topology, env: Mapping[str, str] | None = None
) -> tuple[TrainShape, Pieces] | None:
    """The run's shape in one process and the model's pieces as transformers places them over the GPUs."""
    if model is None or not model.total_params or len(topology.gpus) < 2:
        return None
    one = replace(topology, nproc_per_node=Sourced(1, Source.AUTO))
    # one process cannot share a sample's tokens with peers: --sequence_parallel_size is for processes
    shape = replace(train_shape(swift, model, one, env), sequence_parallel=1)
    pieces = pieces_of(shape, tied=model.tie_word_embeddings, vision_params=model.vision_params)
    return None if pieces is None else (shape, pieces)


def device_map_estimate(
    swift: SwiftArgs,
    model: ModelFacts | None,
    topology: Topology,
    host: HostFacts | None,
    env: Mapping[str, str] | None = None,
    budgets: tuple[int, ...] | None = None,
) -> tuple[Estimate, DeviceMapLayout] | None:
    """The device_map estimate over the topology's GPUs: swift's --max_memory where it gives one (or
    `budgets`), else the balanced split. None without the model's shapes or with fewer than two GPUs."""
    found = device_map_pieces(swift, model, topology, env)
    return None if found is None else _placed(swift, topology, host, *found, budgets=budgets)


def _placed(
    swift: SwiftArgs,
    topology: Topology,
    host: HostFacts | None,
    shape: TrainShape,
    pieces: Pieces,
    budgets: tuple[int, ...] | None = None,
) -> tuple[Estimate, DeviceMapLayout] | None:
    """The pieces placed over the topology's GPUs within `budgets` (swift's --max_memory where None)."""
    if budgets is None:
        budgets = parse_max_memory(swift.get("max_memory"), len(topology.gpus))
    free = tuple(g.free_bytes for g in topology.gpus)
    cpu_free = host.memory.available_bytes if host is not None else None
    return estimate_device_map(shape, pieces, free, cpu_free, budgets=budgets)


def device_map_plan_estimate(
    swift: SwiftArgs, model: ModelFacts | None, topology: Topology, host: HostFacts, env: Mapping[str, str]
) -> tuple[Estimate, DeviceMapLayout] | None:
    """The plan's device_map estimate: the balanced split, with its levers (each change's split rebalanced)."""
    found = device_map_pieces(swift, model, topology, env)
    if found is None or model is None:
        return None
    shape, pieces = found
    placed = _placed(swift, topology, host, shape, pieces)
    if placed is None:
        return None
    free = tuple(g.free_bytes for g in topology.gpus)
    saves = device_map_levers(shape, free, tied=model.tie_word_embeddings, vision_params=model.vision_params)
    return replace(placed[0], levers=saves), placed[1]
