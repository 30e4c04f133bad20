"""What one image becomes in the fixed-tile families (launcher.plan.image_tiles), and how the plan counts it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.errors import SafeSftError
from launcher.model import DataFacts, DatasetSample, RowText, SampleStatus
from launcher.plan.features import image_token_side
from launcher.plan.image_tiles import FixedImage, fixed_image, image_merge
from launcher.plan.sizing import lengths_of
from launcher.plan.swift_args import parse_swift_argv
from launcher.probe.model_size import probe_model
from tests.unit.test_features import QWEN_VL7B, features, shape


@pytest.mark.parametrize(
    ("model_type", "image_size", "env", "expected", "tokens_per_tile"),
    [
        ("llava", 336, {}, FixedImage(1, 336), 576),  # LLaVA-1.5: CLIP-L/14 at 336, a token per patch
        ("paligemma", 224, {}, FixedImage(1, 224), 256),
        ("gemma3", 896, {}, FixedImage(1, 896), 256),  # 4096 patches pooled 4 x 4
        ("internvl_chat", 448, {}, FixedImage(13, 448), 256),  # 12 tiles and the thumbnail
        ("internvl_chat", 448, {"MAX_NUM": "6"}, FixedImage(7, 448), 256),
        ("internvl_chat", 448, {"MAX_NUM": " 1\n"}, FixedImage(1, 448), 256),  # one tile: no thumbnail
        ("internvl_chat", 448, {"INPUT_SIZE": "224"}, FixedImage(13, 224), 64),
        ("internvl_chat", 448, {"MAX_NUM": " ", "INPUT_SIZE": ""}, FixedImage(13, 448), 256),  # blank: unset
        ("internvl", 448, {"MAX_NUM": "2"}, FixedImage(13, 448), 256),  # transformers' InternVL reads no MAX_NUM
    ],
)
def test_a_fixed_tile_family_cuts_an_image_into_its_tiles(
    model_type: str, image_size: int, env: dict[str, str], expected: FixedImage, tokens_per_tile: int
) -> None:
    assert fixed_image(model_type, image_size, env) == expected
    model = replace(QWEN_VL7B, model_type=model_type, vision_patch_size=14, vision_image_size=image_size)
    assert expected.side**2 // image_token_side(model) ** 2 == tokens_per_tile


def test_other_families_have_no_fixed_tiles_and_merge_as_qwen_vl() -> None:
    assert fixed_image("qwen2_5_vl", 448, {}) is None
    assert fixed_image("llava_next", 336, {}) is None  # any-resolution grids: still the assumed image
    assert fixed_image("llava", None, {}) is None  # no image_size in vision_config
    assert image_merge("qwen2_5_vl") == image_merge(None) == 2


@pytest.mark.parametrize("name", ["MAX_NUM", "INPUT_SIZE"])
@pytest.mark.parametrize("value", ["many", "0", "-2", "6.0"])
def test_a_tile_setting_swift_would_stop_on_stops_the_plan(name: str, value: str) -> None:
    with pytest.raises(SafeSftError, match=f"^{name}='{value}' is not a positive whole number") as raised:
        fixed_image("internvl_chat", 448, {name: value})
    assert raised.value.hint.startswith(f"set {name} to a whole number such as ")


def test_the_plan_counts_an_internvl_image_as_its_tiles_up_to_max_length(tmp_path: Path) -> None:
    """InternVL's remote config (vision_config intern_vit_6b, 448-pixel images, 14-pixel patches): one image
    is 13 tiles of 1024 patches in the tower and 3328 tokens in the decoder; at 2048 tokens a longer
    sample is dropped, so an image brings at most 2048."""
    config = {
        "model_type": "internvl_chat", "architectures": ["InternVLChatModel"],
        "llm_config": {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
                       "intermediate_size": 18944, "vocab_size": 151674},
        "vision_config": {"model_type": "intern_vit_6b", "hidden_size": 1024, "intermediate_size": 4096,
                          "num_hidden_layers": 24, "patch_size": 14, "image_size": 448},
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert (facts.vision_image_size, facts.vision_model_type) == (448, "intern_vit_6b")
    assert features(facts, "--max_length", "8192").image_pixels == 13 * 448**2
    assert features(facts, "--max_length", "2048").image_pixels == 2048 * 28**2
    s = shape(facts, "--max_length", "8192", "--freeze_vit", "false", "--vit_gradient_checkpointing", "false")
    assert (s.image_pixels, s.vision_merge, s.vision_type) == (13 * 448**2, 2, "internvl_vision")


def test_a_llava_image_is_576_tokens_in_the_sampled_data() -> None:
    """LLaVA-1.5 keeps a token per patch: the sampled data counts 576 tokens for each image, not the 144 a
    2 x 2 merge would give."""
    llava = replace(QWEN_VL7B, model_type="llava", vision_patch_size=14, vision_image_size=336)
    row = RowText(latin=40, wide=0, digits=0, other=0, messages=2, images=1)
    data = DataFacts(datasets=(DatasetSample("d.jsonl", SampleStatus.SAMPLED, path="d.jsonl", rows=(row,)),))
    lengths = lengths_of(parse_swift_argv(["--model", "m"]), shape(llava), data)
    assert lengths is not None and lengths.image_tokens == 576
