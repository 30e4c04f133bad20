"""The guided ladder: the cheapest settings predicted to fit, several knobs at once, the global batch kept."""

from dataclasses import replace

from launcher.model import FailureKind as K
from launcher.plan.degrade import Settings, Step, next_step
from launcher.plan.guided import MARGIN, PRIOR, Memory, correction, guided_step, predictions, speed_cost

GiB = 1 << 30
START = Settings(micro_batch=4, grad_accum=2, world_size=8, gradient_checkpointing=False, deepspeed="zero2")
STATES = {None: 40, "zero2": 30, "zero3": 28, "zero3_offload": 2}  # GiB of model states per rung


def need(s: Settings) -> int:
    """A toy estimate: model states by rung, 1 GiB of activations per sample (a fifth with checkpointing)."""
    acts = s.micro_batch * (0.2 if s.gradient_checkpointing else 1.0)
    return int((STATES[s.deepspeed] + acts) * GiB)


def test_two_knobs_at_once_where_one_rung_needs_two_attempts() -> None:
    # 34 GiB estimated, died on a 40 GiB GPU: k = 40/34, room 36 GiB, so an estimate of at most 30.6 fits.
    # mb 2 (32), mb 1 (31), checkpointing (30.8), zero3 (32) alone do not; mb 2 + zero3 (30) does, at
    # x1.06 x1.15 = x1.22, cheaper than mb 1 + zero3 (x1.29) or zero3 + checkpointing (x1.50).
    memory = Memory(need, 40 * GiB, 40 * GiB)
    step = next_step(START, K.CUDA_OOM, memory=memory)
    assert isinstance(step, Step)
    assert step.settings == replace(START, micro_batch=2, grad_accum=4, deepspeed="zero3")
    assert step.change.count(";") == 1
    assert step.settings.global_batch == START.global_batch
    assert step.predicted_need_bytes is not None and step.predicted_need_bytes <= 40 * GiB * (1 - MARGIN)
    blind = next_step(START, K.CUDA_OOM)
    assert isinstance(blind, Step) and blind.settings.deepspeed == "zero2" and blind.settings.micro_batch == 2


def test_every_candidate_keeps_the_global_batch_and_never_moves_a_knob_back() -> None:
    vl = replace(START, micro_batch=6, grad_accum=3, deepspeed="zero3", vision_env="MAX_PIXELS")
    found = predictions(vl, Memory(need, 40 * GiB))
    assert found
    for p in found:
        assert p.settings.global_batch == vl.global_batch
        assert p.settings.deepspeed in ("zero3", "zero3_offload")
        assert p.settings.micro_batch <= 6


def test_no_estimate_falls_back_to_todays_order() -> None:
    memory = Memory(lambda s: None, 40 * GiB)
    assert next_step(START, K.CUDA_OOM, memory=memory) == next_step(START, K.CUDA_OOM)


def test_nothing_predicted_to_fit_falls_back_to_todays_order() -> None:
    memory = Memory(need, 1 * GiB, 1 * GiB)
    assert guided_step(START, memory) is None
    assert next_step(START, K.CUDA_OOM, memory=memory) == next_step(START, K.CUDA_OOM)


def test_save_oom_takes_save_only_model_alone() -> None:
    step = next_step(START, K.CUDA_OOM_SAVE, memory=Memory(need, 40 * GiB))
    assert isinstance(step, Step)
    assert step.settings == replace(START, save_only_model=True)


def test_load_oom_moves_the_zero_rung() -> None:
    step = next_step(START, K.CUDA_OOM_LOAD, memory=Memory(need, 80 * GiB))
    assert isinstance(step, Step)
    assert step.settings.deepspeed == "zero3"


def test_offload_only_when_nothing_cheaper_fits() -> None:
    memory = Memory(need, 9 * GiB, 9 * GiB)  # only offload's 2 GiB of states leave room for activations
    step = guided_step(START, memory)
    assert step is not None and step.settings.deepspeed == "zero3_offload"
    roomy = guided_step(START, Memory(need, 40 * GiB, 40 * GiB))
    assert roomy is not None and roomy.settings.deepspeed != "zero3_offload"


def test_correction_from_the_failed_attempt() -> None:
    # the estimate said 60 GiB fits... no: it said 60 and the GPU had 80, yet it died: k >= 80/60
    assert correction(60 * GiB, Memory(need, 80 * GiB)) == 80 / 60
    assert correction(60 * GiB, Memory(need, 40 * GiB)) == PRIOR  # the estimate predicted this OOM
    assert correction(60 * GiB, Memory(need, 40 * GiB, floor=1.2)) == 1.2  # an earlier OOM proved more
    assert correction(60 * GiB, Memory(need, None, 70 * GiB)) == 70 / 60  # no capacity: the peak


def test_speed_costs_rank_offload_far_above_checkpointing() -> None:
    ckpt = speed_cost(START, replace(START, gradient_checkpointing=True))
    offload = speed_cost(START, replace(START, deepspeed="zero3_offload"))
    halved = speed_cost(START, replace(START, micro_batch=2, grad_accum=4))
    assert 1.0 < halved < ckpt < offload
    assert speed_cost(START, START) == 1.0


def test_deterministic() -> None:
    memory = Memory(need, 40 * GiB, 40 * GiB)
    assert guided_step(START, memory) == guided_step(START, memory)


def test_oom_message_figures() -> None:
    from launcher.run.oom_figures import oom_figures

    line = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.32 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.20 GiB memory in use."
    )
    figures = oom_figures(["unrelated", line])
    assert figures.capacity_bytes == int(79.32 * GiB)
    assert figures.in_use_bytes == int(78.20 * GiB)
    assert oom_figures(["CUDA out of memory. Tried to allocate 2.00 GiB"]).capacity_bytes is None
