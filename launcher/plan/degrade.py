"""The degradation ladder: from the settings that failed and the failure, the next settings or give up.

Pure and deterministic. Every rung keeps the global batch (micro-batch x grad-accum x world size), so a
resumed run sees the same samples per optimizer step. The rungs, per kind:

With a memory estimate, a GPU OOM takes the guided ladder's step instead (launcher.plan.guided: the cheapest
settings predicted to fit, several knobs at once); these rungs are its fallback. Without one:

- device_map runs (one process, the model split over the GPUs), after cuda_oom, cuda_oom_load or
  cuda_oom_eval: first rebalance (move layers off the GPU whose peak was the largest share of its memory,
  through --max_memory; at most MAX_REBALANCES times, only while the peaks were uneven), then the rungs
  below without the ZeRO ones (safe-sft chose device_map because ZeRO fits only with offload).
- cuda_oom: smaller micro-batch with more accumulation; gradient checkpointing on; a higher ZeRO stage
  (zero2 -> zero3 -> zero3_offload); half the image budget where the model's processor reads one from
  the environment (MAX_PIXELS for Qwen2/2.5-VL and Ovis2.5, IMAGE_MAX_TOKEN_NUM for Qwen3-VL and later,
  MAX_NUM tiles for InternVL's remote code, MAX_SLICE_NUMS slices for MiniCPM-V 2.6 and later; no rung
  for other models); a shorter max_length only if the user allowed it; give up.
- cuda_oom_eval (in evaluation): half per_device_eval_batch_size (the training micro-batch stays); then a
  higher ZeRO stage, the image budget, max_length as above.
- cuda_oom_load: a higher ZeRO stage or offload first, then the cuda_oom rungs.
- cuda_oom_save: save_only_model, then the cuda_oom rungs.
- host_oom: fewer dataloader workers; off offload where the GPUs have room; pinning off; smaller micro-batch.
- memlock: pinning off (the dataloader's and DeepSpeed offload's, whichever is still on). shm: dataloader
  workers 0.
- comm_timeout, comm_error, hang: the same settings once more, then NCCL_P2P_DISABLE=1.
- killed, unknown: the same settings once more.
- download (the hub or another web host could not be reached): the same settings after a wait
  (`wait_before_retry`: --download-wait, then DOWNLOAD_WAIT_GROWTH times the wait before), DOWNLOAD_RETRIES
  times in a run; then stop with what to do where the network does not come back.
- user_error, cuda_error, crash, interrupted: stop.
- disk_full: stop (the same settings would fill the same disk again; the supervisor names the dir and its
  free space).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from launcher.model import FailureKind
from launcher.plan.vision_budget import VisionBudget, budget_named

if TYPE_CHECKING:
    from launcher.plan.guided import Memory

ZERO_LADDER = ("zero2", "zero3", "zero3_offload")


def vision_budget_of(s: Settings) -> VisionBudget | None:
    """The image budget these settings' model reads (MAX_PIXELS, IMAGE_MAX_TOKEN_NUM, MAX_NUM, MAX_SLICE_NUMS),
    or None."""
    return budget_named(s.vision_env) if s.vision_env else None


MIN_MAX_LENGTH = 256
DOWNLOAD_RETRIES = 2
DOWNLOAD_WAIT_GROWTH = 4  # each wait before a download's retry is this many times the one before
DOWNLOAD_FIX = (
    "check the network and proxy (HTTPS_PROXY) from this node, or use another endpoint (HF_ENDPOINT for a "
    "mirror, USE_HF=1 or 0 for the other hub); on nodes without internet, download the model and datasets "
    "once where there is, then pass their local paths"
)
# What chooses where a download goes: the hub, its address, the proxy (a hub client's log rarely names them)
DOWNLOAD_ENV = ("USE_HF", "HF_ENDPOINT", "MODELSCOPE_DOMAIN", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
GIVE_UP_KINDS = frozenset(
    {FailureKind.USER_ERROR, FailureKind.CUDA_ERROR, FailureKind.CRASH, FailureKind.INTERRUPTED, FailureKind.DISK_FULL}
)


@dataclass(frozen=True)
class Settings:
    """The knobs the ladder turns; everything else in the user's argv stays as it was."""

    micro_batch: int
    grad_accum: int
    world_size: int
    gradient_checkpointing: bool = True
    deepspeed: str | None = None
    save_only_model: bool = False
    dataloader_num_workers: int = 1
    dataloader_pin_memory: bool = True  # --dataloader_pin_memory
    offload_pin_memory: bool = True  # DeepSpeed offload's pin_memory (zero3_offload configs)
    eval_batch: int = 1  # per_device_eval_batch_size
    vision_env: str | None = None  # what the model's processor reads as its image budget; None: no rung
    vision_budget: int | None = None  # its value; None: the processor's default
    max_length: int | None = None
    nccl_p2p_disable: bool = False
    allow_shorter_max_length: bool = False
    device_map: bool = False  # one process, the model split over the GPUs: no ZeRO rung applies
    zero_available: bool = True  # False: DeepSpeed is not installed where the ranks run: no ZeRO rung applies
    max_memory: tuple[int, ...] = ()  # a device_map run: the --max_memory budgets safe-sft passes; () otherwise
    rebalanced: int = 0  # how many times a device_map run's budgets were moved after an OOM

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.world_size


@dataclass(frozen=True)
class Step:
    """One rung taken: the new settings, what changed, and why."""

    settings: Settings
    change: str
    reason: str
    predicted_need_bytes: int | None = None  # the guided ladder's corrected estimate for the new settings


@dataclass(frozen=True)
class GiveUp:
    reason: str


Rung = Callable[[Settings], Step | None]
OOM_PHASE = {FailureKind.CUDA_OOM: "step", FailureKind.CUDA_OOM_LOAD: "load", FailureKind.CUDA_OOM_SAVE: "save"}
# a device_map run's GPUs out of balance: rebalance first (launcher.plan.device_map.rebalance, from the
# attempt's per-GPU peaks), then the ordinary rungs; a checkpoint write's OOM takes save_only_model instead
REBALANCE_KINDS = frozenset({FailureKind.CUDA_OOM, FailureKind.CUDA_OOM_LOAD, FailureKind.CUDA_OOM_EVAL})
MAX_REBALANCES = 2


def _smaller_micro_batch(s: Settings) -> Step | None:
    """halve per_device_train_batch_size and raise gradient_accumulation_steps to match"""
    if s.micro_batch <= 1:
        return None
    divisor = next(d for d in range(s.micro_batch // 2, 0, -1) if s.micro_batch % d == 0)
    accum = s.grad_accum * s.micro_batch // divisor
    new = replace(s, micro_batch=divisor, grad_accum=accum)
    return Step(
        new,
        f"per_device_train_batch_size {s.micro_batch} -> {divisor}, gradient_accumulation_steps "
        f"{s.grad_accum} -> {accum} (global batch stays {s.global_batch})",
        "less activation memory per step",
    )


def _checkpointing_on(s: Settings) -> Step | None:
    """turn gradient checkpointing on"""
    if s.gradient_checkpointing:
        return None
    return Step(
        replace(s, gradient_checkpointing=True),
        "gradient_checkpointing false -> true",
        "recompute activations instead of keeping them",
    )


def _higher_zero(s: Settings) -> Step | None:
    """move to the next ZeRO stage (zero2 -> zero3 -> zero3_offload)"""
    # one process over the GPUs (safe-sft chose it because ZeRO fits only with offload), or no DeepSpeed
    if s.device_map or not s.zero_available:
        return None
    current = s.deepspeed
    if current in ZERO_LADDER:
        index = ZERO_LADDER.index(current)
        if index + 1 >= len(ZERO_LADDER):
            return None
        target = ZERO_LADDER[index + 1]
    elif current in (None, "zero0", "zero1"):
        target = "zero2"
    elif current == "zero2_offload":
        target = "zero3_offload"
    else:
        return None  # not a ZeRO rung (a user's config is named by its rung before it gets here)
    why = (
        "offload parameters and optimizer state to host RAM"
        if target.endswith("offload")
        else ("shard parameters too" if target == "zero3" else "shard optimizer state and gradients")
    )
    return Step(replace(s, deepspeed=target), f"deepspeed {current or 'none'} -> {target}", why)


def _smaller_images(s: Settings) -> Step | None:
    """halve the image budget the model's processor reads (MAX_PIXELS, IMAGE_MAX_TOKEN_NUM, MAX_NUM or
    MAX_SLICE_NUMS)"""
    budget = vision_budget_of(s)
    if budget is None:
        return None
    current = s.vision_budget or budget.default
    if current // 2 < budget.minimum:
        return None
    return Step(
        replace(s, vision_budget=current // 2),
        f"{budget.env} {current} -> {current // 2}",
        "fewer vision tokens per image",
    )


def _smaller_eval_batch(s: Settings) -> Step | None:
    """halve per_device_eval_batch_size (the training micro-batch stays)"""
    if s.eval_batch <= 1:
        return None
    half = s.eval_batch // 2
    return Step(
        replace(s, eval_batch=half),
        f"per_device_eval_batch_size {s.eval_batch} -> {half}",
        "the evaluation ran out of memory: fewer samples per evaluation step; training is unchanged",
    )


def _shorter_max_length(s: Settings) -> Step | None:
    """halve max_length (only with --allow-shorter-max-length)"""
    if not s.allow_shorter_max_length or s.max_length is None or s.max_length // 2 < MIN_MAX_LENGTH:
        return None
    return Step(
        replace(s, max_length=s.max_length // 2),
        f"max_length {s.max_length} -> {s.max_length // 2}",
        "shorter sequences (you allowed it; long samples are truncated)",
    )


def _save_only_model(s: Settings) -> Step | None:
    """save_only_model true (checkpoints without optimizer state)"""
    if s.save_only_model:
        return None
    return Step(
        replace(s, save_only_model=True),
        "save_only_model false -> true",
        "checkpoints without optimizer state need far less memory to write",
    )


def _fewer_workers(s: Settings) -> Step | None:
    """halve dataloader_num_workers"""
    if s.dataloader_num_workers <= 0:
        return None
    fewer = s.dataloader_num_workers // 2
    return Step(
        replace(s, dataloader_num_workers=fewer),
        f"dataloader_num_workers {s.dataloader_num_workers} -> {fewer}",
        "each dataloader worker holds its own copy of the dataset in host RAM",
    )


def _workers_zero(s: Settings) -> Step | None:
    """dataloader_num_workers 0"""
    if s.dataloader_num_workers == 0:
        return None
    return Step(
        replace(s, dataloader_num_workers=0),
        f"dataloader_num_workers {s.dataloader_num_workers} -> 0",
        "no worker processes, no shared-memory batches",
    )


def offloads(s: Settings) -> bool:
    """DeepSpeed offloads to the CPU on this rung (zero2_offload, zero3_offload): only then does it pin."""
    return s.deepspeed is not None and s.deepspeed.endswith("_offload")


def _pin_off(s: Settings) -> Step | None:
    """pinning off: the dataloader's, and DeepSpeed offload's, whichever is still on"""
    changes = []
    if s.dataloader_pin_memory:
        changes.append("dataloader_pin_memory true -> false")
    if s.offload_pin_memory and offloads(s):
        changes.append("DeepSpeed offload pin_memory true -> false")
    if not changes:
        return None
    return Step(
        replace(s, dataloader_pin_memory=False, offload_pin_memory=False),
        ", ".join(changes),
        "pinned pages are locked host RAM",
    )


def _p2p_off(s: Settings) -> Step | None:
    """NCCL_P2P_DISABLE=1"""
    if s.nccl_p2p_disable:
        return None
    return Step(
        replace(s, nccl_p2p_disable=True), "NCCL_P2P_DISABLE=1", "GPU peer-to-peer transfers are a common cause"
    )


def _same_again(s: Settings) -> Step:
    return Step(s, "no change", "retry once: the failure may be transient")


OOM_RUNGS: tuple[Rung, ...] = (
    _smaller_micro_batch,
    _checkpointing_on,
    _higher_zero,
    _smaller_images,
    _shorter_max_length,
)


def _host_oom_rungs(gpus_have_room_for_zero3: bool) -> tuple[Rung, ...]:
    def off_offload(s: Settings) -> Step | None:
        """zero3_offload -> zero3 where the GPUs have room"""
        if s.deepspeed != "zero3_offload" or not gpus_have_room_for_zero3:
            return None
        return Step(
            replace(s, deepspeed="zero3"),
            "deepspeed zero3_offload -> zero3",
            "the GPUs have room for zero3: stop holding parameters and optimizer state in host RAM",
        )

    return (_fewer_workers, off_offload, _pin_off, _smaller_micro_batch)


def next_step(
    settings: Settings,
    kind: FailureKind,
    history: Sequence[FailureKind] = (),
    *,
    gpus_have_room_for_zero3: bool = False,
    memory: Memory | None = None,
    rebalance: Rung | None = None,
    nccl: bool = True,
) -> Step | GiveUp:
    """The next settings after a failure of `kind`; `history` holds the kinds of earlier failures. With
    `memory` (an estimate and the failed attempt's figures), a GPU OOM takes the guided ladder's step
    (launcher.plan.guided) when one is predicted to fit; otherwise the one-rung ladder below. `nccl`: the
    ranks talk over NCCL (GPUs), so its knob is a rung for a communication failure; on the CPU it is not."""
    if kind is FailureKind.DISK_FULL:
        return GiveUp(
            "the disk is full: the same settings would fill it again; free space, then rerun with --resume-latest "
            "(from the newest complete checkpoint)"
        )
    if kind in GIVE_UP_KINDS:
        return GiveUp(f"{kind.value} is not something a retry fixes")
    if kind in (FailureKind.COMM_TIMEOUT, FailureKind.COMM_ERROR, FailureKind.HANG):
        comm = (FailureKind.COMM_TIMEOUT, FailureKind.COMM_ERROR, FailureKind.HANG)
        if sum(1 for k in history if k in comm) == 0:
            return _same_again(settings)
        if not nccl:  # gloo on the CPU: no NCCL knob changes anything, and another attempt reloads the model
            return GiveUp("communication still fails, and the run uses gloo (the CPU): no NCCL setting to change")
        return _p2p_off(settings) or GiveUp("communication still fails with NCCL_P2P_DISABLE=1")
    if kind in (FailureKind.KILLED, FailureKind.UNKNOWN):
        if kind not in history:
            return _same_again(settings)
        return GiveUp(f"{kind.value} twice in a row")
    if kind is FailureKind.DOWNLOAD:
        failed = history.count(kind) + 1
        if failed <= DOWNLOAD_RETRIES:
            return Step(settings, "no change", "retry after a wait: the host may answer again")
        return GiveUp(f"a download failed in {failed} attempts: {DOWNLOAD_FIX}")

    if rebalance is not None and settings.device_map and kind in REBALANCE_KINDS:
        moved = rebalance(settings)
        if moved is not None:
            return moved
    if memory is not None and kind in OOM_PHASE:
        from launcher.plan.guided import guided_step  # guided builds on this module's Settings and Step

        guided = guided_step(settings, replace(memory, died_at=OOM_PHASE[kind]))
        if guided is not None:
            return guided
    rungs = _rungs(kind, gpus_have_room_for_zero3)
    if not rungs:
        return GiveUp(f"no rung for {kind.value}")
    for rung in rungs:
        step = rung(settings)
        if step is not None:
            return step
    return GiveUp(f"every rung for {kind.value} has been tried")


def wait_before_retry(kind: FailureKind, history: Sequence[FailureKind], first_wait: float) -> float:
    """Seconds to wait before retrying after a failure of `kind`: a failed download waits `first_wait`, then
    DOWNLOAD_WAIT_GROWTH times as long each time (the host or the network may need minutes to come back);
    nothing else waits."""
    if kind is not FailureKind.DOWNLOAD:
        return 0.0
    return first_wait * float(DOWNLOAD_WAIT_GROWTH ** history.count(kind))


def _rungs(kind: FailureKind, gpus_have_room_for_zero3: bool) -> tuple[Rung, ...]:
    table: dict[FailureKind, tuple[Rung, ...]] = {
        FailureKind.CUDA_OOM: OOM_RUNGS,
        FailureKind.CUDA_OOM_LOAD: (_higher_zero, *OOM_RUNGS),
        FailureKind.CUDA_OOM_SAVE: (_save_only_model, *OOM_RUNGS),
        FailureKind.CUDA_OOM_EVAL: (_smaller_eval_batch, _higher_zero, _smaller_images, _shorter_max_length),
        FailureKind.HOST_OOM: _host_oom_rungs(gpus_have_room_for_zero3),
        FailureKind.MEMLOCK: (_pin_off,),
        FailureKind.SHM: (_workers_zero,),
    }
    return table.get(kind, ())


def describe_ladder(kind: FailureKind) -> list[str]:
    """What safe-sft would change after a failure of this kind, in order (for `safe-sft explain`)."""
    if kind is FailureKind.DISK_FULL:
        return [
            "nothing: stop and name the full disk (a retry would fill it again); free space, rerun with --resume-latest"
        ]
    if kind in GIVE_UP_KINDS:
        return ["nothing: stop and show the error (a retry does not fix this)"]
    if kind in (FailureKind.COMM_TIMEOUT, FailureKind.COMM_ERROR, FailureKind.HANG):
        return ["the same settings once more", "NCCL_P2P_DISABLE=1", "then give up"]
    if kind in (FailureKind.KILLED, FailureKind.UNKNOWN):
        return ["the same settings once more", "then give up"]
    if kind is FailureKind.DOWNLOAD:
        waits = [f"{DOWNLOAD_WAIT_GROWTH**n} x --download-wait" for n in range(DOWNLOAD_RETRIES)]
        return [f"the same settings after {wait} seconds" for wait in waits] + [f"then give up: {DOWNLOAD_FIX}"]
    rungs = [str(rung.__doc__) for rung in _rungs(kind, True)]
    if kind in REBALANCE_KINDS:
        rungs.append(
            "device_map runs (one process, the model split over the GPUs): first move layers off the GPU that "
            "ran out (--max_memory), then the rungs above without the ZeRO stage"
        )
    return rungs
