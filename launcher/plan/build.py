"""Assemble the launch plan from facts: estimates, strategy, environment and the exact command.

`build_plan` is pure: every fact comes in as a value (probed by launcher.probe, or assumed from flags),
and the Plan that comes out is everything the runner needs, and everything `safe-sft plan` shows.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.model import (
    STRATEGY_ORDER,
    DataFacts,
    DataLengths,
    EnvSetting,
    Estimate,
    HostFacts,
    ModelFacts,
    Plan,
    Sourced,
    Strategy,
    Topology,
)
from launcher.plan.batch import accum_to_pass, describe, keep_global_batch
from launcher.plan.data_lengths import PERCENTILE, data_lengths
from launcher.plan.ds_config import SHIPPED_ZERO, zero_settings
from launcher.plan.estimate import (
    DEFAULT_SEQ_LEN,
    VISION_PATCH,
    TrainShape,
    estimate,
    levers,
    lora_trainable_params,
)
from launcher.plan.nccl import nccl_settings
from launcher.plan.strategy import choose_strategy
from launcher.plan.strategy import describe as describe_need
from launcher.plan.swift_args import SwiftArgs
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


@dataclass(frozen=True)
class PlanOptions:
    force: bool = False
    nccl_overrides: Mapping[str, str] | None = None
    route_interface: str | None = None
    user_deepspeed_rung: str | None = None  # the ZeRO rung of the user's own --deepspeed config
    user_deepspeed_config: Mapping[str, Any] | None = None  # its JSON: the estimate of its rung reads it
    deepspeed_configs: Mapping[str, Mapping[str, Any]] | None = None  # the shipped configs, by rung name
    watchdog: Watchdog = field(default_factory=Watchdog)


def is_lora(swift: SwiftArgs) -> bool:
    tuner = swift.get("tuner_type") or swift.get("train_type") or "lora"
    return tuner != "full"


def output_dir_of(swift: SwiftArgs) -> str:
    """swift's output_dir: the given one, or `output/<model name>` as swift derives it."""
    given = swift.get("output_dir")
    if given:
        return given
    model = (swift.get("model") or "model").rstrip("/")
    return posixpath.join("output", posixpath.basename(model))


DTYPE_BYTES = {"float32": 4, "fp32": 4, "f32": 4, "float16": 2, "fp16": 2, "f16": 2, "bfloat16": 2, "bf16": 2}
DEFAULT_MAX_PIXELS = 1344 * 1792  # swift's Qwen-VL templates without MAX_PIXELS


def weight_bytes_of(swift: SwiftArgs, model: ModelFacts) -> int:
    """--torch_dtype, else the checkpoint's dtype (swift loads it as stored), else bfloat16."""
    dtype = (swift.get("torch_dtype") or model.dtype or "bfloat16").lower().replace("torch.", "")
    return DTYPE_BYTES.get(dtype, 2)


def quant_bits_of(swift: SwiftArgs, model: ModelFacts) -> int | None:
    """--quant_bits (bnb/hqq/eetq quantization at load), else a pre-quantized checkpoint's bits."""
    bits = swift.get_int("quant_bits")
    return bits if bits in (2, 3, 4, 8) else model.quant_bits


def quantizable_params(model: ModelFacts, total: int) -> int:
    """The decoder's linear weights: everything but the embeddings, the output head and the vision tower."""
    embeddings = (model.vocab_size or 0) * (model.hidden_size or 0) * (1 if model.tie_word_embeddings else 2)
    return max(total - embeddings - model.vision_params, 0)


def train_shape(
    swift: SwiftArgs, model: ModelFacts, topology: Topology, env: Mapping[str, str] | None = None
) -> TrainShape:
    env = env or {}
    total = model.total_params or 0
    lora = is_lora(swift)
    trainable = (
        lora_trainable_params(
            total,
            model.hidden_size,
            model.intermediate_size,
            model.num_layers,
            swift.get_int("lora_rank", 8) or 8,
            num_experts=model.num_experts,
            moe_intermediate_size=model.moe_intermediate_size,
        )
        if lora
        else total
    )
    freeze_vit = swift.get_bool("freeze_vit", True)
    if not lora and freeze_vit:
        trainable = max(total - model.vision_params, 0)
    largest = model.largest_layer_params or (total // max(model.num_layers or 1, 1))
    pixels = 0
    if model.is_multimodal and model.vision_hidden_size:
        given = swift.get_int("max_pixels") or _int_env(env, "MAX_PIXELS")
        pixels = given or DEFAULT_MAX_PIXELS
    attn = (swift.get("attn_impl") or "").lower()
    return TrainShape(
        total_params=total,
        trainable_params=trainable,
        largest_layer_params=largest,
        hidden_size=model.hidden_size,
        num_layers=model.num_layers,
        vocab_size=model.vocab_size,
        micro_batch=swift.get_int("per_device_train_batch_size", 1) or 1,
        seq_len=swift.get_int("max_length", DEFAULT_SEQ_LEN) or DEFAULT_SEQ_LEN,
        gradient_checkpointing=swift.get_bool("gradient_checkpointing", True),
        gpus_per_node=max(topology.nproc_per_node.value, 1),
        nnodes=topology.nnodes.value,
        intermediate_size=model.intermediate_size,
        num_heads=model.num_attention_heads,
        weight_bytes=weight_bytes_of(swift, model),
        quant_bits=quant_bits_of(swift, model) if lora else None,
        quantized_params=quantizable_params(model, total),
        eager_attention=attn == "eager",
        packing=swift.get_bool("packing", False),
        num_experts=model.num_experts,
        experts_per_token=model.experts_per_token,
        moe_intermediate_size=model.moe_intermediate_size,
        vision_hidden_size=model.vision_hidden_size,
        vision_layers=model.vision_layers,
        image_pixels=pixels,
        vision_trainable=not freeze_vit,
        fused_cross_entropy=swift.get_bool("use_liger_kernel", False),
        vocab_logits=(swift.get("task_type") or "causal_lm") == "causal_lm",
    )


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "")
    return int(value) if value.isdigit() else None


PATCH_MERGE = 4  # Qwen-VL merges 2x2 vision patches into one LLM token


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
        image_tokens=shape.image_pixels // (VISION_PATCH**2 * PATCH_MERGE) if shape else 0,
    )


def at_data(shape: TrainShape, lengths: DataLengths | None) -> TrainShape | None:
    """The shape of one micro-batch at the data's lengths; None where not every dataset was sampled."""
    if lengths is None or not lengths.complete or lengths.batch_tokens is None:
        return None
    return replace(
        shape,
        batch_tokens=lengths.batch_tokens,
        batch_longest=lengths.batch_longest,
        batch_images=lengths.batch_images,
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
) -> tuple[Estimate, ...]:
    """The zero2, zero3, zero3_offload estimates (in the planner's order), then plain DDP's; each also at the
    data's sampled lengths where every dataset was sampled."""
    if model is None or not model.total_params or not topology.gpus:
        return ()
    shape = train_shape(swift, model, topology, env)
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
) -> Estimate | None:
    """The estimate for one attempt as it runs: its argv (micro-batch, length, checkpointing, MAX_PIXELS) and
    the DeepSpeed config it runs with (None: no DeepSpeed). None when the model size or the GPUs are unknown."""
    if model is None or not model.total_params or not topology.gpus:
        return None
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
    if swift.get("seq_len") is None and swift.get("max_length") is None and uses_gpus:
        notes.append(f"--max_length not set: activations estimated for {DEFAULT_SEQ_LEN} tokens per sample")

    shape = train_shape(swift, model, topology, env) if model and model.total_params and topology.gpus else None
    lengths = lengths_of(swift, shape, data)
    estimates = estimates_for(swift, model, topology, host, options, env, lengths)
    choice = choose_strategy(
        estimates,
        user_deepspeed=swift.get("deepspeed"),
        user_rung=options.user_deepspeed_rung,
        uses_gpus=uses_gpus,
        is_lora=is_lora(swift),
    )
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
    if choice.strategy is not None and not choice.user_chosen:
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
        topology.swift_world_size,
    )
    if batch.changed and not batch.kept:
        warnings.append(describe(batch))
    ddp_timeout, ddp_note = added_ddp_timeout(swift, options.watchdog)
    if ddp_note:
        notes.append(ddp_note)
    added = {"ddp_timeout": str(ddp_timeout) if ddp_timeout else None, "deepspeed": deepspeed_arg}
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
    )
    notes.extend(nccl_notes)
    launch_env = _topology_env(topology) + nccl
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
        data_lengths=lengths,
    )
    return plan


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
    )
