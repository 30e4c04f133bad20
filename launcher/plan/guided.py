"""The guided ladder: after a GPU OOM, jump to the cheapest settings predicted to fit, several knobs at once.

Contract: pure and deterministic. In: the settings that failed, where they died (load, step, save), and a
`Memory` (the estimate's per-GPU need of any settings, the smallest GPU's capacity, the failed attempt's
measured peak, the worst node's figures across nodes). Out: a `Step` (keeping the global batch) or None
when no estimate is possible or nothing is predicted to fit; the caller then takes today's one-rung
ladder (launcher.plan.degrade).

The rule:
1. Candidates: every combination reachable from the failed settings, never moving a knob back:
   a smaller micro-batch (a divisor, accumulation rising to match), gradient checkpointing on, a higher
   ZeRO rung (zero2 -> zero3 -> zero3_offload), MAX_PIXELS halved up to three times (vision-language
   models), max_length halved up to three times (only where allowed).
2. Correction: the estimate of the failed settings died, so their true need was above the GPU's capacity
   (and at least the measured peak): the factor k = max(1, max(capacity, peak) / estimate_failed) scales
   every candidate's estimate. An OOM while loading says the model states alone did not fit: only
   candidates that shrink the model states (a higher ZeRO rung) are considered.
3. Fit: predicted need = k x estimate <= capacity x (1 - MARGIN).
4. Choice: the least speed cost (SPEED_COST, multiplied over the knobs that move), ties broken by the
   fewest knobs moved, then the smallest predicted need.
An OOM while saving a checkpoint: the training step fitted, so `save_only_model true` alone is the step
(its cost is the optimizer state missing from checkpoints, not speed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from itertools import product

from launcher.plan.degrade import MIN_MAX_LENGTH, ZERO_LADDER, Settings, Step, vision_budget_of
from launcher.plan.vision_budget import VisionBudget

PRIOR = 0.7  # the correction when the failed attempt's figures prove less (the estimate said it would not fit)
MARGIN = 0.1  # a candidate must be predicted to leave this fraction of the GPU free
MAX_HALVINGS = 3  # MAX_PIXELS and max_length: at most this many halvings in one step

# Expected step-time factor of each change (1.0: no slower). Multiplied over the knobs that move.
# Sources: gradient checkpointing recomputes the forward pass (about a third more compute, Chen et al. 2016,
# HF's docs say ~20-30 %); ZeRO-3 all-gathers parameters per layer in forward and backward (1.5x the
# communication of ZeRO-2, DeepSpeed's paper; ~10-20 % slower in practice); offload moves parameters and
# optimizer state over PCIe and steps Adam on the CPU (2-3x slower, far more than anything else); a halved
# micro-batch keeps the global batch but runs smaller kernels (a few percent per halving). Smaller images
# and shorter sequences are faster but change what the model learns: their factor is a penalty that ranks
# them after offload, as today's ladder does.
SPEED_COST: dict[str, float] = {
    "micro_batch_halving": 1.06,  # per halving of the micro-batch
    "gradient_checkpointing": 1.30,
    "zero3": 1.15,  # zero2 (or less) -> zero3
    "offload": 2.50,  # -> zero3_offload, on top of zero3
    "max_pixels_halving": 3.00,  # per halving (a penalty: fewer vision tokens)
    "max_length_halving": 4.00,  # per halving (a penalty: long samples truncated)
}

PHASES = ("load", "step", "save")


@dataclass(frozen=True)
class Memory:
    """What the guided ladder knows of memory; bytes per GPU. `need` is None when no estimate is possible."""

    need: Callable[[Settings], int | None]  # the uncorrected estimate of any settings
    capacity_bytes: int | None  # the smallest GPU's memory (the worst node's)
    peak_bytes: int | None = None  # the failed attempt's measured peak (the worst node's); None without NVML
    died_at: str = "step"  # load | step | save
    floor: float = 0.0  # the least correction earlier OOMs of this run proved (their capacity / estimate)


@dataclass(frozen=True)
class Prediction:
    """One candidate: its settings, predicted need (corrected), speed cost and the changes it makes."""

    settings: Settings
    need_bytes: int
    cost: float
    changes: tuple[str, ...]


def speed_cost(initial: Settings, settings: Settings) -> float:
    """The expected step-time factor of `settings` against `initial` (1.0: as fast)."""
    cost = 1.0
    halvings = _log2_ratio(initial.micro_batch, settings.micro_batch)
    cost *= SPEED_COST["micro_batch_halving"] ** halvings
    if settings.gradient_checkpointing and not initial.gradient_checkpointing:
        cost *= SPEED_COST["gradient_checkpointing"]
    before, after = _zero_rank(initial.deepspeed), _zero_rank(settings.deepspeed)
    if after >= 3 > before:
        cost *= SPEED_COST["zero3"]
    if after >= 4 > before:
        cost *= SPEED_COST["offload"]
    budget = vision_budget_of(settings)
    if budget is not None and initial.vision_budget != settings.vision_budget:
        start = initial.vision_budget or budget.default
        cost *= SPEED_COST["max_pixels_halving"] ** _log2_ratio(start, settings.vision_budget or start)
    if initial.max_length and settings.max_length and settings.max_length != initial.max_length:
        cost *= SPEED_COST["max_length_halving"] ** _log2_ratio(initial.max_length, settings.max_length)
    return float(cost)


def correction(failed_need: int, memory: Memory) -> float:
    """k: what the failed attempt says about the estimate (it died, so the need was above what it had)."""
    seen = max(memory.capacity_bytes or 0, memory.peak_bytes or 0)
    prior = max(PRIOR, memory.floor)
    return float(max(prior, seen / failed_need)) if failed_need > 0 else prior


def predictions(failed: Settings, memory: Memory) -> list[Prediction] | None:
    """Every candidate reachable from `failed`, with its corrected need; None when no estimate is possible."""
    failed_need = memory.need(failed)
    if failed_need is None or not memory.capacity_bytes:
        return None
    k = correction(failed_need, memory)
    out = []
    for candidate in _candidates(failed, memory.died_at):
        need = memory.need(candidate)
        if need is None:
            return None
        out.append(Prediction(candidate, int(need * k), speed_cost(failed, candidate), _changes(failed, candidate)))
    return out


def guided_step(failed: Settings, memory: Memory) -> Step | None:
    """The cheapest step predicted to fit with MARGIN; None: no estimate, or nothing predicted to fit."""
    if memory.died_at == "save" and not failed.save_only_model:
        new = replace(failed, save_only_model=True)
        return Step(
            new,
            "save_only_model false -> true",
            "the training steps fitted and the checkpoint write did not: checkpoints without optimizer state",
        )
    found = predictions(failed, memory)
    if not found or memory.capacity_bytes is None:
        return None
    room = memory.capacity_bytes * (1 - MARGIN)
    fits = [p for p in found if p.need_bytes <= room]
    if not fits:
        return None
    best = min(fits, key=lambda p: (p.cost, len(p.changes), p.need_bytes, p.changes))
    failed_need = memory.need(failed) or 0
    k = correction(failed_need, memory)
    reason = (
        f"predicted {_gib(best.need_bytes)} of {_gib(memory.capacity_bytes)} per GPU "
        f"(estimate x{k:.2f} from the failed attempt, {int(MARGIN * 100)}% margin); "
        f"least speed cost x{best.cost:.2f} of {len(fits)} of {len(found)} candidates predicted to fit"
    )
    return Step(best.settings, "; ".join(best.changes), reason, predicted_need_bytes=best.need_bytes)


# ---- candidates ---------------------------------------------------------------------------------------


def _candidates(s: Settings, died_at: str) -> Iterator[Settings]:
    micro = [d for d in range(s.micro_batch, 0, -1) if s.micro_batch % d == 0]
    checkpointing = [True] if s.gradient_checkpointing else [False, True]
    zero = [s.deepspeed] if s.device_map or not s.zero_available else _zero_options(s.deepspeed)
    budget: VisionBudget | None = vision_budget_of(s)  # only where the model's processor reads one
    pixels = _halvings(s.vision_budget or budget.default, budget.minimum) if budget else [s.vision_budget]
    lengths = (
        _halvings(s.max_length, MIN_MAX_LENGTH)
        if s.allow_shorter_max_length and s.max_length is not None
        else [s.max_length]
    )
    if died_at == "load" and not s.device_map and s.zero_available:
        zero = zero[1:]  # the model states alone did not fit: only a higher rung can help
    for m, ckpt, z, px, length in product(micro, checkpointing, zero, pixels, lengths):
        if budget is not None and px == (s.vision_budget or budget.default):
            px = s.vision_budget
        candidate = replace(
            s,
            micro_batch=m,
            grad_accum=s.grad_accum * s.micro_batch // m,
            gradient_checkpointing=ckpt,
            deepspeed=z,
            vision_budget=px,
            max_length=length,
        )
        if candidate != s:
            yield candidate


def _zero_options(current: str | None) -> list[str | None]:
    if current in ZERO_LADDER:
        return list(ZERO_LADDER[ZERO_LADDER.index(current) :])
    if current in (None, "zero0", "zero1"):
        return [current, *ZERO_LADDER]
    if current == "zero2_offload":
        return [current, "zero3_offload"]
    return [current]  # a config the ladder cannot place


def _halvings(start: int, floor: int) -> list[int]:
    values = [start]
    while len(values) <= MAX_HALVINGS and values[-1] // 2 >= floor:
        values.append(values[-1] // 2)
    return values


def _zero_rank(name: str | None) -> int:
    order = {None: 0, "zero0": 0, "zero1": 1, "zero2": 2, "zero2_offload": 2, "zero3": 3, "zero3_offload": 4}
    return order.get(name, 2)


def _log2_ratio(big: int, small: int) -> float:
    return max(math.log2(big / max(small, 1)), 0.0)


def _changes(a: Settings, b: Settings) -> tuple[str, ...]:
    out = []
    if (a.micro_batch, a.grad_accum) != (b.micro_batch, b.grad_accum):
        out.append(
            f"per_device_train_batch_size {a.micro_batch} -> {b.micro_batch}, gradient_accumulation_steps "
            f"{a.grad_accum} -> {b.grad_accum} (global batch stays {a.global_batch})"
        )
    if a.gradient_checkpointing != b.gradient_checkpointing:
        out.append("gradient_checkpointing false -> true")
    if a.deepspeed != b.deepspeed:
        out.append(f"deepspeed {a.deepspeed or 'none'} -> {b.deepspeed}")
    budget = vision_budget_of(b)
    if budget is not None and a.vision_budget != b.vision_budget:
        out.append(f"{budget.env} {a.vision_budget or budget.default} -> {b.vision_budget}")
    if a.max_length != b.max_length:
        out.append(f"max_length {a.max_length} -> {b.max_length}")
    return tuple(out)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"
