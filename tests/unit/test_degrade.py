"""The ladder, rung by rung, as tables: every step keeps the global batch."""

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
        is_multimodal=True,
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
        (K.MEMLOCK, "pin_memory true -> false"),
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


def test_host_oom_backs_off_offload_only_when_gpus_have_room() -> None:
    s = Settings(micro_batch=2, grad_accum=1, world_size=1, deepspeed="zero3_offload", dataloader_num_workers=0)
    assert walk(s, K.HOST_OOM, 1, gpus_have_room_for_zero3=True) == ["deepspeed zero3_offload -> zero3"]
    assert walk(s, K.HOST_OOM, 3, gpus_have_room_for_zero3=False)[:2] == [
        "pin_memory true -> false",
        "per_device_train_batch_size 2 -> 1, gradient_accumulation_steps 1 -> 2",
    ]


def test_custom_deepspeed_json_is_not_replaced() -> None:
    s = Settings(micro_batch=1, grad_accum=1, world_size=1, deepspeed="/my/ds.json")
    assert walk(s, K.CUDA_OOM, 3) == ["give up"]
