"""The per-image budget a vision-language model's image processor reads, and its value when unset.

Contract: pure, no I/O. One source for both users of it: the memory estimate (how many pixels one image
can bring, launcher.plan.features) and the degradation ladder (which variable to halve,
launcher.plan.degrade).

swift 4.6 resizes Qwen-VL images through qwen_vl_utils (swift/template/templates/qwen.py `fetch_image`),
whose module constants swift patches from the environment (swift/model/models/qwen.py
`patch_qwen_vl_utils`): Qwen2/2.5-VL read MAX_PIXELS (pixels; qwen_vl_utils' default 16384 x 28 x 28),
Qwen3-VL and later read IMAGE_MAX_TOKEN_NUM (merged tokens; default 16384), which swift derives from
MAX_PIXELS only when IMAGE_MAX_TOKEN_NUM is unset. So an unset budget lets one image bring 16384 tokens.
InternVL's remote-code template (swift/template/templates/internvl.py) reads MAX_NUM, the most tiles it
cuts one image into (12; launcher.plan.image_tiles counts them). MiniCPM-V's templates from 2.6 on
(swift/template/templates/minicpm.py) read MAX_SLICE_NUMS, the most slices beside the resized whole image
(the processor's 9 when unset); MiniCPM-V 2.0 and 2.5 read none. Ovis2.5's template
(swift/template/templates/qwen.py `Ovis2_5Template`) reads MAX_PIXELS itself, with a default of its own
(1344 x 1792, at least 448 x 448). Other families have no such variable;
for them an image is their processor's fixed tiles (launcher.plan.image_tiles) or ASSUMED_IMAGE_PIXELS.

swift parses them with int() as the model or template loads; `budget_value` (and `positive_env_int`, for
any such variable) reads them the same way, and stops a value that int() refuses, or one that is not
positive, before anything starts (swift would stop minutes later).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launcher.errors import SafeSftError
from launcher.model import ModelFacts


@dataclass(frozen=True)
class VisionBudget:
    """An environment variable a model family's image processor reads as its per-image budget."""

    env: str
    default: int  # the processor's value when the variable is unset
    minimum: int  # below this images lose too much
    unit: str  # what the value counts: PIXELS, TOKENS (merged image tokens) or TILES (of a fixed size)


PIXELS, TOKENS, TILES = "pixels", "merged image tokens", "tiles"
MAX_PIXELS = VisionBudget("MAX_PIXELS", 16384 * 28 * 28, 256 * 28 * 28, PIXELS)
IMAGE_MAX_TOKEN_NUM = VisionBudget("IMAGE_MAX_TOKEN_NUM", 16384, 256, TOKENS)
MAX_NUM = VisionBudget("MAX_NUM", 12, 1, TILES)  # one tile is 256 tokens: Qwen-VL's floor
MAX_SLICE_NUMS = VisionBudget("MAX_SLICE_NUMS", 9, 1, TILES)  # one slice: the whole image, resized, alone
OVIS_MAX_PIXELS = VisionBudget("MAX_PIXELS", 1344 * 1792, 448 * 448, PIXELS)  # Qwen-VL's variable, Ovis's values
_READS_MAX_PIXELS = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen2_5_omni", "qwen2_5_omni_thinker"})
_READS_IMAGE_MAX_TOKEN_NUM = frozenset(
    {"qwen3_vl", "qwen3_vl_moe", "qwen3_omni_moe", "qwen3_omni", "qwen3_5", "qwen3_5_moe", "qwen3_vl_emb",
     "qwen3_vl_reranker", "qwen3_5_emb"}
)  # fmt: skip
_READS_MAX_NUM = frozenset({"internvl_chat"})  # swift's model_type and config.json's alike
# swift's model types whose template passes MAX_SLICE_NUMS to the processor. config.json's "minicpmv" is
# also 2.0's and 2.5's, which read none: the type swift decides (by the model's registered name, as
# `MiniCPM-V-2_6`; budget_family) or --model_type tells them apart; "minicpmo" and the transformers-native
# 4.6 and 4.7 are the same name in both.
_READS_MAX_SLICE_NUMS = frozenset({"minicpmv2_6", "minicpmv4", "minicpmv4_5", "minicpmo", "minicpmv4_6", "minicpmv4_7"})
_READS_OVIS_MAX_PIXELS = frozenset({"ovis2_5"})
_BUDGETS = {b.env: b for b in (MAX_PIXELS, IMAGE_MAX_TOKEN_NUM, MAX_NUM, MAX_SLICE_NUMS)}  # by name: Qwen-VL's
VISION_ENVS = tuple(_BUDGETS)
# A family whose processor reads no budget and cuts no fixed tiles (launcher.plan.image_tiles): one image of
# 1344 x 1792 pixels (about 3072 tokens at 28-pixel tokens), Ovis2.5's default in swift; an assumption,
# not any processor's cap.
ASSUMED_IMAGE_PIXELS = 1344 * 1792


def budget_family(user_type: str | None, model: ModelFacts | None) -> str | None:
    """The model type whose processor's budget a run reads: --model_type, else the type swift decides for
    the model (its registered name can tell MiniCPM-V 2.6 from the 2.0 and 2.5 that share config.json's
    `minicpmv`), else config.json's."""
    if user_type:
        return user_type
    return (model.swift_model_type or model.model_type) if model else None


def vision_budget_for(model_type: str | None, env: Mapping[str, str]) -> VisionBudget | None:
    """The variable this model's processor reads for its image budget, or None (it reads none).

    A variable the user already set decides where the family reads both: IMAGE_MAX_TOKEN_NUM wins in
    swift's conversion, and a Qwen3-VL run with only MAX_PIXELS set reads that (converted).
    """
    if model_type in _READS_MAX_NUM:
        return MAX_NUM
    if model_type in _READS_MAX_SLICE_NUMS:
        return MAX_SLICE_NUMS
    if model_type in _READS_OVIS_MAX_PIXELS:
        return OVIS_MAX_PIXELS
    if model_type in _READS_MAX_PIXELS:
        return IMAGE_MAX_TOKEN_NUM if IMAGE_MAX_TOKEN_NUM.env in env else MAX_PIXELS
    if model_type in _READS_IMAGE_MAX_TOKEN_NUM:
        if MAX_PIXELS.env in env and IMAGE_MAX_TOKEN_NUM.env not in env:
            return MAX_PIXELS
        return IMAGE_MAX_TOKEN_NUM
    return None


def own_default(budget: VisionBudget) -> int | None:
    """The default of a family whose budget shares another's name (Ovis2.5's MAX_PIXELS), else None. The
    ladder's settings keep only the name (launcher.plan.degrade.Settings.vision_env), which stands for the
    first family's default, so such a family starts its settings at its own value."""
    return budget.default if budget is not _BUDGETS.get(budget.env) else None


def budget_named(env: str) -> VisionBudget | None:
    """The image budget of that name (MAX_PIXELS, IMAGE_MAX_TOKEN_NUM, MAX_NUM, MAX_SLICE_NUMS), or None."""
    return _BUDGETS.get(env)


def budget_pixels(budget: VisionBudget, value: int, token_side: int) -> int:
    """Pixels of one image at a pixel or token budget's value; `token_side` is the pixels per merged token's
    side. (A tile budget's pixels depend on the tile: launcher.plan.image_tiles.)"""
    return value * token_side**2 if budget.unit == TOKENS else value


def budget_value(env: Mapping[str, str], budget: VisionBudget) -> int | None:
    """The budget's value set in `env` (see positive_env_int); None when unset or empty."""
    return positive_env_int(env, budget.env, budget.unit, budget.default)


def positive_env_int(env: Mapping[str, str], name: str, unit: str, example: int) -> int | None:
    """A variable swift reads with int() (surrounding blanks, a sign and underscores pass) as the model or
    template loads; None when unset or empty. SafeSftError for a value swift would stop on."""
    text = env.get(name, "")
    if not text.strip():
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise SafeSftError(
            f"{name}={text!r} is not a positive whole number of {unit}: swift reads it with int() as it loads "
            "the model and its template, and stops there",
            f"set {name} to a whole number such as {example}, or unset it for the processor's default",
        )
    return value
