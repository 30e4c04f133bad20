"""What an attempt actually runs with, at the argv level: `initial_settings` reads the user's argv and
environment into the ladder's Settings, `attempt_args` writes each rung back into swift's argv and env.

Each row says what is added, what is replaced in place, and that everything else stays, token for token.
Expected argvs are written out by hand, never computed with the code under test.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.configs import load_templates
from launcher.model import Plan, Source, Sourced, Topology
from launcher.plan.degrade import Settings
from launcher.plan.ds_config import UserConfig
from launcher.plan.settings import AttemptArgs, Resume, attempt_args, initial_settings
from launcher.plan.swift_args import parse_swift_argv

CONFIGS = "/cfg"
OUT = "/out"
TEMPLATES = load_templates()


def plan(nproc: int = 2, nnodes: int = 1, strategy: str | None = None, no_pin: bool = False) -> Plan:
    topology = Topology(
        nproc_per_node=Sourced(nproc, Source.ENV),
        nnodes=Sourced(nnodes, Source.DEFAULT),
        node_rank=Sourced(0, Source.DEFAULT),
        master_addr=Sourced("127.0.0.1", Source.DEFAULT),
        master_port=Sourced(29500, Source.DEFAULT),
        visible_devices=None,
        gpus=(),
    )
    return Plan(topology, strategy, "", None, (), (), (), (), write_no_pin_config=no_pin)


# ---- initial_settings: the user's argv, env and config file -> the starting Settings ----------------

BASE = Settings(micro_batch=1, grad_accum=8, world_size=2, dataloader_num_workers=1)  # swift's defaults


@pytest.mark.parametrize(
    ("argv", "env", "kwargs", "expected"),
    [
        # swift: gradient_accumulation_steps = max(1, ceil(16 / batch / world_size))
        pytest.param([], {}, {}, BASE, id="swift-defaults-accum-ceil(16/1/2)=8"),
        pytest.param(
            ["--per_device_train_batch_size", "3"], {}, {}, replace(BASE, micro_batch=3, grad_accum=3),
            id="default-accum-ceil(16/3/2)=3",
        ),
        pytest.param(
            ["--per_device_train_batch_size", "16"], {}, {"nproc": 4}, replace(BASE, micro_batch=16, grad_accum=1,
            world_size=4), id="default-accum-never-below-1",
        ),
        pytest.param(["--gradient_accumulation_steps", "5"], {}, {}, replace(BASE, grad_accum=5), id="accum-given"),
        pytest.param([], {}, {"nproc": 2, "nnodes": 2}, replace(BASE, grad_accum=4, world_size=4), id="two-nodes"),
        pytest.param(["--gradient_checkpointing", "false"], {}, {}, replace(BASE, gradient_checkpointing=False),
                     id="checkpointing-off"),
        pytest.param(["--save_only_model", "true"], {}, {}, replace(BASE, save_only_model=True), id="save-only-model"),
        pytest.param(["--dataloader_num_workers", "4"], {}, {}, replace(BASE, dataloader_num_workers=4), id="workers"),
        pytest.param(
            ["--dataloader_pin_memory", "false"], {}, {}, replace(BASE, dataloader_pin_memory=False), id="pin-off-arg"
        ),
        pytest.param([], {}, {"no_pin": True}, replace(BASE, offload_pin_memory=False), id="pin-off-low-memlock-plan"),
        pytest.param(["--max_length", "4096"], {}, {}, replace(BASE, max_length=4096), id="max-length"),
        pytest.param(
            ["--model_type", "qwen2_vl"], {"MAX_PIXELS": "1003520"}, {},
            replace(BASE, vision_env="MAX_PIXELS", vision_budget=1003520), id="max-pixels-env-for-qwen2-vl",
        ),
        pytest.param(
            ["--model_type", "qwen2_vl"], {"MAX_PIXELS": " 1_003_520"}, {},
            replace(BASE, vision_env="MAX_PIXELS", vision_budget=1003520), id="max-pixels-read-as-int-reads-it",
        ),
        pytest.param(
            ["--model_type", "internvl_chat"], {"MAX_NUM": "6"}, {},
            replace(BASE, vision_env="MAX_NUM", vision_budget=6), id="max-num-env-for-internvl",
        ),
        pytest.param(
            ["--model_type", "internvl_chat"], {}, {}, replace(BASE, vision_env="MAX_NUM"), id="internvl-max-num-unset",
        ),
        pytest.param(
            ["--model_type", "minicpmv2_6"], {"MAX_SLICE_NUMS": "4"}, {},
            replace(BASE, vision_env="MAX_SLICE_NUMS", vision_budget=4), id="max-slice-nums-env-for-minicpm-v",
        ),
        pytest.param(
            ["--model_type", "ovis2_5"], {}, {}, replace(BASE, vision_env="MAX_PIXELS", vision_budget=1344 * 1792),
            id="ovis2.5-starts-at-its-own-max-pixels",
        ),
        pytest.param(
            ["--model_type", "ovis2_5"], {"MAX_PIXELS": "1003520"}, {},
            replace(BASE, vision_env="MAX_PIXELS", vision_budget=1003520), id="ovis2.5-max-pixels-set",
        ),
        pytest.param([], {"MAX_PIXELS": "lots"}, {}, BASE, id="a-bad-max-pixels-the-model-never-reads"),
        pytest.param([], {"MAX_PIXELS": "1003520"}, {}, BASE, id="max-pixels-ignored-where-the-model-reads-none"),
        pytest.param([], {"NCCL_P2P_DISABLE": "1"}, {}, replace(BASE, nccl_p2p_disable=True), id="p2p-off-env"),
        pytest.param([], {}, {"strategy": "zero3"}, replace(BASE, deepspeed="zero3"), id="planned-zero3"),
    ],
)  # fmt: skip
def test_initial_settings(argv: list[str], env: dict[str, str], kwargs: dict[str, object], expected: Settings) -> None:
    swift = parse_swift_argv(["--model", "m", *argv])
    got = initial_settings(swift, plan(**kwargs), None, env)  # type: ignore[arg-type]
    assert got == expected


def test_initial_settings_reads_the_config_files_values_and_env_block() -> None:
    config = {"per_device_train_batch_size": 4, "model_type": "qwen2_vl", "ENV": {"MAX_PIXELS": "401408"}}
    swift = parse_swift_argv(["train.yaml", "--gradient_accumulation_steps", "3"], config)
    got = initial_settings(swift, plan(), None, {})
    assert (got.micro_batch, got.grad_accum, got.vision_env, got.vision_budget) == (4, 3, "MAX_PIXELS", 401408)


def test_initial_settings_takes_the_users_deepspeed_rung() -> None:
    swift = parse_swift_argv(["--model", "m", "--deepspeed", "my.json"])
    user = UserConfig(stem="my", config={"zero_optimization": {"stage": 3}})
    assert initial_settings(swift, plan(strategy="my.json"), None, {}, user_deepspeed=user).deepspeed == "zero3"


# ---- attempt_args: one rung -> the attempt's argv and env ------------------------------------------

USER_ARGV = ["--model", "m", "--per_device_train_batch_size", "4", "--dataset", "a.jsonl", "b.jsonl",
             "--output_dir", OUT]  # fmt: skip
START = Settings(micro_batch=4, grad_accum=2, world_size=2, deepspeed="zero2", dataloader_num_workers=4)


def pin_off(s: Settings) -> Settings:
    """The pinning rung: the dataloader's pinning and DeepSpeed offload's, both off."""
    return replace(s, dataloader_pin_memory=False, offload_pin_memory=False)


def run(settings: Settings, *, resume: Resume | None = None, fresh: bool = False, argv: list[str] | None = None,
        initial: Settings = START, user: UserConfig | None = None) -> AttemptArgs:  # fmt: skip
    return attempt_args(
        parse_swift_argv(USER_ARGV if argv is None else argv), initial, settings, resume,
        user_deepspeed=user, templates=TEMPLATES, config_dir=CONFIGS, output_dir=OUT, fresh_version_dir=fresh,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "expected_argv", "expected_env"),
    [
        pytest.param(START, USER_ARGV, {}, id="first-attempt-unchanged"),
        pytest.param(
            replace(START, micro_batch=2, grad_accum=4),
            ["--model", "m", "--per_device_train_batch_size", "2", "--dataset", "a.jsonl", "b.jsonl",
             "--output_dir", OUT, "--gradient_accumulation_steps", "4"],
            {}, id="micro-batch-replaced-in-place-accum-appended",
        ),
        pytest.param(
            replace(START, gradient_checkpointing=False), [*USER_ARGV, "--gradient_checkpointing", "false"], {},
            id="checkpointing",
        ),
        pytest.param(
            replace(START, deepspeed="zero3"), [*USER_ARGV, "--deepspeed", "/cfg/zero3.json"], {}, id="zero2-to-zero3",
        ),
        pytest.param(
            replace(START, deepspeed="zero3_offload"), [*USER_ARGV, "--deepspeed", "/cfg/zero3_offload.json"], {},
            id="zero3-to-offload",
        ),
        pytest.param(
            replace(START, save_only_model=True), [*USER_ARGV, "--save_only_model", "true"], {}, id="save-only-model",
        ),
        pytest.param(
            replace(START, dataloader_num_workers=2), [*USER_ARGV, "--dataloader_num_workers", "2"], {},
            id="fewer-workers",
        ),
        pytest.param(pin_off(START), [*USER_ARGV, "--dataloader_pin_memory", "false"], {}, id="pin-off"),
        pytest.param(
            replace(START, max_length=1024),
            [*USER_ARGV, "--max_length", "1024", "--truncation_strategy", "right"], {},
            id="max-length-with-truncation-right",
        ),
        pytest.param(
            replace(START, vision_env="MAX_PIXELS", vision_budget=6422528), USER_ARGV, {"MAX_PIXELS": "6422528"},
            id="max-pixels-env",
        ),
        pytest.param(
            replace(START, vision_env="MAX_NUM", vision_budget=3), USER_ARGV, {"MAX_NUM": "3"}, id="max-num-env",
        ),
        pytest.param(replace(START, nccl_p2p_disable=True), USER_ARGV, {"NCCL_P2P_DISABLE": "1"}, id="p2p-env"),
    ],
)  # fmt: skip
def test_each_rung_at_the_argv_level(
    settings: Settings, expected_argv: list[str], expected_env: dict[str, str]
) -> None:
    got = run(settings)
    assert list(got.swift.argv()) == expected_argv
    assert got.env == expected_env
    assert got.deepspeed_file is None


def test_a_rung_already_given_replaces_the_users_value_in_place() -> None:
    argv = [
        "--max_length",
        "4096",
        "--truncation_strategy",
        "delete",
        "--dataloader_pin_memory",
        "true",
        "--model",
        "m",
    ]
    initial = replace(START, max_length=4096)
    got = run(pin_off(replace(initial, max_length=2048)), argv=argv, initial=initial)
    assert list(got.swift.argv()) == [
        "--max_length", "2048", "--truncation_strategy", "right", "--dataloader_pin_memory", "false", "--model", "m",
    ]  # fmt: skip


def test_pin_off_on_zero3_offload_writes_a_no_pin_copy_of_the_shipped_config() -> None:
    initial = replace(START, deepspeed="zero3_offload")
    got = run(pin_off(initial), initial=initial)
    assert list(got.swift.argv()) == [
        *USER_ARGV, "--deepspeed", "/out/safe-sft/zero3_offload_nopin.json", "--dataloader_pin_memory", "false",
    ]  # fmt: skip
    assert got.deepspeed_file is not None
    path, config = got.deepspeed_file
    assert path == "/out/safe-sft/zero3_offload_nopin.json"
    zero = config["zero_optimization"]
    assert zero["offload_param"]["pin_memory"] is False and zero["offload_optimizer"]["pin_memory"] is False
    assert zero["stage"] == 3


@pytest.mark.parametrize(
    ("resume", "expected_tail"),
    [
        pytest.param(Resume("/out/v0/checkpoint-3", 3, False), ["--resume_from_checkpoint", "/out/v0/checkpoint-3"],
                     id="full-resume"),
        pytest.param(Resume("/out/v0/checkpoint-3", 3, True, "stage changed"),
                     ["--resume_from_checkpoint", "/out/v0/checkpoint-3", "--resume_only_model", "true"],
                     id="weights-only"),
    ],
)  # fmt: skip
def test_resume_flags_are_appended(resume: Resume, expected_tail: list[str]) -> None:
    assert list(run(START, resume=resume).swift.argv()) == [*USER_ARGV, *expected_tail]


USERS = "/theirs/checkpoint-8"


@pytest.mark.parametrize(
    ("extra", "resume", "skip"),
    [
        pytest.param([], Resume("/out/v0/checkpoint-3", 3, False), "false", id="this-runs-own-checkpoint"),
        pytest.param([], Resume("/out/v0/checkpoint-3", 3, True, "stage changed"), "false", id="weights-only-rung"),
        pytest.param(["--resume_from_checkpoint", USERS], Resume(USERS, 8, False, start=True), "true",
                     id="the-users-start-as-given"),
        pytest.param(["--resume_from_checkpoint", USERS, "--resume_only_model", "true"],
                     Resume(USERS, 0, True, "asked", start=True), "true", id="the-users-fresh-start-as-given"),
        pytest.param(["--resume_from_checkpoint", USERS], Resume(USERS, 8, True, "stage changed", start=True),
                     "false", id="the-users-start-weights-only-by-the-ladder"),
    ],
)  # fmt: skip
def test_the_users_ignore_data_skip_holds_only_for_their_own_resume(
    extra: list[str], resume: Resume, skip: str
) -> None:
    """With it, a retry from the run's own checkpoint replays the data from the epoch's start (samples trained
    twice, others never), and a weights-only one makes swift train from step 0 over the checkpoints there."""
    argv = ["--model", "m", "--ignore_data_skip", "true", *extra]
    got = run(START, argv=argv, resume=resume)
    assert got.swift.get("ignore_data_skip") == skip
    assert run(START, argv=["--model", "m"], resume=resume).swift.has("ignore_data_skip") is False


def test_a_resumed_attempt_replaces_the_users_resume_from_checkpoint() -> None:
    argv = ["--model", "m", "--resume_from_checkpoint", "/old/checkpoint-1"]
    got = run(START, argv=argv, resume=Resume("/out/v1/checkpoint-5", 5, False))
    assert list(got.swift.argv()) == ["--model", "m", "--resume_from_checkpoint", "/out/v1/checkpoint-5"]


@pytest.mark.parametrize(
    ("argv", "fresh", "expected"),
    [
        pytest.param(["--model", "m", "--add_version", "false"], True, ["--model", "m", "--add_version", "true"],
                     id="later-attempt-add-version-false-becomes-true"),
        pytest.param(["--model", "m", "--add_version", "false"], False, ["--model", "m", "--add_version", "false"],
                     id="first-attempt-keeps-false"),
        pytest.param(["--model", "m"], True, ["--model", "m"], id="not-given-not-added"),
        pytest.param(["--model", "m", "--add_version", "true"], True, ["--model", "m", "--add_version", "true"],
                     id="true-stays"),
    ],
)  # fmt: skip
def test_add_version(argv: list[str], fresh: bool, expected: list[str]) -> None:
    assert list(run(START, argv=argv, fresh=fresh).swift.argv()) == expected


def test_the_users_own_config_moves_up_as_a_derived_copy_and_is_passed_as_is_until_then() -> None:
    user = UserConfig(stem="my", config={"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 4})
    argv = ["--model", "m", "--deepspeed", "my.json"]
    assert list(run(START, argv=argv, user=user).swift.argv()) == argv
    got = run(replace(START, deepspeed="zero3"), argv=argv, user=user)
    assert got.deepspeed_file is not None
    path, config = got.deepspeed_file
    assert path.startswith("/out/safe-sft/my-zero3-") and path.endswith(".json")
    assert list(got.swift.argv()) == ["--model", "m", "--deepspeed", path]
    assert config["zero_optimization"]["stage"] == 3 and config["train_micro_batch_size_per_gpu"] == "auto"


def test_a_config_file_argument_stays_first_and_its_values_are_overridden_by_appending() -> None:
    swift = parse_swift_argv(["train.yaml", "--max_steps", "5"], {"per_device_train_batch_size": 4, "model": "m"})
    got = attempt_args(
        swift, START, replace(START, micro_batch=2, grad_accum=4), None, user_deepspeed=None, templates=TEMPLATES,
        config_dir=CONFIGS, output_dir=OUT, fresh_version_dir=True,
    )  # fmt: skip
    assert list(got.swift.argv()) == [
        "--per_device_train_batch_size", "4", "--model", "m", "--max_steps", "5",
        "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4",
    ]  # fmt: skip


def test_pin_off_keeps_swifts_own_zero2_the_user_named() -> None:
    """Pinning matters only to an offload config: the user's `--deepspeed zero2` (swift's file) stays."""
    argv = ["--model", "m", "--deepspeed", "zero2"]
    assert list(run(pin_off(START), argv=argv).swift.argv()) == [*argv, "--dataloader_pin_memory", "false"]
