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
  max_patches (12; preprocessor_config.json is not read) plus the thumbnail; 2 x 2 patches a token.

swift reads MAX_NUM and INPUT_SIZE with int() as the template is built; `fixed_image` reads them as
launcher.plan.vision_budget reads every such variable, and stops a value swift would stop on. MAX_NUM is
also the image budget the degradation ladder halves for InternVL (vision_budget.MAX_NUM).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launcher.plan.estimate import PATCH_MERGE
from launcher.plan.vision_budget import MAX_NUM, PIXELS, budget_value, positive_env_int


@dataclass(frozen=True)
class FixedImage:
    """One image as the processor cuts it: at most `tiles` squares of `side` pixels."""

    tiles: int
    side: int

    @property
    def pixels(self) -> int:
        return self.tiles * self.side**2


@dataclass(frozen=True)
class _Family:
    merge: int
    tiles: int | None = None  # None: set by MAX_NUM (InternVL's remote template)
    thumbnail: bool = False
    side_env: bool = False  # INPUT_SIZE sets the tile's side, else the tower's image_size


_FAMILIES = {
    "llava": _Family(merge=1, tiles=1),
    "paligemma": _Family(merge=1, tiles=1),
    "gemma3": _Family(merge=4, tiles=1),
    "internvl_chat": _Family(merge=2, thumbnail=True, side_env=True),
    "internvl": _Family(merge=2, tiles=12, thumbnail=True),
}
INPUT_SIZE, INPUT_SIZE_DEFAULT = "INPUT_SIZE", 448


def image_merge(model_type: str | None) -> int:
    """Patches per side of one language-model image token in this family."""
    family = _FAMILIES.get(model_type or "")
    return family.merge if family else PATCH_MERGE


def fixed_image(model_type: str | None, image_size: int | None, env: Mapping[str, str]) -> FixedImage | None:
    """The most one image brings in a fixed-tile family (`image_size`: vision_config's), else None."""
    family = _FAMILIES.get(model_type or "")
    if family is None:
        return None
    tiles = family.tiles if family.tiles is not None else budget_value(env, MAX_NUM) or MAX_NUM.default
    side = image_size
    if family.side_env:
        side = positive_env_int(env, INPUT_SIZE, PIXELS, INPUT_SIZE_DEFAULT) or INPUT_SIZE_DEFAULT
    if not side:
        return None
    return FixedImage(tiles + 1 if family.thumbnail and tiles > 1 else tiles, side)
