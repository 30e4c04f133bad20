"""Choose the DeepSpeed strategy: the fastest of zero2, zero3, zero3_offload that fits, with reasons.

Where the data was sampled, a strategy fits when it fits at the data's lengths (Estimate.fits_at_data;
the max_length worst case is shown beside it). A user's explicit `--deepspeed` is kept (with a warning
when the estimate for its ZeRO rung says it will not fit); CPU training keeps whatever the user set.
When nothing fits, the choice says so and names what would help; the caller decides whether `--force`
overrides that.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.model import STRATEGY_ORDER, Estimate, Strategy
from launcher.units import fmt_bytes


@dataclass(frozen=True)
class Choice:
    strategy: str | None  # a Strategy value, the user's own --deepspeed value, or None
    reason: str
    fits: bool
    warnings: tuple[str, ...] = ()
    user_chosen: bool = False


def describe(estimate: Estimate) -> str:
    gpu = f"{fmt_bytes(estimate.gpu_need_bytes)} per GPU of {fmt_bytes(estimate.gpu_free_bytes)} free"
    if estimate.gpu_need_at_data_bytes is not None:
        gpu = (
            f"{fmt_bytes(estimate.gpu_need_at_data_bytes)} per GPU at the data's lengths "
            f"({fmt_bytes(estimate.gpu_need_bytes)} at the max_length worst case) of "
            f"{fmt_bytes(estimate.gpu_free_bytes)} free"
        )
    cpu = f"{fmt_bytes(estimate.cpu_need_bytes)} host RAM of {fmt_bytes(estimate.cpu_free_bytes)} available"
    return f"{estimate.strategy.value} needs {gpu} and {cpu}"


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
        own = by_name.get(user_rung or user_deepspeed)
        as_rung = f" ({user_rung})" if user_rung and user_rung != user_deepspeed else ""
        warnings: tuple[str, ...] = ()
        if own is not None and not own.fits:
            better = next((e.strategy.value for e in estimates if e.fits and e.strategy in STRATEGY_ORDER), None)
            hint = f"; {better} would fit" if better else ""
            warnings = (f"your --deepspeed {user_deepspeed}{as_rung} may not fit: {describe(own)}{hint}",)
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

    options = ["more GPUs or nodes", "a shorter --max_length", "a smaller --per_device_train_batch_size"]
    if not is_lora:
        options.insert(0, "LoRA (--tuner_type lora)")
    last = by_name[Strategy.ZERO3_OFFLOAD.value]
    reason = f"nothing fits: {'; '.join(rejected)}. Options: {', '.join(options)}"
    return Choice(last.strategy.value, reason, False)


def _shortfall(est: Estimate) -> str:
    if est.gpu_free_bytes is None or est.gpu_need_for_choice > est.gpu_free_bytes:
        at = "" if est.gpu_need_at_data_bytes is None else " at the data's lengths"
        return f"{fmt_bytes(est.gpu_need_for_choice)} per GPU{at} > {fmt_bytes(est.gpu_free_bytes)} free"
    return f"{fmt_bytes(est.cpu_need_bytes)} host RAM > {fmt_bytes(est.cpu_free_bytes)} available"
