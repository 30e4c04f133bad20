"""Choose the DeepSpeed strategy: the fastest of zero2, zero3, zero3_offload that fits, with reasons.

Where the data was sampled, a strategy fits when it fits at the data's lengths (Estimate.fits_at_data;
the max_length worst case is shown beside it). A user's explicit `--deepspeed` is kept (with a warning
when the estimate for its ZeRO rung says it will not fit); CPU training keeps whatever the user set.

The refusal rule: a run is refused (`fits` False; the caller decides whether `--force` overrides) only
when no strategy's fixed parts (model states, buffers, context: what no data can change) fit, or its host
RAM does not. When only the data-dependent parts (activations, logits at every sample's max_length) make
every strategy too big, the best strategy whose fixed parts fit is chosen and launched, with a warning
naming the numbers and the levers: real samples are mostly shorter, and the ladder handles a real OOM.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from launcher.model import STRATEGY_ORDER, Estimate, Strategy
from launcher.plan.ds_config import estimated_as
from launcher.units import fmt_bytes


@dataclass(frozen=True)
class Choice:
    strategy: str | None  # a Strategy value, the user's own --deepspeed value, or None
    reason: str
    fits: bool  # False: refused (no strategy's fixed parts fit); launch only with --force
    warnings: tuple[str, ...] = ()
    user_chosen: bool = False
    worst_case_fits: bool = True  # False: launched although every sample at max_length would not fit


def describe(estimate: Estimate, name: str | None = None) -> str:
    """What a strategy needs against what is free; `name`: the rung to call it (a user's zero2_offload config,
    estimated as zero2)."""
    gpu = f"{fmt_bytes(estimate.gpu_need_bytes)} per GPU of {fmt_bytes(estimate.gpu_free_bytes)} free"
    if estimate.gpu_need_at_data_bytes is not None:
        gpu = (
            f"{fmt_bytes(estimate.gpu_need_at_data_bytes)} per GPU at the data's lengths "
            f"({fmt_bytes(estimate.gpu_need_bytes)} at the max_length worst case) of "
            f"{fmt_bytes(estimate.gpu_free_bytes)} free"
        )
    cpu = f"{fmt_bytes(estimate.cpu_need_bytes)} host RAM of {fmt_bytes(estimate.cpu_free_bytes)} available"
    return f"{name or estimate.strategy.value} needs {gpu} and {cpu}"


def choose_strategy(
    estimates: tuple[Estimate, ...],
    *,
    user_deepspeed: str | None,
    user_rung: str | None = None,
    uses_gpus: bool,
    is_lora: bool,
) -> Choice:
    if not uses_gpus:
        kept = f"--deepspeed {user_deepspeed}" if user_deepspeed else "no DeepSpeed"
        return Choice(user_deepspeed, f"CPU training: DeepSpeed stays as you set it ({kept})", True, (), True)

    by_name = {e.strategy.value: e for e in estimates}
    if user_deepspeed:
        own = by_name.get(estimated_as(user_rung) if user_rung else user_deepspeed)
        as_rung = f" ({user_rung})" if user_rung and user_rung != user_deepspeed else ""
        warnings: tuple[str, ...] = ()
        if own is not None and not own.fits:
            better = next((e.strategy.value for e in estimates if e.fits and e.strategy in STRATEGY_ORDER), None)
            hint = f"; {better} would fit" if better else ""
            warnings = (f"your --deepspeed {user_deepspeed}{as_rung} may not fit: {describe(own, user_rung)}{hint}",)
        return Choice(user_deepspeed, f"you chose --deepspeed {user_deepspeed}{as_rung}", True, warnings, True)

    if not estimates:
        return Choice(None, "model size unknown: no DeepSpeed strategy chosen", True)

    rejected: list[str] = []
    for strategy in STRATEGY_ORDER:
        est = by_name[strategy.value]
        if est.fits_at_data:  # the data's sampled lengths where known (launcher.plan.data_lengths)
            why = f"{describe(est)}: the fastest that fits"
            if rejected:
                why += f" ({'; '.join(rejected)})"
            return Choice(strategy.value, why, True)
        rejected.append(f"{strategy.value} does not fit: {_shortfall(est)}")

    data_bound = _fixed_parts_fit(by_name)
    if data_bound is not None:
        return data_bound

    options = ["more GPUs or nodes", "a shorter --max_length", "a smaller --per_device_train_batch_size"]
    if not is_lora:
        options.insert(0, "LoRA (--tuner_type lora)")
    last = by_name[Strategy.ZERO3_OFFLOAD.value]
    fixed = "; ".join(_fixed_shortfall(by_name[s.value]) for s in STRATEGY_ORDER)
    reason = f"nothing fits whatever the data: {fixed}. Options: {', '.join(options)}"
    return Choice(last.strategy.value, reason, False)


# ---- the refusal rule: only the data-dependent parts are over (issue 15, part 4) -------------------------

CLOSE_ENOUGH = 0.5  # a faster strategy is kept while its room for the data is at least this share of the best


def _fixed_parts_fit(by_name: dict[str, Estimate]) -> Choice | None:
    """No strategy fits at the worst case, but some fixed parts fit: the fastest strategy that leaves the
    data at least half the most room any strategy leaves (a slower strategy saves only model-state bytes,
    which matter little next to an overflow of activations, and costs speed on every step). None when no
    fixed parts fit."""
    candidates = [by_name[s.value] for s in STRATEGY_ORDER if by_name[s.value].fixed_fits]
    if not candidates:
        return None
    room = {e.strategy: (e.gpu_free_bytes or 0) - _fixed(e) for e in candidates}
    best_room = max(room.values())
    chosen = next(e for e in candidates if room[e.strategy] >= CLOSE_ENOUGH * best_room)
    data = chosen.gpu_need_bytes - _fixed(chosen)
    levers = ", ".join(f"{text} (saves {fmt_bytes(saved)})" for text, saved in chosen.levers[:3])
    warning = (
        f"{chosen.strategy.value}: at the worst case (every sample at max_length) it needs "
        f"{fmt_bytes(chosen.gpu_need_bytes)} per GPU of {fmt_bytes(chosen.gpu_free_bytes)} free; of it "
        f"{fmt_bytes(_fixed(chosen))} do not depend on the data and fit, {fmt_bytes(data)} are activations and "
        f"logits for full-length samples, {fmt_bytes(room[chosen.strategy])} left for them. Launching: shorter "
        "real samples fit, and the ladder handles an OOM" + (f". Levers: {levers}" if levers else "")
    )
    reason = (
        f"{describe(chosen)} at the worst case; its fixed parts ({fmt_bytes(_fixed(chosen))}) fit and leave "
        f"{fmt_bytes(room[chosen.strategy])} for the data: the best whose fixed parts fit"
    )
    return Choice(chosen.strategy.value, reason, True, (warning,), worst_case_fits=False)


def _fixed(est: Estimate) -> int:
    return est.gpu_need_bytes if est.gpu_fixed_bytes is None else est.gpu_fixed_bytes


def _fixed_shortfall(est: Estimate) -> str:
    if not est.cpu_fits:
        host = f"{fmt_bytes(est.cpu_need_bytes)} host RAM > {fmt_bytes(est.cpu_free_bytes)} available"
        return f"{est.strategy.value} {host}"
    return (
        f"{est.strategy.value} {fmt_bytes(_fixed(est))} per GPU without any data > {fmt_bytes(est.gpu_free_bytes)} free"
    )


def _shortfall(est: Estimate) -> str:
    if est.gpu_free_bytes is None or est.gpu_need_for_choice > est.gpu_free_bytes:
        at = "" if est.gpu_need_at_data_bytes is None else " at the data's lengths"
        return f"{fmt_bytes(est.gpu_need_for_choice)} per GPU{at} > {fmt_bytes(est.gpu_free_bytes)} free"
    return f"{fmt_bytes(est.cpu_need_bytes)} host RAM > {fmt_bytes(est.cpu_free_bytes)} available"


# ---- device_map: one process, the model split over the GPUs (launcher.plan.device_map) ---------------

FAST_ZERO = (Strategy.ZERO2.value, Strategy.ZERO3.value)


def choose_layout(
    zero: Choice,
    estimates: tuple[Estimate, ...],
    device_map: Estimate | None,
    layout: str,
    asked_by: str,
    *,
    gpus: int,
) -> Choice:
    """Between ZeRO's processes (`zero`, choose_strategy's choice) and device_map, with several GPUs on one node.

    `layout` is the user's explicit choice (device_map | processes; asked_by names it) or auto. Auto: plain
    `swift sft` would run device_map here; ZeRO without offload is usually faster (every GPU computes, where
    device_map runs one GPU at a time), so the fastest of zero2/zero3 that fits wins; else device_map if it
    fits (no offload: faster than zero3_offload); else choose_strategy's choice stands."""
    swift_does = f"plain swift sft runs one process with the model split over the {gpus} GPUs (device_map)"
    if layout == "processes" and not zero.user_chosen:
        return replace(zero, reason=f"{zero.reason}; one process per GPU as {asked_by} asks")
    if layout == "device_map":
        warnings: tuple[str, ...] = ()
        if device_map is not None and not device_map.fits:
            warnings = (f"device_map ({asked_by}) may not fit: {describe(device_map)}",)
        why = f"you chose device_map ({asked_by}): one process, the model split over the {gpus} GPUs"
        if device_map is not None:
            why += f"; {describe(device_map)}"
        return Choice(Strategy.DEVICE_MAP.value, why, True, warnings, True)
    if zero.user_chosen or device_map is None:
        return zero
    if zero.fits and zero.worst_case_fits and zero.strategy in FAST_ZERO:
        return replace(zero, reason=f"{zero.reason}; {swift_does}, which is slower when ZeRO fits")
    if device_map.fits:
        rejected = "; ".join(
            f"{e.strategy.value} does not fit: {_shortfall(e)}"
            for e in estimates
            if e.strategy.value in FAST_ZERO and not e.fits
        )
        why = f"{swift_does}, and so does safe-sft: {describe(device_map)}"
        return Choice(Strategy.DEVICE_MAP.value, f"{why} ({rejected}; device_map needs no offload)", True)
    return replace(zero, reason=f"{zero.reason}; device_map ({swift_does}) does not fit: {_shortfall(device_map)}")
