"""Assemble the launch plan from facts: estimates, strategy, environment and the exact command.

`build_plan` is pure: every fact comes in as a value (probed by launcher.probe, or assumed from flags),
and the Plan that comes out is everything the runner needs, and everything `safe-sft plan` shows.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.model import (
    STRATEGY_ORDER,
    EnvSetting,
    Estimate,
    HostFacts,
    ModelFacts,
    Plan,
    Sourced,
    Strategy,
    Topology,
)
from launcher.plan.estimate import DEFAULT_SEQ_LEN, TrainShape, estimate, lora_trainable_params
from launcher.plan.nccl import nccl_settings
from launcher.plan.strategy import choose_strategy
from launcher.plan.swift_args import SwiftArgs

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


def train_shape(swift: SwiftArgs, model: ModelFacts, topology: Topology) -> TrainShape:
    total = model.total_params or 0
    lora = is_lora(swift)
    trainable = (
        lora_trainable_params(
            total,
            model.hidden_size,
            model.intermediate_size,
            model.num_layers,
            swift.get_int("lora_rank", 8) or 8,
        )
        if lora
        else total
    )
    largest = model.largest_layer_params or (total // max(model.num_layers or 1, 1))
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
    )


def estimates_for(
    swift: SwiftArgs, model: ModelFacts | None, topology: Topology, host: HostFacts
) -> tuple[Estimate, ...]:
    if model is None or not model.total_params or not topology.gpus:
        return ()
    shape = train_shape(swift, model, topology)
    gpu_free = min(g.free_bytes for g in topology.gpus)
    return tuple(estimate(s, shape, gpu_free, host.memory.available_bytes) for s in STRATEGY_ORDER)


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
) -> Plan:
    options = options or PlanOptions()
    warnings: list[str] = list(host.warnings) + list(topology.warnings) + list(model.warnings if model else ())
    notes: list[str] = []
    if host.disk_problem:
        warnings.append(f"output dir {output_dir_of(swift)}: {host.disk_problem} (the run path refuses to start)")
    uses_gpus = bool(topology.gpus) and not swift.get_bool("use_cpu", False)
    if swift.get("seq_len") is None and swift.get("max_length") is None and uses_gpus:
        notes.append(f"--max_length not set: activations estimated for {DEFAULT_SEQ_LEN} tokens per sample")

    estimates = estimates_for(swift, model, topology, host)
    choice = choose_strategy(
        estimates,
        user_deepspeed=swift.get("deepspeed"),
        user_rung=options.user_deepspeed_rung,
        uses_gpus=uses_gpus,
        is_lora=is_lora(swift),
    )
    warnings.extend(choice.warnings)
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

    swift_final = swift.with_values({"deepspeed": deepspeed_arg}) if deepspeed_arg else swift
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
        estimates=estimates,
        env=launch_env,
        swift_argv=swift_final.argv(),
        command=command,
        warnings=tuple(warnings),
        notes=tuple(notes),
        write_no_pin_config=no_pin,
        fits=choice.fits,
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
