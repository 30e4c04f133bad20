"""The fixed-tile families of launcher/plan/image_tiles.py, held against the installed model and template code.

For LLaVA-1.5, PaliGemma and Gemma 3 the language model's image tokens per image are what the models' own
`get_image_features` return for one image at the tower's size (tiny random models, on the CPU); for InternVL
the tiles are what swift's own tiling (`_dynamic_preprocess`) cuts from a large and a small image, at the
MAX_NUM and INPUT_SIZE defaults swift's template reads; for MiniCPM-V the slices are what transformers' own
MiniCPM-V 4.6 processor cuts and its model makes of them, and the swift model types whose templates read
MAX_SLICE_NUMS are read from swift's own templates.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from launcher.model import ModelFacts
from launcher.plan.features import image_token_side
from launcher.plan.image_tiles import INPUT_SIZE, INPUT_SIZE_DEFAULT, SLICE_SIDE_DEFAULT, Tiling, fixed_image
from launcher.plan.vision_budget import MAX_NUM, MAX_SLICE_NUMS, vision_budget_for

CASES = [("llava", 336), ("paligemma", 224), ("gemma3", 896)]
PATCH = 14


def _tiny(model_type: str, image_size: int) -> Any:
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(model_type)
    vision, text = config.vision_config, config.text_config
    for key, value in {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": image_size, "patch_size": PATCH}.items():  # fmt: skip
        setattr(vision, key, value)
    for key, value in {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 300}.items():  # fmt: skip
        setattr(text, key, value)
    if model_type == "gemma3":
        config.mm_tokens_per_image = 256  # the released checkpoints' (4B, 12B, 27B)
    return AutoModel.from_config(config).eval()


@pytest.mark.parametrize(("model_type", "image_size"), CASES, ids=[case[0] for case in CASES])
def test_one_image_brings_the_tokens_the_model_makes_of_it(
    stack_installed: None, model_type: str, image_size: int
) -> None:
    import torch

    model = _tiny(model_type, image_size)
    with torch.no_grad():
        found = model.get_image_features(pixel_values=torch.randn(1, 3, image_size, image_size))
    features = found.pooler_output if getattr(found, "pooler_output", None) is not None else found
    tokens = (features[0] if isinstance(features, list | tuple) else features).shape[-2]
    fixed = fixed_image(model_type, image_size, {})
    assert fixed is not None and fixed.tiles == 1
    facts = ModelFacts(name="m", total_params=None, source="config", model_type=model_type, vision_patch_size=PATCH)
    assert fixed.pixels // image_token_side(facts) ** 2 == tokens


def test_gemma3s_processor_cuts_no_crops(stack_installed: None) -> None:
    from transformers.models.gemma3.processing_gemma3 import Gemma3ProcessorKwargs

    assert Gemma3ProcessorKwargs._defaults["images_kwargs"]["do_pan_and_scan"] is False


def test_internvl_tiles_are_swifts(stack_installed: None) -> None:
    from PIL import Image
    from swift.template import vision_utils
    from swift.template.templates.internvl import InternvlTemplate

    source = inspect.getsource(InternvlTemplate.init_env_args)
    for name, default in ((MAX_NUM.env, MAX_NUM.default), (INPUT_SIZE, INPUT_SIZE_DEFAULT)):
        found = re.search(rf"get_env_args\('{name.lower()}', int, (\d+)\)", source)
        assert found is not None and int(found.group(1)) == default, name
    for env in ({}, {"MAX_NUM": "6"}, {"MAX_NUM": "1"}):
        fixed = fixed_image("internvl_chat", 448, env)
        assert fixed is not None
        max_num = int(env.get("MAX_NUM", MAX_NUM.default))
        large = vision_utils._dynamic_preprocess(
            Image.new("RGB", (2000, 1500)), max_num=max_num, image_size=448, use_thumbnail=True
        )
        assert len(large) == fixed.tiles  # the most: a large 4:3 image fills every tile
        small = vision_utils._dynamic_preprocess(
            Image.new("RGB", (300, 300)), max_num=max_num, image_size=448, use_thumbnail=True
        )
        assert len(small) <= fixed.tiles
    model = ModelFacts(name="m", total_params=None, source="config", model_type="internvl_chat", vision_patch_size=14)
    assert 448**2 // image_token_side(model) ** 2 == int((448 // 14) ** 2 * 0.5**2)  # swift's num_image_token


# MiniCPM-V 4.6's processor rounds each slice's sides to 56 pixels (its two 2 x 2 merges of 14-pixel
# patches), so an image can be a little more than its slices of 448 x 448
SLICE_ROUNDING = 1.06


@pytest.mark.parametrize("max_slices", [9, 4, 2, 1])
def test_minicpm_v_slices_are_transformers(stack_installed: None, max_slices: int) -> None:
    from PIL import Image
    from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import MiniCPMV4_6ImageProcessorPil

    processor = MiniCPMV4_6ImageProcessorPil()
    assert (processor.max_slice_nums, processor.scale_resolution) == (MAX_SLICE_NUMS.default, SLICE_SIDE_DEFAULT)
    fixed = fixed_image("minicpmv4_6", 980, {MAX_SLICE_NUMS.env: str(max_slices)})
    assert fixed is not None
    counts = []
    for size in ((2000, 1500), (1344, 1792), (1344, 1344), (4000, 1000), (300, 300)):
        cut = processor(Image.new("RGB", size), max_slice_nums=max_slices)
        sides = [tuple(side) for side in cut["target_sizes"]]
        counts.append(len(sides))
        assert sum(h * w for h, w in sides) * PATCH**2 <= fixed.pixels * SLICE_ROUNDING, size
    assert max(counts) == fixed.tiles  # a large image fills every slice, beside the whole image
    assert min(counts) == 1  # a small one is the whole image alone


def test_a_minicpm_v_slice_is_the_tokens_its_model_makes(stack_installed: None) -> None:
    import torch
    from PIL import Image
    from transformers import AutoModel
    from transformers.models.minicpmv4_6.configuration_minicpmv4_6 import MiniCPMV4_6Config
    from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import MiniCPMV4_6ImageProcessorPil

    config = MiniCPMV4_6Config(
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "patch_size": PATCH, "image_size": SLICE_SIDE_DEFAULT},
        text_config={"model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 300},
        insert_layer_id=0,
    )  # fmt: skip
    model = AutoModel.from_config(config).eval()
    cut = MiniCPMV4_6ImageProcessorPil()(Image.new("RGB", (1344, 1344)), max_slice_nums=4, return_tensors="pt")
    with torch.no_grad():
        found = model.get_image_features(pixel_values=cut["pixel_values"].float(), target_sizes=cut["target_sizes"])
    per_slice = {features.shape[0] for features in found.pooler_output}
    facts = ModelFacts(name="m", total_params=None, source="config", model_type="minicpmv4_6", vision_patch_size=PATCH)
    assert per_slice == {SLICE_SIDE_DEFAULT**2 // image_token_side(facts) ** 2}


def test_the_minicpm_templates_that_read_max_slice_nums_are_swifts(stack_installed: None) -> None:
    """Every multimodal MiniCPM model type of swift: its templates read MAX_SLICE_NUMS exactly where the plan
    says so (2.0 and 2.5 read none), with no default of their own or the processor's 9."""
    from swift.model.register import MODEL_MAPPING
    from swift.template.register import TEMPLATE_MAPPING

    types = [name for name in MODEL_MAPPING if name.startswith(("minicpmv", "minicpmo"))]
    assert {"minicpmv", "minicpmv2_5", "minicpmv2_6", "minicpmo", "minicpmv4_6"} <= set(types)
    for name in types:
        meta = MODEL_MAPPING[name]
        templates = {group.template or meta.template for group in meta.model_groups}
        defaults = set()
        for template in templates:
            cls = TEMPLATE_MAPPING[template].template_cls
            source = "".join(inspect.getsource(c.init_env_args) for c in cls.__mro__ if "init_env_args" in c.__dict__)
            defaults.add(tuple(re.findall(r"get_env_args\('max_slice_nums', int, (\w+)\)", source)))
        reads = defaults != {()}
        assert reads == (vision_budget_for(name, {}) is MAX_SLICE_NUMS), name
        assert all(found in ((), ("None",), (str(MAX_SLICE_NUMS.default),)) for found in defaults), (name, defaults)


@pytest.mark.parametrize("max_patches", [None, 6, 1])
def test_transformers_internvl_tiles_are_its_processors(stack_installed: None, max_patches: int | None) -> None:
    """swift's transformers-InternVL template calls GotOcr2's processor with crop_to_patches: a large image is
    max_patches tiles and the thumbnail (the processor's 12 where preprocessor_config.json gives none)."""
    from PIL import Image
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    processor = GotOcr2ImageProcessorPil()
    fixed = fixed_image("internvl", 448, {}, tiling=Tiling(max_tiles=max_patches))
    assert fixed is not None
    cut = processor(
        Image.new("RGB", (2000, 1500)), crop_to_patches=True, max_patches=max_patches or processor.max_patches
    )
    assert cut["num_patches"] == [fixed.tiles]
