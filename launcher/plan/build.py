"""Assemble the launch plan from facts: estimates, strategy, environment and the exact command.

`build_plan` is pure: every fact comes in as a value (probed by launcher.probe, or assumed from flags),
and the Plan that comes out is everything the runner needs, and everything `safe-sft plan` shows.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.errors import SafeSftError
from launcher.model import (
    STRATEGY_ORDER,
    DataFacts,
    DataLengths,
    DeviceMapLayout,
    EnvSetting,
    Estimate,
    HostFacts,
    ModelFacts,
    Plan,
    Source,
    Sourced,
    Strategy,
    Topology,
)
from launcher.plan.batch import accum_to_pass, describe, keep_global_batch
from launcher.plan.data_lengths import PERCENTILE, data_lengths
from launcher.plan.device_map import Pieces, estimate_device_map, max_memory_arg, parse_max_memory, pieces_of
from launcher.plan.device_map import levers as device_map_levers
from launcher.plan.ds_config import SHIPPED_ZERO, zero_settings
from launcher.plan.estimate import (
    DEFAULT_SEQ_LEN,
    PATCH_MERGE,
    VISION_PATCH,
    TrainShape,
    describe_activations,
    estimate,
    levers,
)
from launcher.plan.features import Features, is_lora, read_features
from launcher.plan.nccl import nccl_settings
from launcher.plan.strategy import Choice, choose_layout, choose_strategy
from launcher.plan.strategy import describe as describe_need
from launcher.plan.swift_args import SwiftArgs
from launcher.plan.unset_length import assumed_length, unset_note
from launcher.plan.watchdog import Watchdog, added_ddp_timeout

NO_PIN_CONFIG_NAME = "zero3_offload_nopin.json"


def no_pin_config_path(output_dir: str) -> str:
    """The one place the zero3_offload copy with pin_memory off lives: safe-sft's folder of the output dir."""
    return posixpath.join(output_dir, "safe-sft", NO_PIN_CONFIG_NAME)


@dataclass(frozen=True)
class LaunchPaths:
    python: str  # the interpreter that runs torchrun and swift
    worker: str  # launcher/worker.py: swift's sft entry under torchelastic's @record
    config_dir: str  # where zero2.json, zero3.json, zero3_offload.json live
    worker_args: tuple[str, ...] = ()  # between the worker and the trainer's arguments (an HF script's path)


@dataclass(frozen=True)
class PlanOptions:
    force: bool = False
    nccl_overrides: Mapping[str, str] | None = None
    route_interface: str | None = None
    user_deepspeed_rung: str | None = None  # the ZeRO rung of the user's own --deepspeed config
    user_deepspeed_config: Mapping[str, Any] | None = None  # its JSON: the estimate of its rung reads it
    deepspeed_configs: Mapping[str, Mapping[str, Any]] | None = None  # the shipped configs, by rung name
    watchdog: Watchdog = field(default_factory=Watchdog)
    layout: str | None = None  # --layout: device_map | processes | auto (None: auto)
    nproc_given: bool = False  # safe-sft's --nproc was given: one process per GPU, as asked
    backend: str = "swift"  # the trainer (launcher/backends), named in the plan
    device_map_allowed: bool = True  # the trainer can run one process over several GPUs
    backend_note: str | None = None  # the knobs the ladder leaves alone for this trainer
    backend_env: tuple[EnvSetting, ...] = ()  # what the trainer's own launcher sets for its ranks


def layout_request(swift: SwiftArgs, env: Mapping[str, str], options: PlanOptions, gpus: int = 0) -> tuple[str, str]:
    """(auto | device_map | processes, what asked for it): the user's explicit choice of how the GPUs are used.

    Several processes: NPROC_PER_NODE (env or the config's ENV block), safe-sft's --nproc, or --deepspeed
    (DeepSpeed needs one process per GPU), or --sequence_parallel_size over 1. One process over the GPUs:
    swift's --device_map. --layout beats both."""
    if options.layout not in (None, "auto"):
        return str(options.layout), f"--layout {options.layout}"
    nproc = env.get("NPROC_PER_NODE") or swift.config_env.get("NPROC_PER_NODE")
    if nproc is not None and nproc.strip() == "1" and gpus > 1:
        return "device_map", f"NPROC_PER_NODE=1 with {gpus} visible GPUs"
    if nproc is not None:
        return "processes", f"NPROC_PER_NODE={nproc}"
    if options.nproc_given:
        return "processes", "--nproc"
    sequence_parallel = swift.get_int("sequence_parallel_size") or 1
    if sequence_parallel > 1:  # swift splits each sample over processes: it needs one process per GPU
        return "processes", f"--sequence_parallel_size {sequence_parallel}"
    if swift.get("deepspeed"):
        return "processes", f"--deepspeed {swift.get('deepspeed')}"
    if swift.get("device_map"):
        return "device_map", f"--device_map {swift.get('device_map')}"
    return "auto", ""


def is_device_map(topology: Topology) -> bool:
    """swift's own rule (swift.utils.env.is_mp): one process per node with several GPUs splits the model."""
    return topology.nproc_per_node.value == 1 and len(topology.gpus) > 1


def as_device_map(topology: Topology, why: str) -> Topology:
    """The topology of a device_map run: one process on this node, every selected GPU visible to it."""
    note = f"one process, the model split over {len(topology.gpus)} GPUs (device_map): {why}"
    return replace(topology, nproc_per_node=Sourced(1, Source.AUTO, note), swift_nproc_per_node=1)


def device_map_pieces(
    swift: SwiftArgs, model: ModelFacts | None, topology: Topology, env: Mapping[str, str] | None = None
) -> tuple[TrainShape, Pieces] | None:
    """The run's shape in one process and the model's pieces as transformers places them over the GPUs."""
    if model is None or not model.total_params or len(topology.gpus) < 2:
        return None
    one = replace(topology, nproc_per_node=Sourced(1, Source.AUTO))
    shape = train_shape(swift, model, one, env)
    # swift's --quant_method bnb or quanto quantizes at load: transformers then keeps 10 % of
    # every max_memory budget; a pre-quantized checkpoint (GPTQ, AWQ) does not
    quantized = quantized_at_load(swift)
    at_load = quantized is not None and quantized[1] in ("bnb", "quanto")
    pieces = pieces_of(
        shape, tied=model.tie_word_embeddings, vision_params=model.vision_params, quantized_at_load=at_load
    )
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


def output_dir_of(swift: SwiftArgs) -> str:
    """swift's output_dir: the given one, or `output/<model name>` as swift derives it."""
    given = swift.get("output_dir")
    if given:
        return given
    model = (swift.get("model") or "model").rstrip("/")
    return posixpath.join("output", posixpath.basename(model))


DTYPE_BYTES = {"float32": 4, "fp32": 4, "f32": 4, "float16": 2, "fp16": 2, "f16": 2, "bfloat16": 2, "bf16": 2}


def weight_bytes_of(swift: SwiftArgs, model: ModelFacts) -> int:
    """--torch_dtype, else the checkpoint's dtype (swift loads it as stored), else bfloat16."""
    dtype = (swift.get("torch_dtype") or model.dtype or "bfloat16").lower().replace("torch.", "")
    return DTYPE_BYTES.get(dtype, 2)


# swift 4.6 quantizes at load only with --quant_method set (swift/arguments/base_args/quant_args.py
# get_quantization_config: no method, no quantization_config); fp8 takes no --quant_bits.
LOAD_TIME_METHODS = frozenset({"bnb", "hqq", "eetq", "quanto"})


def quantized_at_load(swift: SwiftArgs) -> tuple[int, str] | None:
    """(bits, method) where swift quantizes the model as it loads it: --quant_method with --quant_bits."""
    bits, method = swift.get_int("quant_bits"), swift.get("quant_method")
    return (bits, method) if method in LOAD_TIME_METHODS and bits in (2, 3, 4, 8) else None


def quantization_of(swift: SwiftArgs, model: ModelFacts) -> tuple[int | None, str | None]:
    """The frozen weights' (bits, method: bnb, hqq, gptq, awq, ...): swift's quantization at load, else a
    pre-quantized checkpoint's."""
    return quantized_at_load(swift) or (model.quant_bits, model.quant_method)


def quantizable_params(model: ModelFacts, total: int) -> int:
    """The decoder's linear weights: everything but the embeddings, the output head and the vision tower."""
    embeddings = (model.vocab_size or 0) * (model.hidden_size or 0) * (1 if model.tie_word_embeddings else 2)
    return max(total - embeddings - model.vision_params, 0)


def features_of(swift: SwiftArgs, model: ModelFacts, topology: Topology, env: Mapping[str, str] | None) -> Features:
    """swift's training features for this model and topology, read once per plan (launcher.plan.features)."""
    return read_features(swift, model, _with_config_env(swift, env), topology.world_size)


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
        micro_batch=swift.get_int("per_device_train_batch_size", 1) or 1,
        seq_len=swift.get_int("max_length", DEFAULT_SEQ_LEN) or DEFAULT_SEQ_LEN,
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
        vision_type=model.model_type,
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


def _with_config_env(swift: SwiftArgs, env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment swift's workers see: the swift config's ENV block fills what is not already set."""
    return {**swift.config_env, **(env or {})}


def lengths_of(swift: SwiftArgs, shape: TrainShape | None, data: DataFacts | None) -> DataLengths | None:
    """The sampled data's lengths at this run's max_length, truncation, micro-batch and image budget."""
    if data is None or not data.datasets:
        return None
    packing = swift.get_bool("packing", False)
    max_length = shape.seq_len if shape else swift.get_int("max_length", DEFAULT_SEQ_LEN) or DEFAULT_SEQ_LEN
    return data_lengths(
        data,
        max_length=max_length,
        # --max_length unset: swift's limit is the model's, far above the length assumed here, so a longer
        # row is trained, not dropped: count it at the assumed length, as the worst case does
        truncation_strategy=swift.get("truncation_strategy") or ("delete" if swift.has("max_length") else "right"),
        max_length_assumed=not swift.has("max_length"),
        micro_batch=swift.get_int("per_device_train_batch_size", 1) or 1,
        padding_free=packing or swift.get_bool("padding_free", False),
        packing=packing,
        image_tokens=shape.image_pixels // (shape.vision_patch_size * PATCH_MERGE) ** 2 if shape else 0,
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


def zero_configs(options: PlanOptions) -> dict[str, Mapping[str, Any]]:
    """The config each strategy's estimate reads: the shipped ones, the user's own for its rung."""
    configs: dict[str, Mapping[str, Any]] = {**SHIPPED_ZERO, **(options.deepspeed_configs or {})}
    if options.user_deepspeed_config is not None and options.user_deepspeed_rung in configs:
        configs[options.user_deepspeed_rung] = options.user_deepspeed_config
    return configs


def estimates_for(
    swift: SwiftArgs,
    model: ModelFacts | None,
    topology: Topology,
    host: HostFacts,
    options: PlanOptions | None = None,
    env: Mapping[str, str] | None = None,
    lengths: DataLengths | None = None,
    shape: TrainShape | None = None,
) -> tuple[Estimate, ...]:
    """The zero2, zero3, zero3_offload estimates (in the planner's order), then plain DDP's; each also at the
    data's sampled lengths where every dataset was sampled. `shape`: the run's, where the caller has it."""
    if model is None or not model.total_params or not topology.gpus:
        return ()
    shape = shape if shape is not None else train_shape(swift, model, topology, env)
    sampled = at_data(shape, lengths)
    gpu_free = min(g.free_bytes for g in topology.gpus)
    configs = zero_configs(options or PlanOptions())
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
    if zero.stage == 3:
        strategy = Strategy.ZERO3_OFFLOAD if zero.offload_param or zero.offload_optimizer else Strategy.ZERO3
    else:
        strategy = Strategy.ZERO2
    return estimate(strategy, shape, gpu_free, host.memory.available_bytes, zero)


def memlock_too_low(host: HostFacts, need_bytes: int) -> bool:
    """True when the hard memlock limit is known, finite and below what pinned offload buffers need."""
    memlock = host.limits.memlock
    return memlock is not None and memlock.hard is not None and memlock.hard < need_bytes


def build_plan(
    swift: SwiftArgs,
    topology: Topology,
    host: HostFacts,
    model: ModelFacts | None,
    *,
    env: Mapping[str, str],
    paths: LaunchPaths,
    options: PlanOptions | None = None,
    data: DataFacts | None = None,
) -> Plan:
    options = options or PlanOptions()
    warnings: list[str] = list(host.warnings) + list(topology.warnings) + list(model.warnings if model else ())
    warnings.extend(data.warnings if data else ())
    notes: list[str] = []
    if host.disk_problem:
        warnings.append(f"output dir {output_dir_of(swift)}: {host.disk_problem} (the run path refuses to start)")
    uses_gpus = bool(topology.gpus) and not swift.get_bool("use_cpu", False)
    assumed = assumed_length(swift, model, data, _with_config_env(swift, env)) if uses_gpus else None
    if swift.get("seq_len") is None and swift.get("max_length") is None and uses_gpus:
        notes.append(unset_note(assumed, model))
    # the estimates read the assumed length as swift's max_length; the command keeps the user's argv
    sized = swift.with_defaults({"max_length": str(assumed)}) if assumed else swift

    if not host.network.known:
        notes.append(
            "planned for an assumed machine: its InfiniBand, network interfaces, NCCL settings, memlock and "
            "/dev/shm limits are unknown here; safe-sft decides them on that machine when it runs there"
        )
    features = features_of(sized, model, topology, env) if model is not None and topology.gpus else None
    shape = train_shape(sized, model, topology, env, features) if model and model.total_params and features else None
    lengths = lengths_of(sized, shape, data)
    estimates = estimates_for(sized, model, topology, host, options, env, lengths, shape)
    if features is not None and uses_gpus:
        warnings.extend(features.warnings)
    choice = choose_strategy(
        estimates,
        user_deepspeed=swift.get("deepspeed"),
        user_rung=options.user_deepspeed_rung,
        uses_gpus=uses_gpus,
        is_lora=is_lora(swift),
    )
    if options.backend_note:
        notes.append(options.backend_note)
    if options.device_map_allowed:
        choice, estimates, topology, split, dm_warnings = _with_device_map(
            choice, estimates, sized, topology, host, model, env, options, uses_gpus
        )
    elif options.layout == "device_map":
        raise SafeSftError(
            f"--layout device_map: the {options.backend} backend runs one process per GPU",
            "drop --layout, or use --layout processes",
        )
    else:
        split, dm_warnings = None, []
    device_map = choice.strategy == Strategy.DEVICE_MAP.value
    warnings.extend(dm_warnings)
    warnings.extend(choice.warnings)
    chosen = next((e for e in estimates if e.strategy.value == choice.strategy), None)
    if chosen is not None and choice.fits and chosen.fits_at_data and not chosen.fits:
        warnings.append(
            f"{chosen.strategy.value} fits at the data's p{PERCENTILE} micro-batch, not at the max_length worst case "
            f"({describe_need(chosen)}): a micro-batch of the longest samples may run out of memory, and the "
            "OOM ladder then takes over"
        )
    if not choice.fits:
        notes.append("--force given: launching anyway" if options.force else "nothing fits (see --force)")

    deepspeed_arg: str | None = None
    no_pin = False
    if choice.strategy is not None and not choice.user_chosen and not device_map:
        deepspeed_arg = posixpath.join(paths.config_dir, f"{choice.strategy}.json")
        if choice.strategy == Strategy.ZERO3_OFFLOAD.value:
            offload = next(e for e in estimates if e.strategy is Strategy.ZERO3_OFFLOAD)
            if memlock_too_low(host, offload.cpu_need_bytes):
                deepspeed_arg = no_pin_config_path(output_dir_of(swift))
                no_pin = True
                notes.append(
                    "memlock hard limit is below the offload buffers: using zero3_offload with "
                    f"pin_memory false ({deepspeed_arg})"
                )

    batch = keep_global_batch(
        swift.get_int("per_device_train_batch_size", 1) or 1,
        swift.get_int("gradient_accumulation_steps"),
        topology.world_size,
        # `swift sft` alone picks its own process count; a script under torchrun runs the processes asked for
        topology.swift_world_size if options.backend == "swift" else topology.world_size,
    )
    if batch.changed and not batch.kept:
        warnings.append(describe(batch))
    sp = swift.get_int("sequence_parallel_size", 1) or 1
    if sp > 1 and topology.world_size % sp == 0:
        groups = topology.world_size // sp
        notes.append(
            f"--sequence_parallel_size {sp}: the {topology.world_size} processes are {groups} data-parallel "
            f"rank(s) of {sp} that split each sample's tokens, so a step trains on {batch.global_batch // sp} "
            f"samples (micro-batch {batch.micro_batch} x accumulation {batch.grad_accum} x {groups})"
        )
    ddp_timeout, ddp_note = added_ddp_timeout(swift, options.watchdog)
    if ddp_note:
        notes.append(ddp_note)
    max_memory = None
    if device_map and split is not None and not swift.has("max_memory") and swift.get("device_map") in (None, "auto"):
        max_memory = max_memory_arg(split[1].max_memory)
        notes.append(f"device_map: --max_memory {max_memory} evens the GPUs' estimated peaks ({_split_text(split[1])})")
    added = {
        "ddp_timeout": str(ddp_timeout) if ddp_timeout else None,
        "deepspeed": deepspeed_arg,
        "max_memory": max_memory,
    }
    if (accum := accum_to_pass(batch)) is not None:
        added["gradient_accumulation_steps"] = accum
    swift_final = swift.with_values({key: value for key, value in added.items() if value is not None})
    nccl, nccl_notes = nccl_settings(
        env=env,
        uses_gpus=uses_gpus,
        nnodes=topology.nnodes.value,
        ib_devices=host.network.ib_devices,
        route_interface=options.route_interface,
        overrides=options.nccl_overrides or {},
        machine_known=host.network.known,
    )
    notes.extend(nccl_notes)
    launch_env = _topology_env(topology) + nccl + options.backend_env
    command = torchrun_command(topology, paths) + swift_final.argv()
    plan = Plan(
        topology=topology,
        strategy=choice.strategy,
        strategy_reason=choice.reason,
        deepspeed_arg=deepspeed_arg,
        ddp_timeout_arg=str(ddp_timeout) if ddp_timeout else None,
        estimates=estimates,
        env=launch_env,
        swift_argv=swift_final.argv(),
        command=command,
        warnings=tuple(warnings),
        notes=tuple(notes),
        write_no_pin_config=no_pin,
        fits=choice.fits,
        batch=batch,
        assumed_machine=not host.network.known,
        device_map=split[1] if split is not None else None,
        max_memory_arg=max_memory,
        data_lengths=lengths,
        backend=options.backend,
        activations=describe_activations(shape) if shape is not None else (),
        assumed_length=assumed,
    )
    return plan


def _with_device_map(
    choice: Choice,
    estimates: tuple[Estimate, ...],
    swift: SwiftArgs,
    topology: Topology,
    host: HostFacts,
    model: ModelFacts | None,
    env: Mapping[str, str],
    options: PlanOptions,
    uses_gpus: bool,
) -> tuple[Choice, tuple[Estimate, ...], Topology, tuple[Estimate, DeviceMapLayout] | None, list[str]]:
    """device_map beside ZeRO with several GPUs on one node (launcher.plan.device_map): its estimate added,
    the choice between them (choose_layout), and a device_map run's topology (one process over the GPUs)."""
    layout, asked_by = layout_request(swift, env, options, len(topology.gpus))
    several = uses_gpus and len(topology.gpus) > 1
    split = None
    if several and topology.nnodes.value == 1:
        split = device_map_plan_estimate(swift, model, topology, host, env)
    elif options.layout == "device_map":
        raise SafeSftError(
            f"--layout device_map needs several GPUs on one node ({len(topology.gpus)} GPU(s) selected, "
            f"{topology.nnodes.value} node(s){', CPU training' if not uses_gpus else ''})",
            "select two or more GPUs with CUDA_VISIBLE_DEVICES or --gpus on a single node, or drop --layout",
        )
    if split is None and not (layout == "device_map" and several):
        return choice, estimates, topology, None, []
    dm_estimate = split[0] if split is not None else None
    if dm_estimate is not None:
        estimates = (*estimates, dm_estimate)
    choice = choose_layout(choice, estimates, dm_estimate, layout, asked_by, gpus=len(topology.gpus))
    warnings = []
    if choice.strategy == Strategy.DEVICE_MAP.value:
        topology = as_device_map(topology, asked_by or "the strategy below")
        if swift.get("deepspeed"):
            warnings.append(
                f"--deepspeed {swift.get('deepspeed')} with one process over {len(topology.gpus)} GPUs: swift "
                "refuses it (DeepSpeed is not compatible with device_map); drop it, or set NPROC_PER_NODE to the "
                "GPU count"
            )
    return choice, estimates, topology, split, warnings


def _split_text(layout: DeviceMapLayout) -> str:
    gib = 1 << 30
    per_gpu = ", ".join(
        f"GPU {i}: {k} layers, {need / gib:.1f} GiB"
        for i, (k, need) in enumerate(zip(layout.layers, layout.need_bytes, strict=True))
    )
    return f"{per_gpu}; embeddings on GPU {layout.first_gpu}, lm_head and logits on GPU {layout.head_gpu}"


def _topology_env(topology: Topology) -> tuple[EnvSetting, ...]:
    settings = [
        EnvSetting("NPROC_PER_NODE", str(topology.nproc_per_node.value), _why(topology.nproc_per_node)),
        EnvSetting("NNODES", str(topology.nnodes.value), _why(topology.nnodes)),
        EnvSetting("NODE_RANK", str(topology.node_rank.value), _why(topology.node_rank)),
        EnvSetting("MASTER_ADDR", topology.master_addr.value, _why(topology.master_addr)),
        EnvSetting("MASTER_PORT", str(topology.master_port.value), _why(topology.master_port)),
    ]
    visible = topology.visible_devices
    if visible is not None:
        settings.insert(0, EnvSetting("CUDA_VISIBLE_DEVICES", visible.value, _why(visible)))
    return tuple(settings)


def _why(value: Sourced[Any]) -> str:
    return f"from {value.source.value}" + (f": {value.note}" if value.note else "")


def torchrun_command(topology: Topology, paths: LaunchPaths) -> tuple[str, ...]:
    """torchrun as `swift sft` would start it, with our worker (swift's sft.py under @record)."""
    return (
        paths.python,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(topology.nproc_per_node.value),
        "--nnodes",
        str(topology.nnodes.value),
        "--node_rank",
        str(topology.node_rank.value),
        "--master_addr",
        topology.master_addr.value,
        "--master_port",
        str(topology.master_port.value),
        paths.worker,
        *paths.worker_args,
    )
