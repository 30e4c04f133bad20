"""The ladder, rung by rung, as tables: every step keeps the global batch."""

from dataclasses import replace

import pytest

from launcher.model import FailureKind as K
from launcher.plan.degrade import GiveUp, Settings, Step, next_step

BASE = Settings(micro_batch=4, grad_accum=2, world_size=8, gradient_checkpointing=False, deepspeed="zero2")


def walk(settings: Settings, kind: K, steps: int, **kw) -> list[str]:  # type: ignore[no-untyped-def]
    """Follow the ladder for repeated failures of one kind; the changes in order, then 'give up'."""
    changes, history = [], []
    for _ in range(steps):
        step = next_step(settings, kind, history, **kw)
        if isinstance(step, GiveUp):
            changes.append("give up")
            break
        assert step.settings.global_batch == settings.global_batch
        changes.append(step.change.split(" (")[0])
        settings, history = step.settings, [*history, kind]
    return changes


def test_cuda_oom_ladder_in_order() -> None:
    assert walk(BASE, K.CUDA_OOM, 10) == [
        "per_device_train_batch_size 4 -> 2, gradient_accumulation_steps 2 -> 4",
        "per_device_train_batch_size 2 -> 1, gradient_accumulation_steps 4 -> 8",
        "gradient_checkpointing false -> true",
        "deepspeed zero2 -> zero3",
        "deepspeed zero3 -> zero3_offload",
        "give up",
    ]


def test_vision_language_and_allowed_max_length_rungs() -> None:
    vl = Settings(
        micro_batch=1,
        grad_accum=16,
        world_size=16,
        deepspeed="zero3_offload",
        vision_env="MAX_PIXELS",
        max_length=2048,
        allow_shorter_max_length=True,
    )
    assert walk(vl, K.CUDA_OOM, 10)[:3] == [
        "MAX_PIXELS 12845056 -> 6422528",
        "MAX_PIXELS 6422528 -> 3211264",
        "MAX_PIXELS 3211264 -> 1605632",
    ]
    assert "max_length 2048 -> 1024" in walk(vl, K.CUDA_OOM, 20)


def test_max_length_needs_permission() -> None:
    s = Settings(micro_batch=1, grad_accum=1, world_size=1, deepspeed="zero3_offload", max_length=2048)
    assert walk(s, K.CUDA_OOM, 3) == ["give up"]


def test_odd_micro_batch_keeps_global_batch() -> None:
    step = next_step(Settings(micro_batch=3, grad_accum=5, world_size=2), K.CUDA_OOM)
    assert isinstance(step, Step)
    assert (step.settings.micro_batch, step.settings.grad_accum) == (1, 15)


@pytest.mark.parametrize(
    ("kind", "first"),
    [
        (K.CUDA_OOM_LOAD, "deepspeed zero2 -> zero3"),
        (K.CUDA_OOM_SAVE, "save_only_model false -> true"),
        (K.HOST_OOM, "dataloader_num_workers 1 -> 0"),
        (K.MEMLOCK, "dataloader_pin_memory true -> false"),  # zero2 offloads nothing: no offload pinning
        (K.SHM, "dataloader_num_workers 1 -> 0"),
        (K.COMM_ERROR, "no change"),
        (K.COMM_TIMEOUT, "no change"),
        (K.HANG, "no change"),
        (K.KILLED, "no change"),
    ],
)
def test_first_rung_per_kind(kind: K, first: str) -> None:
    assert walk(BASE, kind, 1)[0] == first


@pytest.mark.parametrize("kind", [K.USER_ERROR, K.CUDA_ERROR, K.CRASH, K.INTERRUPTED, K.DISK_FULL])
def test_stop_at_once(kind: K) -> None:
    assert walk(BASE, kind, 3) == ["give up"]


def test_comm_failures_then_p2p_off_then_give_up() -> None:
    assert walk(BASE, K.COMM_ERROR, 5) == ["no change", "NCCL_P2P_DISABLE=1", "give up"]


@pytest.mark.parametrize("kind", [K.COMM_ERROR, K.COMM_TIMEOUT, K.HANG])
def test_on_the_cpu_a_communication_failure_gets_no_nccl_rung(kind: K) -> None:
    """gloo ranks: NCCL_P2P_DISABLE=1 changes nothing, and had cost another attempt (the model reloaded)."""
    assert walk(BASE, kind, 5, nccl=False) == ["no change", "give up"]
    step = next_step(BASE, kind, [kind], nccl=False)
    assert isinstance(step, GiveUp) and "uses gloo (the CPU): no NCCL setting to change" in step.reason


def test_host_oom_backs_off_offload_only_when_gpus_have_room() -> None:
    s = Settings(micro_batch=2, grad_accum=1, world_size=1, deepspeed="zero3_offload", dataloader_num_workers=0)
    assert walk(s, K.HOST_OOM, 1, gpus_have_room_for_zero3=True) == ["deepspeed zero3_offload -> zero3"]
    assert walk(s, K.HOST_OOM, 3, gpus_have_room_for_zero3=False)[:2] == [
        "dataloader_pin_memory true -> false, DeepSpeed offload pin_memory true -> false",
        "per_device_train_batch_size 2 -> 1, gradient_accumulation_steps 1 -> 2",
    ]


@pytest.mark.parametrize("deepspeed", [None, "zero2", "zero3"])
def test_pinning_off_names_deepspeeds_offload_only_where_a_rung_offloads(deepspeed: str | None) -> None:
    """A host OOM without DeepSpeed had been answered "DeepSpeed offload pin_memory true -> false", a change
    that reached nothing (hostile45report F2)."""
    s = Settings(micro_batch=2, grad_accum=1, world_size=1, deepspeed=deepspeed, dataloader_num_workers=0)
    assert walk(s, K.MEMLOCK, 1) == ["dataloader_pin_memory true -> false"]
    assert walk(replace(s, dataloader_pin_memory=False), K.MEMLOCK, 1) != ["DeepSpeed offload pin_memory true -> false"]


def test_custom_deepspeed_json_is_not_replaced() -> None:
    s = Settings(micro_batch=1, grad_accum=1, world_size=1, deepspeed="/my/ds.json")
    assert walk(s, K.CUDA_OOM, 3) == ["give up"]


def test_memlock_with_offload_pinning_already_off_still_turns_the_dataloaders_off() -> None:
    """A low memlock limit: the plan's first attempt already has a zero3_offload copy without pinning."""
    s = Settings(micro_batch=1, grad_accum=1, world_size=1, deepspeed="zero3_offload", offload_pin_memory=False)
    assert walk(s, K.MEMLOCK, 3) == ["dataloader_pin_memory true -> false", "give up"]


def test_eval_oom_halves_the_eval_batch_not_the_training_micro_batch() -> None:
    s = Settings(micro_batch=4, grad_accum=2, world_size=2, deepspeed="zero2", eval_batch=8)
    assert walk(s, K.CUDA_OOM_EVAL, 6) == [
        "per_device_eval_batch_size 8 -> 4",
        "per_device_eval_batch_size 4 -> 2",
        "per_device_eval_batch_size 2 -> 1",
        "deepspeed zero2 -> zero3",
        "deepspeed zero3 -> zero3_offload",
        "give up",
    ]


@pytest.mark.parametrize(
    ("model_type", "env", "expected"),
    [
        pytest.param("qwen2_vl", {}, "MAX_PIXELS", id="qwen2-vl-reads-max-pixels"),
        pytest.param("qwen2_5_vl", {}, "MAX_PIXELS", id="qwen2.5-vl-reads-max-pixels"),
        pytest.param("qwen2_5_vl", {"IMAGE_MAX_TOKEN_NUM": "4096"}, "IMAGE_MAX_TOKEN_NUM", id="token-num-set-wins"),
        pytest.param("qwen3_vl", {}, "IMAGE_MAX_TOKEN_NUM", id="qwen3-vl-reads-image-max-token-num"),
        pytest.param("qwen3_vl", {"MAX_PIXELS": "1003520"}, "MAX_PIXELS", id="qwen3-vl-converts-a-users-max-pixels"),
        pytest.param("qwen3_vl_emb", {"MAX_PIXELS": "1003520", "IMAGE_MAX_TOKEN_NUM": "1800"}, "IMAGE_MAX_TOKEN_NUM",
                     id="token-num-wins-over-max-pixels"),
        pytest.param("llava", {"MAX_PIXELS": "1003520"}, None, id="a-model-that-ignores-max-pixels-no-rung"),
        pytest.param("internvl_chat", {}, "MAX_NUM", id="internvl-remote-reads-max-num"),
        pytest.param("internvl", {"MAX_NUM": "6"}, None, id="transformers-internvl-no-rung"),
        pytest.param("minicpmv2_6", {}, "MAX_SLICE_NUMS", id="minicpm-v-2.6-reads-max-slice-nums"),
        pytest.param("minicpmv4_6", {}, "MAX_SLICE_NUMS", id="minicpm-v-4.6-reads-max-slice-nums"),
        pytest.param("minicpmv2_5", {"MAX_SLICE_NUMS": "4"}, None, id="minicpm-v-2.5-reads-none"),
        pytest.param("minicpmv", {}, None, id="config-minicpmv-may-be-2.5-no-rung"),
        pytest.param("ovis2_5", {}, "MAX_PIXELS", id="ovis2.5-reads-max-pixels-itself"),
        pytest.param(None, {}, None, id="unknown-model-no-rung"),
    ],
)  # fmt: skip
def test_vision_budget_is_the_variable_the_processor_reads(
    model_type: str | None, env: dict[str, str], expected: str | None
) -> None:
    from launcher.plan.vision_budget import vision_budget_for

    found = vision_budget_for(model_type, env)
    assert (found.env if found else None) == expected


@pytest.mark.parametrize(
    ("env", "start", "rungs"),
    [
        pytest.param("MAX_NUM", None, ["12 -> 6", "6 -> 3", "3 -> 1"], id="internvl-tiles-down-to-one"),
        pytest.param("MAX_SLICE_NUMS", None, ["9 -> 4", "4 -> 2", "2 -> 1"], id="minicpm-v-down-to-the-whole-image"),
        # Settings keep only the variable's name; Ovis2.5's first attempt carries its own 1344 x 1792
        # (test_settings.py), so the ladder halves that, not Qwen-VL's 16384 tokens, down to 448 x 448
        pytest.param("MAX_PIXELS", 1344 * 1792, ["2408448 -> 1204224", "1204224 -> 602112", "602112 -> 301056"],
                     id="ovis2.5-from-its-own-default"),
    ],
)  # fmt: skip
def test_an_image_budget_is_halved_down_to_its_floor(env: str, start: int | None, rungs: list[str]) -> None:
    s = Settings(
        micro_batch=1, grad_accum=1, world_size=1, deepspeed="zero3_offload", vision_env=env, vision_budget=start
    )
    assert walk(s, K.CUDA_OOM, 5) == [f"{env} {rung}" for rung in rungs] + ["give up"]


def test_qwen3_vl_halves_image_max_token_num_and_other_vl_models_skip_the_rung() -> None:
    s = Settings(micro_batch=1, grad_accum=1, world_size=1, deepspeed="zero3_offload", vision_env="IMAGE_MAX_TOKEN_NUM")
    assert walk(s, K.CUDA_OOM, 2) == ["IMAGE_MAX_TOKEN_NUM 16384 -> 8192", "IMAGE_MAX_TOKEN_NUM 8192 -> 4096"]
    assert walk(Settings(micro_batch=1, grad_accum=1, world_size=1, deepspeed="zero3_offload"), K.CUDA_OOM, 2) == [
        "give up"
    ]


def test_a_failed_download_retries_the_same_settings_twice_then_says_what_to_do() -> None:
    assert walk(BASE, K.DOWNLOAD, 5) == ["no change", "no change", "give up"]
    end = next_step(BASE, K.DOWNLOAD, [K.DOWNLOAD, K.DOWNLOAD])
    assert isinstance(end, GiveUp) and "3 attempts" in end.reason and "HF_ENDPOINT" in end.reason


def test_only_a_failed_download_waits_and_each_wait_is_four_times_the_last() -> None:
    from launcher.plan.degrade import wait_before_retry

    assert [wait_before_retry(K.DOWNLOAD, [K.DOWNLOAD] * n, 30.0) for n in range(3)] == [30.0, 120.0, 480.0]
    assert wait_before_retry(K.DOWNLOAD, [K.CUDA_OOM], 30.0) == 30.0  # other kinds before it do not count
    assert wait_before_retry(K.COMM_ERROR, [], 30.0) == wait_before_retry(K.CUDA_OOM, [], 30.0) == 0.0


def test_without_deepspeed_installed_no_rung_and_no_guided_step_moves_the_zero_stage() -> None:
    """Where DeepSpeed is not installed for the ranks' Python (LLaMA-Factory's own environment), a rung to zero2
    stopped every rank on its import, and the run gave up as unknown (hostile47lf F3): the ZeRO stage is a knob
    the ladder leaves alone, and the next rung is taken instead."""
    from launcher.plan.guided import _candidates

    none = Settings(micro_batch=1, grad_accum=4, world_size=2, gradient_checkpointing=True, deepspeed=None)
    assert isinstance(step := next_step(none, K.CUDA_OOM), Step) and step.settings.deepspeed == "zero2"
    without = replace(none, zero_available=False)
    step = next_step(without, K.CUDA_OOM)
    assert not isinstance(step, Step) or step.settings.deepspeed is None, step
    assert all(c.deepspeed is None for c in _candidates(replace(without, micro_batch=4, grad_accum=1), "step"))
    assert all(c.deepspeed is None for c in _candidates(without, "load"))
