"""Between swift's argv and the ladder's Settings: read the starting settings, write an attempt's argv.

Pure. The attempt's argv is the user's argv with only the changed knobs rewritten (in place, or appended),
plus the resume flags; environment knobs (MAX_PIXELS, NCCL_P2P_DISABLE) come back as a separate dict, and
a derived DeepSpeed config (no pinning, or the user's own config on another rung) as content to write.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.model import ModelFacts, Plan, Strategy
from launcher.plan.batch import accum_to_pass, keep_global_batch
from launcher.plan.build import no_pin_config_path
from launcher.plan.degrade import ZERO_LADDER, Settings
from launcher.plan.device_map import max_memory_arg, parse_max_memory
from launcher.plan.ds_config import JsonObject, UserConfig, batch_disagreement, derived_path, for_rung
from launcher.plan.image_tiles import model_tiling, tiles_budget, unset_tiles
from launcher.plan.swift_args import SwiftArgs
from launcher.plan.vision_budget import (
    VisionBudget,
    budget_family,
    budget_named,
    budget_value,
    own_default,
    vision_budget_for,
)


def _model_tiles(budget: VisionBudget, model: ModelFacts | None) -> int | None:
    """Where the budget is the model's tile count and unset, the count its processor then uses (the model's
    files may give another than the variable's usual default), so the ladder halves what really runs."""
    if model is None or budget is not tiles_budget(model.model_type):
        return None
    return unset_tiles(model.model_type, model_tiling(model))


@dataclass(frozen=True)
class Resume:
    checkpoint: str
    step: int
    weights_only: bool
    why_weights_only: str = ""
    start: bool = False  # the user's own --resume_from_checkpoint (anywhere), not a checkpoint safe-sft chose

    def as_given(self, only_model: bool) -> bool:
        """The user's own checkpoint resumed as they asked (`only_model`: their --resume_only_model): their
        --ignore_data_skip then holds too; any other resume continues where the checkpoint stopped."""
        return self.start and self.weights_only == only_model


def plan_swift_args(swift: SwiftArgs, plan: Plan) -> SwiftArgs:
    """The user's arguments with what the plan adds: the chosen DeepSpeed config, the watchdog's ddp_timeout,
    the accumulation that keeps the global batch."""
    added = {"ddp_timeout": plan.ddp_timeout_arg, "deepspeed": plan.deepspeed_arg, "max_memory": plan.max_memory_arg}
    if plan.batch is not None and (accum := accum_to_pass(plan.batch)) is not None:
        added["gradient_accumulation_steps"] = accum
    return swift.with_values({key: value for key, value in added.items() if value is not None})


def initial_settings(
    swift: SwiftArgs,
    plan: Plan,
    model: ModelFacts | None,
    env: Mapping[str, str],
    allow_shorter_max_length: bool = False,
    user_deepspeed: UserConfig | None = None,
    missing: frozenset[str] = frozenset(),
    budget_args: Mapping[str, str] | None = None,
) -> Settings:
    """The settings the first attempt runs with. `missing`: the knobs the trainer does not have
    (launcher/backends/base.py KNOBS); they start as the ladder's "nothing to turn" (no image budget, no
    max_length), so no rung and no guided step changes them. `budget_args`: an image budget the trainer
    reads as an argument (LLaMA-Factory's image_max_pixels for MAX_PIXELS), whatever the model family."""
    micro = swift.batch.micro_batch
    world = plan.topology.world_size
    batch = plan.batch or keep_global_batch(micro, swift.batch.grad_accum, world, world)
    accum = batch.grad_accum
    user_env = {**swift.config_env, **env}  # the environment swift sees: a config file's ENV block fills gaps
    vision = vision_budget_for(budget_family(swift.get("model_type"), model), user_env)
    if vision is not None and budget_args:
        vision = budget_named(next(iter(budget_args)))
    if "image_budget" in missing:
        vision = None
    if vision is not None and budget_args and vision.env in budget_args:
        argument = swift.get(budget_args[vision.env]) or ""
        budget = int(argument) if argument.isdigit() else None
    elif vision is not None:
        budget = budget_value(user_env, vision) or own_default(vision) or _model_tiles(vision, model)
    else:
        budget = None
    device_map = plan.strategy == Strategy.DEVICE_MAP.value
    gpus = len(plan.topology.gpus)
    budgets = parse_max_memory(plan.max_memory_arg, gpus) if device_map else None
    return Settings(
        micro_batch=micro,
        grad_accum=accum,
        world_size=world,
        gradient_checkpointing=swift.get_bool("gradient_checkpointing", True),
        deepspeed=None if device_map else user_deepspeed.rung if user_deepspeed else plan.strategy,
        save_only_model=swift.get_bool("save_only_model", False),
        dataloader_num_workers=swift.get_int("dataloader_num_workers", 1),
        dataloader_pin_memory=swift.get_bool("dataloader_pin_memory", True),
        offload_pin_memory=not plan.write_no_pin_config,
        eval_batch=swift.get_int("per_device_eval_batch_size", 1),
        vision_env=vision.env if vision else None,
        vision_budget=budget,
        max_length=None if "max_length" in missing else swift.batch.max_length,
        nccl_p2p_disable=env.get("NCCL_P2P_DISABLE") == "1",
        allow_shorter_max_length=allow_shorter_max_length and "max_length" not in missing,
        device_map=device_map,
        zero_available="deepspeed" not in missing,
        max_memory=budgets or (),
    )


@dataclass(frozen=True)
class DeepSpeedChoice:
    """--deepspeed for one attempt: the value (None leaves the argv as it is) and a config to write there first."""

    value: str | None
    write: JsonObject | None = None


def deepspeed_for(
    settings: Settings,
    initial: Settings,
    *,
    user: UserConfig | None,
    templates: Mapping[str, JsonObject],
    config_dir: str,
    output_dir: str,
) -> DeepSpeedChoice:
    """Our rungs are our shipped files; the user's own config moves up the ladder as a derived copy."""
    name = settings.deepspeed
    if name is None:
        return DeepSpeedChoice(None)
    if user is not None:
        return _user_config_for(settings, initial, user, templates, output_dir)
    if name == "zero3_offload" and not settings.offload_pin_memory:
        template = templates[name]
        return DeepSpeedChoice(no_pin_config_path(output_dir), for_rung(template, template, pin_memory=False))
    if name == initial.deepspeed:  # pinning matters only to the offload config above
        return DeepSpeedChoice(None)
    if name in ZERO_LADDER:
        return DeepSpeedChoice(posixpath.join(config_dir, f"{name}.json"))
    return DeepSpeedChoice(name)


def _user_config_for(
    settings: Settings, initial: Settings, user: UserConfig, templates: Mapping[str, JsonObject], output_dir: str
) -> DeepSpeedChoice:
    def knobs(s: Settings) -> tuple[object, ...]:
        return s.deepspeed, s.offload_pin_memory, s.micro_batch, s.grad_accum

    disagrees = batch_disagreement(user.config, settings.micro_batch, settings.grad_accum, settings.world_size)
    if knobs(settings) == knobs(initial) and disagrees is None:
        return DeepSpeedChoice(None)  # the user's file, untouched
    name = str(settings.deepspeed)
    template = user.config if name == user.rung else templates.get(name)
    if template is None:
        return DeepSpeedChoice(name)  # a rung with no shipped template: swift's own config of that name
    derived = for_rung(user.config, template, pin_memory=settings.offload_pin_memory)
    if derived == user.config:
        return DeepSpeedChoice(None)
    return DeepSpeedChoice(derived_path(output_dir, user.stem, name, settings.offload_pin_memory, derived), derived)


@dataclass(frozen=True)
class AttemptArgs:
    swift: SwiftArgs
    env: dict[str, str]  # the environment knobs the ladder sets (the image budget, NCCL_P2P_DISABLE)
    deepspeed_file: tuple[str, JsonObject] | None  # a derived config to write before the attempt starts


def attempt_args(
    base: SwiftArgs,
    initial: Settings,
    settings: Settings,
    resume: Resume | None,
    *,
    user_deepspeed: UserConfig | None,
    templates: Mapping[str, JsonObject],
    config_dir: str,
    output_dir: str,
    fresh_version_dir: bool,
    missing: frozenset[str] = frozenset(),
    fresh_output_dir: str | None = None,
    budget_args: Mapping[str, str] | None = None,
) -> AttemptArgs:
    """The swift args of this attempt, the env variables the ladder sets, and a config to write.

    `missing`: the knobs the trainer does not have (launcher/backends/base.py KNOBS). Without
    resume_only_model a weights-only resume passes the checkpoint alone (transformers loads what it
    holds); without add_version an attempt that would save over a checkpoint writes to `fresh_output_dir`.
    """
    updates: dict[str, str | None] = {}
    if (settings.micro_batch, settings.grad_accum) != (initial.micro_batch, initial.grad_accum):
        updates["per_device_train_batch_size"] = str(settings.micro_batch)
        updates["gradient_accumulation_steps"] = str(settings.grad_accum)
    if settings.gradient_checkpointing != initial.gradient_checkpointing:
        updates["gradient_checkpointing"] = _flag(settings.gradient_checkpointing)
    deepspeed = deepspeed_for(
        settings, initial, user=user_deepspeed, templates=templates, config_dir=config_dir, output_dir=output_dir
    )
    if deepspeed.value is not None:
        updates["deepspeed"] = deepspeed.value
    if settings.max_memory != initial.max_memory and settings.max_memory:
        updates["max_memory"] = max_memory_arg(settings.max_memory)
    if settings.save_only_model != initial.save_only_model:
        updates["save_only_model"] = _flag(settings.save_only_model)
    if settings.dataloader_num_workers != initial.dataloader_num_workers:
        updates["dataloader_num_workers"] = str(settings.dataloader_num_workers)
    if settings.dataloader_pin_memory != initial.dataloader_pin_memory:
        updates["dataloader_pin_memory"] = _flag(settings.dataloader_pin_memory)
    if settings.eval_batch != initial.eval_batch:
        updates["per_device_eval_batch_size"] = str(settings.eval_batch)
    if settings.max_length != initial.max_length and settings.max_length is not None:
        updates["max_length"] = str(settings.max_length)
        updates["truncation_strategy"] = "right"  # the default `delete` would drop the long samples
    if resume is not None:
        updates["resume_from_checkpoint"] = resume.checkpoint
        if "resume_only_model" not in missing:
            updates["resume_only_model"] = _flag(resume.weights_only) if resume.weights_only else None
        only_model = base.get_bool("resume_only_model", False)
        if base.get_bool("ignore_data_skip", False) and not resume.as_given(only_model):
            # the user's flag is for their own resume: with it, a retry would replay the data from the epoch's
            # start, and a weights-only one (swift's "start afresh from these weights") train from step 0
            updates["ignore_data_skip"] = "false"
    if fresh_version_dir and "add_version" in missing and fresh_output_dir is not None:
        updates["output_dir"] = fresh_output_dir  # only when it would save over a checkpoint (as below)
    elif fresh_version_dir and base.has("add_version") and not base.get_bool("add_version", True):
        updates["add_version"] = "true"  # only when it would save over a checkpoint (supervisor._would_overwrite)
    env: dict[str, str] = {}
    if settings.vision_env and settings.vision_budget != initial.vision_budget and settings.vision_budget is not None:
        if budget_args and settings.vision_env in budget_args:  # the trainer's argument, not the variable
            updates[budget_args[settings.vision_env]] = str(settings.vision_budget)
        else:
            env[settings.vision_env] = str(settings.vision_budget)
    if settings.nccl_p2p_disable and not initial.nccl_p2p_disable:
        env["NCCL_P2P_DISABLE"] = "1"
    written = (deepspeed.value, deepspeed.write) if deepspeed.value and deepspeed.write is not None else None
    return AttemptArgs(base.with_values(updates), env, written)


def _flag(value: bool) -> str:
    return "true" if value else "false"
