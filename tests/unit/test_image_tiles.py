"""What one image becomes in the fixed-tile families (launcher.plan.image_tiles), and how the plan counts it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.errors import SafeSftError
from launcher.model import DataFacts, DatasetSample, RowText, SampleStatus
from launcher.plan.features import image_token_side
from launcher.plan.image_tiles import FixedImage, Tiling, fixed_image, image_merge
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
        ("minicpmv", 980, {}, FixedImage(10, 448), 64),  # the whole image and 9 slices of 448, not the tower's 980
        ("minicpmv4_6", 980, {"MAX_SLICE_NUMS": "4"}, FixedImage(5, 448), 64),
        ("minicpmo", 980, {"MAX_SLICE_NUMS": "1"}, FixedImage(1, 448), 64),  # no slices: the whole image alone
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


@pytest.mark.parametrize(
    ("model_type", "name"),
    [("internvl_chat", "MAX_NUM"), ("internvl_chat", "INPUT_SIZE"), ("minicpmv4_6", "MAX_SLICE_NUMS")],
)
@pytest.mark.parametrize("value", ["many", "0", "-2", "6.0"])
def test_a_tile_setting_swift_would_stop_on_stops_the_plan(model_type: str, name: str, value: str) -> None:
    with pytest.raises(SafeSftError, match=f"^{name}='{value}' is not a positive whole number") as raised:
        fixed_image(model_type, 448, {name: value})
    assert raised.value.hint.startswith(f"set {name} to a whole number such as ")


def test_minicpm_slices_come_from_its_config_and_the_variable_only_where_the_template_reads_it() -> None:
    """slice_config's scale_resolution and max_slice_nums set the slices; MAX_SLICE_NUMS overrides them only
    for a template that reads it (not MiniCPM-V 2.5's, which shares config.json's "minicpmv")."""
    config = Tiling(side=336, max_tiles=4)
    assert fixed_image("minicpmv", 980, {}, tiling=config) == FixedImage(5, 336)
    assert fixed_image("minicpmv", 980, {"MAX_SLICE_NUMS": "2"}, tiling=config) == FixedImage(3, 336)
    assert fixed_image("minicpmv", 980, {"MAX_SLICE_NUMS": "2"}, tiling=config, reads_budget=False) == FixedImage(
        5, 336
    )
    assert fixed_image("minicpmv", 980, {"MAX_SLICE_NUMS": "abc"}, reads_budget=False) == FixedImage(10, 448)


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


MINICPM_V_2_6 = {
    "model_type": "minicpmv", "architectures": ["MiniCPMV"], "hidden_size": 3584, "num_hidden_layers": 28,
    "intermediate_size": 18944, "vocab_size": 151666, "query_num": 64, "image_size": 448,
    "slice_config": {"max_slice_nums": 9, "patch_size": 14, "scale_resolution": 448, "model_type": "minicpmv"},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                      "num_hidden_layers": 27, "patch_size": 14, "image_size": 980},
}  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "env", "tiles"),
    [
        ((), {}, 10),  # config.json's 9 slices and the whole image
        (("--model_type", "minicpmv2_6"), {"MAX_SLICE_NUMS": "4"}, 5),
        ((), {"MAX_SLICE_NUMS": "4"}, 10),  # "minicpmv" alone may be 2.5, whose template reads no variable
        (("--model_type", "minicpmv2_5"), {"MAX_SLICE_NUMS": "4"}, 10),
    ],
)
def test_the_plan_counts_a_minicpm_v_image_as_its_slices(
    tmp_path: Path, argv: tuple[str, ...], env: dict[str, str], tiles: int
) -> None:
    """MiniCPM-V 2.6's config.json: SigLIP at 980 for its position table, slices of 448; each slice is 1024
    patches in the tower and 64 tokens in the decoder."""
    (tmp_path / "config.json").write_text(json.dumps(MINICPM_V_2_6))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert (facts.vision_tile_side, facts.vision_max_tiles, facts.vision_image_size) == (448, 9, 980)
    assert features(facts, "--max_length", "8192", *argv, env=env).image_pixels == tiles * 448**2
    s = shape(facts, "--max_length", "8192", *argv, env=env)
    assert (s.image_pixels, s.vision_merge, s.vision_type) == (tiles * 448**2, 4, "siglip_vision_model")
    assert 448**2 // (s.vision_patch_size * s.vision_merge) ** 2 == 64


def test_transformers_internvl_takes_its_processors_max_patches(tmp_path: Path) -> None:
    """transformers' InternVL (GotOcr2ImageProcessor, crop_to_patches) cuts at most preprocessor_config.json's
    max_patches tiles; without the file, 12. An unreadable file is a warning, not a stop."""
    config = {
        "model_type": "internvl", "architectures": ["InternVLForConditionalGeneration"],
        "text_config": {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
                        "intermediate_size": 18944, "vocab_size": 151674},
        "vision_config": {"model_type": "internvl_vision", "hidden_size": 1024, "intermediate_size": 4096,
                          "num_hidden_layers": 24, "patch_size": [14, 14], "image_size": [448, 448]},
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert features(probe_model(str(tmp_path), {}, tmp_path), "--max_length", "8192").image_pixels == 13 * 448**2
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"max_patches": 6, "crop_to_patches": False}))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert facts.vision_max_tiles == 6
    assert features(facts, "--max_length", "8192").image_pixels == 7 * 448**2
    (tmp_path / "preprocessor_config.json").write_text("{not json")
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert facts.vision_max_tiles is None
    assert any("preprocessor_config.json is not readable JSON" in w for w in facts.warnings)


OVIS2_5 = {
    "model_type": "ovis2_5", "architectures": ["Ovis2_5"],
    "llm_config": {"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "intermediate_size": 12288,
                   "vocab_size": 151936, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128},
    "vit_config": {"model_type": "siglip2_navit", "hidden_size": 1152, "intermediate_size": 4304,
                   "num_hidden_layers": 27, "patch_size": 16, "image_size": 512, "hidden_stride": 2},
}  # fmt: skip


@pytest.mark.parametrize(
    ("env", "pixels"),
    [
        ({}, 1344 * 1792),  # the template's own default, not Qwen-VL's 16384 tokens
        ({"MAX_PIXELS": "1003520"}, 1003520),
        ({"IMAGE_MAX_TOKEN_NUM": "100"}, 1344 * 1792),  # Qwen3-VL's variable: Ovis2.5 reads none of it
    ],
)
def test_an_ovis2_5_image_is_its_max_pixels(tmp_path: Path, env: dict[str, str], pixels: int) -> None:
    """Ovis2.5's remote config keeps its tower in vit_config (SigLIP2-NaViT, 16-pixel patches)."""
    (tmp_path / "config.json").write_text(json.dumps(OVIS2_5))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert facts.is_multimodal and (facts.vision_hidden_size, facts.vision_layers, facts.vision_patch_size) == (
        1152,
        27,
        16,
    )
    assert features(facts, "--max_length", "32768", env=env).image_pixels == pixels


def test_a_bad_ovis2_5_max_pixels_names_its_own_default(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(OVIS2_5))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    with pytest.raises(SafeSftError, match=r"^MAX_PIXELS='-3' is not a positive whole number") as raised:
        features(facts, env={"MAX_PIXELS": "-3"})
    assert raised.value.hint.startswith(f"set MAX_PIXELS to a whole number such as {1344 * 1792},")
