"""Assemble the launch plan from facts: estimates, strategy, environment and the exact command.

`build_plan` is pure: every fact comes in as a value (probed by launcher.probe, or assumed from flags),
and the Plan that comes out is everything the runner needs, and everything `safe-sft plan` shows.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.errors import SafeSftError
from launcher.model import (
    DataFacts,
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
from launcher.plan.allocator import ALLOC_CONF_NAMES, allocator_settings
from launcher.plan.batch import accum_to_pass, describe, keep_global_batch
from launcher.plan.data_lengths import PERCENTILE, all_dropped_warning
from launcher.plan.device_map import max_memory_arg
from launcher.plan.ds_config import (
    SHIPPED_ZERO,
    batch_disagreement,
    derived_path,
    estimated_as,
    for_rung,
    nvme_below_zero3_warnings,
    rung_of,
    unknown_zero_key_warnings,
)
from launcher.plan.estimate import (
    describe_activations,
)
from launcher.plan.features import is_lora
from launcher.plan.nccl import nccl_settings
from launcher.plan.script_args import script_args_env
from launcher.plan.shm import shm_warning
from launcher.plan.sizing import (
    checkpoint_floor_bytes,
    device_map_plan_estimate,
    estimates_for,
    features_of,
    lengths_of,
    train_shape,
    workers_env,
)
from launcher.plan.strategy import Choice, choose_layout, choose_strategy
from launcher.plan.strategy import describe as describe_need
from launcher.plan.swift_args import SwiftArgs, unknown_flag_warning
from launcher.plan.topology import NO_GPU_WARNING
from launcher.plan.unset_length import assumed_length, unset_note
from launcher.plan.watchdog import DDP_TIMEOUT_ENV, Watchdog, added_ddp_timeout
from launcher.units import fmt_bytes

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
    user_deepspeed_stem: str | None = None  # its file's stem ("inline"): the name of a copy the run writes
    deepspeed_configs: Mapping[str, Mapping[str, Any]] | None = None  # the shipped configs, by rung name
    watchdog: Watchdog = field(default_factory=Watchdog)
    layout: str | None = None  # --layout: device_map | processes | auto (None: auto)
    nproc_given: bool = False  # safe-sft's --nproc was given: one process per GPU, as asked
    # the trainer is a user's script, which may set use_cpu in its own code, and whose own parser may refuse
    # what safe-sft adds: that goes to its TrainingArguments through the worker (plan/script_args.py)
    own_parser: bool = False
    backend: str = "swift"  # the trainer (launcher/backends), named in the plan
    device_map_allowed: bool = True  # the trainer can run one process over several GPUs
    # the knobs the ladder leaves alone for this trainer, and what the plan assumes of it that its arguments
    # do not say
    backend_notes: tuple[str, ...] = ()
    backend_env: tuple[EnvSetting, ...] = ()  # what the trainer's own launcher sets for its ranks
    ddp_timeout_by_env: bool = False  # the watchdog's ddp_timeout goes to the worker, not on the command line


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
    sequence_parallel = swift.batch.sequence_parallel
    if sequence_parallel > 1:  # swift splits each sample over processes: it needs one process per GPU
        return "processes", f"--sequence_parallel_size {sequence_parallel}"
    if swift.get("deepspeed"):
        return "processes", f"--deepspeed {swift.get('deepspeed')}"
    if swift.get("device_map"):
        return "device_map", f"--device_map {swift.get('device_map')}"
    return "auto", ""


def as_device_map(topology: Topology, why: str) -> Topology:
    """The topology of a device_map run: one process on this node, every selected GPU visible to it."""
    note = f"one process, the model split over {len(topology.gpus)} GPUs (device_map): {why}"
    given = topology.nproc_per_node  # NPROC_PER_NODE=1 (the user's) asked for this layout: its source stays
    source = given.source if given.value == 1 else Source.AUTO
    return replace(topology, nproc_per_node=Sourced(1, source, note), swift_nproc_per_node=1)


def output_dir_of(swift: SwiftArgs) -> str:
    """swift's output_dir: the given one (an empty one is the working directory, as swift's abspath makes
    it: a script's `--output_dir "$OUT"` with OUT unset), or `output/<model name>` as swift derives it: of
    the checkpoint where a full fine-tune resumes its weights alone (swift loads that as the model)."""
    given = swift.get("output_dir")
    if given is not None:
        return given or "."
    model = swift.get("model") or "model"
    resumed = swift.get("resume_from_checkpoint")
    if resumed and swift.get_bool("resume_only_model", False) and not is_lora(swift):
        model = resumed
    return posixpath.join("output", swift_model_name(model))


# a hub cache's snapshot path: huggingface_hub's models--<org>--<name>/snapshots/<rev>, modelscope's alike
_HUB_SNAPSHOT = (re.compile(r"/models--(?:.+?--)?(.+?)/snapshots/"), re.compile(r"/models/(?:.+?--)?(.+?)/snapshots/"))


def swift_model_name(model: str) -> str:
    """The model's name as swift 4.6 names its default output dir (swift.model.model_meta.get_model_name): a hub
    cache's snapshot by its repository's name, else the last part of the path, modelscope's `___` read as `.`."""
    model = model.rstrip("/")
    for pattern in _HUB_SNAPSHOT:
        if match := pattern.search(model):
            return match.group(1)
    return model.rsplit("/", 1)[-1].replace("___", ".")


def zero_configs(options: PlanOptions) -> dict[str, Mapping[str, Any]]:
    """The config each strategy's estimate reads: the shipped ones, the user's own for its rung."""
    configs: dict[str, Mapping[str, Any]] = {**SHIPPED_ZERO, **(options.deepspeed_configs or {})}
    if options.user_deepspeed_config is not None and options.user_deepspeed_rung is not None:
        configs[estimated_as(options.user_deepspeed_rung)] = options.user_deepspeed_config
    return configs


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
    notes: list[str] = []
    if options.own_parser and options.nproc_given and NO_GPU_WARNING in warnings:
        # the run path starts a script's --nproc CPU processes without --use_cpu: it may set use_cpu itself
        warnings.remove(NO_GPU_WARNING)
        notes.append(
            f"no GPU visible: {topology.nproc_per_node.value} CPU process(es) (--nproc), for a script that "
            "sets use_cpu in its own code"
        )
    warnings.extend(data.warnings if data else ())
    if options.backend == "swift":  # a script parses its own fields too; LLaMA-Factory's reader refuses a typo
        warnings.extend(unknown_flag_warning(flag, swift.options) for flag in swift.unknown_flags())
    if options.user_deepspeed_config is not None:
        warnings.extend(unknown_zero_key_warnings(options.user_deepspeed_config))
        warnings.extend(nvme_below_zero3_warnings(options.user_deepspeed_config))
    if host.disk_problem:
        warnings.append(f"output dir {output_dir_of(swift)}: {host.disk_problem} (the run path refuses to start)")
    nccl_ranks = topology.nproc_per_node.value if topology.gpus else 0
    shm = shm_warning(host.limits.shm_bytes, swift.get_int("dataloader_num_workers", 1), nccl_ranks)
    if shm is not None:
        warnings.append(shm)
    cpu_ranks = topology.nproc_per_node.value
    if not topology.gpus and host.cpu_cores is not None and cpu_ranks > host.cpu_cores:
        warnings.append(
            f"{cpu_ranks} training processes on {host.cpu_cores} usable CPU core(s): each needs a core of its "
            f"own, and runs crawl far above that (lower NPROC_PER_NODE to at most {host.cpu_cores})"
        )
    if topology.world_size > 1 and swift.get_bool("auto_find_batch_size", False):
        warnings.append(
            f"--auto_find_batch_size true with {topology.world_size} training processes: accelerate halves the "
            "batch on the rank that ran out of memory only, and the others wait for it in their next collective "
            "(a hang, not an OOM); leave it out: safe-sft's ladder halves the micro-batch on every rank"
        )
    floor = checkpoint_floor_bytes(swift, model)
    if floor is not None and host.disk_free_bytes is not None and host.disk_free_bytes < floor[0]:
        warnings.append(
            f"output dir {output_dir_of(swift)}: {fmt_bytes(host.disk_free_bytes)} free, and one checkpoint of "
            f"this fine-tune takes at least {fmt_bytes(floor[0])} ({floor[1]}): the first save will fail and "
            "the steps before it are lost; free space, or point --output_dir elsewhere"
        )
    uses_gpus = bool(topology.gpus) and not swift.get_bool("use_cpu", False)
    assumed = assumed_length(swift, model, data, workers_env(swift, env)) if uses_gpus else None
    if swift.get("seq_len") is None and swift.batch.max_length is None and uses_gpus:
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
    dropped = all_dropped_warning(lengths)
    if dropped is not None:
        warnings.append(dropped)
    estimates = estimates_for(sized, model, topology, host, zero_configs(options), env, lengths, shape)
    if features is not None and uses_gpus:
        warnings.extend(features.warnings)
        warnings.extend(features.swift_warnings if options.backend == "swift" else ())
    choice = choose_strategy(
        estimates,
        user_deepspeed=swift.get("deepspeed"),
        user_rung=options.user_deepspeed_rung,
        uses_gpus=uses_gpus,
        is_lora=is_lora(swift),
    )
    notes.extend(options.backend_notes)
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
        swift.batch.micro_batch,
        swift.batch.grad_accum,
        topology.world_size,
        # `swift sft` alone picks its own process count; a script under torchrun runs the processes asked for
        topology.swift_world_size if options.backend == "swift" else topology.world_size,
    )
    if batch.changed and not batch.kept:
        warnings.append(describe(batch))
    user_config, stem = options.user_deepspeed_config, options.user_deepspeed_stem
    if choice.user_chosen and user_config is not None and stem is not None and not device_map:
        # the run's first attempt writes what supervise's deepspeed_for writes: the same copy, named by its hash
        disagrees = batch_disagreement(user_config, batch.micro_batch, batch.grad_accum, topology.world_size)
        if disagrees is not None:
            copy = for_rung(user_config, user_config, pin_memory=True)
            deepspeed_arg = derived_path(output_dir_of(swift), stem, rung_of(user_config), True, copy)
            notes.append(
                f"your --deepspeed config says {disagrees}, which transformers would refuse in every rank: the run "
                f'passes a copy that says "auto" there ({deepspeed_arg})'
            )
    sp = swift.batch.sequence_parallel
    if sp > 1 and topology.world_size % sp == 0:
        groups = topology.world_size // sp
        notes.append(
            f"--sequence_parallel_size {sp}: the {topology.world_size} processes are {groups} data-parallel "
            f"rank(s) of {sp} that split each sample's tokens, so a step trains on {batch.global_batch // sp} "
            f"samples (micro-batch {batch.micro_batch} x accumulation {batch.grad_accum} x {groups})"
        )
    ddp_timeout, ddp_note = added_ddp_timeout(swift, options.watchdog, by_env=options.ddp_timeout_by_env)
    if ddp_note:
        notes.append(ddp_note)
    timeout_env: tuple[EnvSetting, ...] = ()
    if ddp_timeout and options.ddp_timeout_by_env:
        why = "the watchdog's collective timeout, set in the script's TrainingArguments by safe-sft's worker"
        timeout_env, ddp_timeout = (EnvSetting(DDP_TIMEOUT_ENV, str(ddp_timeout), why),), None
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
    backend_sets = {setting.name for setting in options.backend_env}
    allocator, allocator_notes = allocator_settings(env, uses_gpus and not backend_sets & set(ALLOC_CONF_NAMES))
    notes.extend(allocator_notes)
    launch_env = _topology_env(topology) + nccl + allocator + options.backend_env + timeout_env
    trainer_argv = swift_final.argv()
    if options.own_parser:  # a user's script gets what the plan adds in its TrainingArguments, its command as typed
        trainer_argv = swift.argv()
        launch_env += script_args_env(swift, swift_final)
    command = torchrun_command(topology, paths) + trainer_argv
    plan = Plan(
        topology=topology,
        strategy=choice.strategy,
        estimated_as=estimated_as(options.user_deepspeed_rung) if options.user_deepspeed_rung else choice.strategy,
        strategy_reason=choice.reason,
        deepspeed_arg=deepspeed_arg,
        ddp_timeout_arg=str(ddp_timeout) if ddp_timeout else None,
        estimates=estimates,
        env=launch_env,
        swift_argv=trainer_argv,
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
        uses_gpus=uses_gpus,
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
