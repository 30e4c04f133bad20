"""The fixed-tile families of launcher/plan/image_tiles.py, held against the installed model and template code.

For LLaVA-1.5, PaliGemma and Gemma 3 the language model's image tokens per image are what the models' own
`get_image_features` return for one image at the tower's size (tiny random models, on the CPU); for InternVL
the tiles are what swift's own tiling (`_dynamic_preprocess`) cuts from a large and a small image, at the
MAX_NUM and INPUT_SIZE defaults swift's template reads.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from launcher.model import ModelFacts
from launcher.plan.features import image_token_side
from launcher.plan.image_tiles import INPUT_SIZE, INPUT_SIZE_DEFAULT, fixed_image
from launcher.plan.vision_budget import MAX_NUM

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
