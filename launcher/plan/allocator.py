"""The CUDA caching allocator's setting for the ranks: expandable segments, never over a user's value.

With its default segments, torch's allocator keeps freed blocks it cannot hand to a larger request, and a
fine-tune's large, short-lived tensors (the logits over a 150k vocabulary, their fp32 copies and
gradients) leave the reserved memory far above what the tensors hold. Measured on an H200 (BENCHMARKS.md,
"Real runs on a GPU"): a 0.5B full fine-tune under ZeRO-2 held 20.4 GiB in tensors and reserved 38.5 GiB;
with `expandable_segments:True` it reserved 24.8 GiB, and its NVML peak fell from 40.7 to 26.4 GiB. The
memory estimate's fragmentation margin covers the latter, not the former. PyTorch's own OOM message names
the setting, and llamafactory-cli sets it for its ranks.

A user's PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF, its name from torch 2.9) is kept as it is, with a
note where it leaves expandable segments off (but for `backend:cudaMallocAsync`, the driver's own pool).
Nothing is set for CPU training.
"""

from __future__ import annotations

from collections.abc import Mapping

from launcher.model import EnvSetting

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
ALLOC_CONF_NAMES = (ALLOC_CONF, "PYTORCH_ALLOC_CONF")
EXPANDABLE = "expandable_segments:True"


def allocator_settings(env: Mapping[str, str], uses_gpus: bool) -> tuple[tuple[EnvSetting, ...], tuple[str, ...]]:
    """(settings to apply, notes)."""
    if not uses_gpus:
        return (), ()
    given = next((name for name in ALLOC_CONF_NAMES if name in env), None)
    if given is None:
        why = (
            "segments grow in place, so large short-lived tensors do not fragment the GPU memory "
            "(a ZeRO-2 run on an H200 peaked at 26.4 GiB with it, 40.7 GiB without: BENCHMARKS.md)"
        )
        return (EnvSetting(ALLOC_CONF, EXPANDABLE, why),), ()
    if expandable(env[given]) or "cudamallocasync" in env[given].lower():  # the driver's pool does not fragment
        return (), ()
    note = (
        f"kept your {given}={env[given]}: without {EXPANDABLE} the caching allocator can reserve far more than "
        "the memory estimate's fragmentation margin (BENCHMARKS.md, real runs on a GPU)"
    )
    return (), (note,)


def expandable(value: str) -> bool:
    """Whether an allocator setting turns expandable segments on (`key:value` pairs, comma separated)."""
    pairs = dict(item.split(":", 1) for item in value.replace(" ", "").split(",") if ":" in item)
    return pairs.get("expandable_segments", "").lower() in ("true", "1")
