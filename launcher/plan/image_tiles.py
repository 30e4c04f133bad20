"""What one image becomes in the families whose processor cuts every image into fixed square tiles.

Contract: pure, no I/O. These families read no pixel budget (launcher.plan.vision_budget): whatever its
size, an image is at most `tiles` squares of `side` pixels, and the patches of each tile are merged
`merge` x `merge` into the language model's image tokens. `fixed_image` gives that for a config.json
model_type (None for any other family); `image_merge` the merge of any family (Qwen-VL's 2 x 2 where none
is known). Read from the processors ms-swift 4.6 runs with transformers 5:

- llava (LLaVA-1.5; CLIPImageProcessor: shortest edge to the tower's size, then a centre crop): one tile
  of vision_config's image_size (336), one token per patch (576).
- paligemma (SiglipImageProcessor, resized to the tower's size): one tile, one token per patch.
- gemma3 (Gemma3ImageProcessor; Gemma3ProcessorKwargs sets do_pan_and_scan False, which swift's template
  keeps): one tile of the tower's size (896), pooled to 256 tokens: 4 x 4 patches each.
- internvl_chat (InternVL's remote code; swift/template/templates/internvl.py `transform_image`): up to
  MAX_NUM tiles (environment, 12 when unset) of INPUT_SIZE pixels (448) plus a thumbnail when there is
  more than one; pixel shuffle 0.5 makes 2 x 2 patches a token.
- internvl (transformers' InternVL; swift calls GotOcr2ImageProcessor with crop_to_patches): up to its
  max_patches (preprocessor_config.json's, else 12) plus the thumbnail; 2 x 2 patches a token.
- minicpmv, minicpmo (MiniCPM-V 2.x to 4.5 and MiniCPM-o, remote code) and minicpmv4_6, minicpmv4_7
  (transformers' MiniCPMV4_6ImageProcessor `get_sliced_grid`): the whole image resized to about
  scale_resolution^2 pixels (config.json's slice_config, else its image_size: 448), and beside it at most
  max_slice_nums slices of that size (MAX_SLICE_NUMS where the template reads it, else slice_config's, else
  9). A slice is 64 tokens: the resampler's 64 queries, or 4.6's two 2 x 2 merges; 2.5's 96 queries are
  counted as 64.

swift reads MAX_NUM, MAX_SLICE_NUMS and INPUT_SIZE with int() as the template is built; `fixed_image`
reads them as launcher.plan.vision_budget reads every such variable, and stops a value swift would stop
on. MAX_NUM and MAX_SLICE_NUMS are also the image budgets the degradation ladder halves (vision_budget).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launcher.model import ModelFacts
from launcher.plan.estimate import PATCH_MERGE
from launcher.plan.vision_budget import MAX_NUM, MAX_SLICE_NUMS, PIXELS, VisionBudget, budget_value, positive_env_int


@dataclass(frozen=True)
class FixedImage:
    """One image as the processor cuts it: at most `tiles` squares of `side` pixels."""

    tiles: int
    side: int

    @property
    def pixels(self) -> int:
        return self.tiles * self.side**2


@dataclass(frozen=True)
class Tiling:
    """What the model's files say of its processor's tiles (launcher.model.ModelFacts); None where silent."""

    side: int | None = None  # MiniCPM-V's scale_resolution: the pixels on a slice's side
    max_tiles: int | None = None  # the processor's own default: max_slice_nums, max_patches


def model_tiling(model: ModelFacts) -> Tiling:
    """What the model's files (config.json, preprocessor_config.json) say of its processor's tiles."""
    return Tiling(model.vision_tile_side, model.vision_max_tiles)


@dataclass(frozen=True)
class _Family:
    merge: int
    tiles: int = 1  # the most tiles where neither the variable nor the model's files say
    tiles_budget: VisionBudget | None = None  # the variable that sets them, where the template reads one
    files_tiles: bool = False  # the model's files give the processor's own count (Tiling.max_tiles)
    thumbnail: bool = False  # the whole image beside its tiles, when there is more than one
    side_env: bool = False  # INPUT_SIZE sets the tile's side, else the tower's image_size
    sliced: bool = False  # Tiling.side sets the tile's side (MiniCPM-V's slices), else 448


_MINICPM = _Family(merge=4, tiles=9, tiles_budget=MAX_SLICE_NUMS, files_tiles=True, thumbnail=True, sliced=True)
_FAMILIES = {
    "llava": _Family(merge=1),
    "paligemma": _Family(merge=1),
    "gemma3": _Family(merge=4),
    "internvl_chat": _Family(merge=2, tiles=12, tiles_budget=MAX_NUM, thumbnail=True, side_env=True),
    "internvl": _Family(merge=2, tiles=12, files_tiles=True, thumbnail=True),
    "minicpmv": _MINICPM,
    "minicpmo": _MINICPM,
    "minicpmv4_6": _MINICPM,
    "minicpmv4_7": _MINICPM,
}
INPUT_SIZE, INPUT_SIZE_DEFAULT = "INPUT_SIZE", 448
SLICE_SIDE_DEFAULT = 448  # MiniCPM-V's scale_resolution in every released config


def image_merge(model_type: str | None) -> int:
    """Patches per side of one language-model image token in this family."""
    family = _FAMILIES.get(model_type or "")
    return family.merge if family else PATCH_MERGE


def tiles_budget(model_type: str | None) -> VisionBudget | None:
    """The variable that sets this family's tile count (MAX_NUM, MAX_SLICE_NUMS), where one does."""
    family = _FAMILIES.get(model_type or "")
    return family.tiles_budget if family else None


def unset_tiles(model_type: str | None, tiling: Tiling = Tiling()) -> int | None:
    """The most tiles this family cuts an image into when its tile variable is unset: the model's files'
    count where the processor reads one (MiniCPM-V's max_slice_nums), else the family's; None for a family
    that does not cut images into tiles."""
    family = _FAMILIES.get(model_type or "")
    return None if family is None else _unset_tiles(family, tiling)


def _unset_tiles(family: _Family, tiling: Tiling) -> int:
    return (tiling.max_tiles if family.files_tiles else None) or family.tiles


def fixed_image(
    model_type: str | None,
    image_size: int | None,
    env: Mapping[str, str],
    *,
    tiling: Tiling = Tiling(),
    reads_budget: bool = True,
) -> FixedImage | None:
    """The most one image brings in a fixed-tile family (`image_size`: vision_config's), else None.
    `reads_budget`: the run's template reads the family's tile variable (launcher.plan.vision_budget);
    where it does not (MiniCPM-V 2.5 under config.json's shared "minicpmv"), the config's count holds."""
    family = _FAMILIES.get(model_type or "")
    if family is None:
        return None
    budget = family.tiles_budget
    set_tiles = budget_value(env, budget) if budget is not None and reads_budget else None
    tiles = set_tiles or _unset_tiles(family, tiling)
    side = image_size
    if family.side_env:
        side = positive_env_int(env, INPUT_SIZE, PIXELS, INPUT_SIZE_DEFAULT) or INPUT_SIZE_DEFAULT
    if family.sliced:
        side = tiling.side or SLICE_SIDE_DEFAULT
    if not side:
        return None
    return FixedImage(tiles + 1 if family.thumbnail and tiles > 1 else tiles, side)
