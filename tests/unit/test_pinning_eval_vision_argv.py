"""What the pinning, evaluation-batch and image-budget rungs write into an attempt's argv and environment:
tables at the argv level, from the user's argv and the plan through initial_settings, the ladder and
attempt_args (what is added, what is replaced, what stays)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.configs import load_templates
from launcher.model import FailureKind, ModelFacts
from launcher.plan.build import LaunchPaths, build_plan
from launcher.plan.degrade import GiveUp, Step, next_step
from launcher.plan.settings import AttemptArgs, attempt_args, initial_settings, plan_swift_args
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.plan.watchdog import Watchdog
from launcher.probe.model_size import typical_shape
from tests.conftest import gpus, host

PATHS = LaunchPaths("python", "w.py", "/cfg")


def after(argv: list[str], kind: FailureKind, *, memlock_hard: int | None = None, model: ModelFacts | None = None,
          env: dict[str, str] | None = None) -> tuple[AttemptArgs | None, Step | GiveUp, tuple[str, ...]]:  # fmt: skip
    """(the next attempt's args after a failure of `kind`, the rung, the first attempt's argv)."""
    swift = parse_swift_argv(["--model", "m", "--tuner_type", "full", "--output_dir", "/out", *argv])
    facts = host(gpus(4, 24), ram_gib=256, memlock_hard=memlock_hard)
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    shape = typical_shape("m", int(7e9))
    from launcher.plan.build import PlanOptions

    plan = build_plan(
        swift, topo, facts, shape, env={}, paths=PATHS, options=PlanOptions(watchdog=Watchdog(0, 0), layout="processes")
    )
    initial = initial_settings(swift, plan, model or shape, env or {})
    step = next_step(initial, kind)
    if isinstance(step, GiveUp):
        return None, step, plan_swift_args(swift, plan).argv()
    args = attempt_args(
        plan_swift_args(swift, plan), initial, step.settings, None, user_deepspeed=None,
        templates=load_templates(), config_dir="/cfg", output_dir="/out", fresh_version_dir=True,
    )  # fmt: skip
    return args, step, plan_swift_args(swift, plan).argv()


def value(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_memlock_after_a_first_attempt_without_offload_pinning_turns_the_dataloaders_off() -> None:
    """The low-memlock plan already runs a zero3_offload copy with pin_memory false; the dataloader pins."""
    args, step, first = after([], FailureKind.MEMLOCK, memlock_hard=8 * 2**20)
    assert value(first, "--deepspeed") == "/out/safe-sft/zero3_offload_nopin.json"
    assert "--dataloader_pin_memory" not in first
    assert args is not None and isinstance(step, Step)
    argv = args.swift.argv()
    assert value(argv, "--dataloader_pin_memory") == "false"  # added
    assert value(argv, "--deepspeed") == "/out/safe-sft/zero3_offload_nopin.json"  # stays the unpinned copy
    assert step.change == "dataloader_pin_memory true -> false"


@pytest.mark.parametrize(
    ("argv", "expected_dataloader", "expected_deepspeed"),
    [
        pytest.param([], "false", "/out/safe-sft/zero3_offload_nopin.json", id="both-pinnings-off"),
        pytest.param(["--dataloader_pin_memory", "false"], "false", "/out/safe-sft/zero3_offload_nopin.json",
                     id="the-users-false-stays-offload-turns-off"),
    ],
)  # fmt: skip
def test_memlock_with_both_pinnings_on(argv: list[str], expected_dataloader: str, expected_deepspeed: str) -> None:
    args, _, first = after(argv, FailureKind.MEMLOCK)
    assert value(first, "--deepspeed") == "/cfg/zero3_offload.json"
    assert args is not None
    out = args.swift.argv()
    assert value(out, "--dataloader_pin_memory") == expected_dataloader and out.count("--dataloader_pin_memory") == 1
    assert value(out, "--deepspeed") == expected_deepspeed
    assert args.deepspeed_file is not None and args.deepspeed_file[0] == expected_deepspeed


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param([], None, id="default-eval-batch-1-nothing-to-halve"),
        pytest.param(["--per_device_eval_batch_size", "8"], "4", id="replaced-in-place"),
    ],
)
def test_eval_oom_touches_only_the_eval_batch(argv: list[str], expected: str | None) -> None:
    base = ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", "--deepspeed", "zero2", *argv]
    args, step, first = after(base, FailureKind.CUDA_OOM_EVAL)
    assert args is not None and isinstance(step, Step)
    out = args.swift.argv()
    assert value(out, "--per_device_eval_batch_size") == expected
    # the training micro-batch and accumulation stay as the first attempt had them (the plan's global batch)
    train = ("--per_device_train_batch_size", "--gradient_accumulation_steps")
    assert [value(out, flag) for flag in train] == [value(first, flag) for flag in train]
    if expected is None:
        assert step.change.startswith("deepspeed")  # the next rung, not the training micro-batch
    else:
        assert step.change == f"per_device_eval_batch_size 8 -> {expected}"
        assert out.index("--per_device_eval_batch_size") == first.index("--per_device_eval_batch_size")


def vl(model_type: str) -> ModelFacts:
    return replace(typical_shape("m", int(7e9)), is_multimodal=True, model_type=model_type)


@pytest.mark.parametrize(
    ("model_type", "env", "argv", "expected_env"),
    [
        pytest.param("qwen2_5_vl", {}, [], {"MAX_PIXELS": "6422528"}, id="qwen2.5-vl-max-pixels-from-default"),
        pytest.param("qwen2_5_vl", {"MAX_PIXELS": "1003520"}, [], {"MAX_PIXELS": "501760"}, id="users-max-pixels"),
        pytest.param("qwen3_vl", {}, [], {"IMAGE_MAX_TOKEN_NUM": "8192"}, id="qwen3-vl-image-max-token-num"),
        pytest.param("llava", {}, [], {}, id="ignores-max-pixels-rung-skipped"),
        pytest.param("llava", {}, ["--model_type", "qwen2_vl"], {"MAX_PIXELS": "6422528"}, id="swift-model-type-wins"),
    ],
)
def test_image_budget_rung_sets_the_variable_the_model_reads(
    model_type: str, env: dict[str, str], argv: list[str], expected_env: dict[str, str]
) -> None:
    start = ["--per_device_train_batch_size", "1", "--gradient_checkpointing", "true", "--deepspeed", "zero3_offload"]
    args, step, _ = after([*start, *argv], FailureKind.CUDA_OOM, model=vl(model_type), env=env)
    if not expected_env:  # the rung is skipped, and nothing else is left at micro-batch 1 on zero3_offload
        assert args is None and isinstance(step, GiveUp)
        return
    assert args is not None and args.env == expected_env


@pytest.mark.parametrize(
    ("files_tiles", "env", "expected"),
    [
        pytest.param(16, {}, ("16 -> 8", "8"), id="the-models-own-slice-count"),
        pytest.param(None, {}, ("9 -> 4", "4"), id="the-processors-default-where-the-files-are-silent"),
        pytest.param(16, {"MAX_SLICE_NUMS": "6"}, ("6 -> 3", "3"), id="the-users-variable-wins"),
    ],
)
def test_slice_rung_halves_the_count_the_processor_really_uses(
    files_tiles: int | None, env: dict[str, str], expected: tuple[str, str]
) -> None:
    """MiniCPM-V with MAX_SLICE_NUMS unset slices as its files say (preprocessor or slice_config's
    max_slice_nums); the rung halves that, as the estimate counts it, not the usual 9."""
    minicpm = replace(vl("minicpmv"), vision_max_tiles=files_tiles, vision_tile_side=448)
    start = ["--model_type", "minicpmv4_5", "--per_device_train_batch_size", "1", "--deepspeed", "zero3_offload"]
    args, step, _ = after(start, FailureKind.CUDA_OOM, model=minicpm, env=env)
    assert args is not None and isinstance(step, Step)
    assert step.change == f"MAX_SLICE_NUMS {expected[0]}"
    assert args.env == {"MAX_SLICE_NUMS": expected[1]}
