"""Real model folders' config.json and weights index (tests/data/model_configs: 52 models of 38 families from
public repositories, as committed), read as safe-sft reads a model folder:

- config.json alone gives the parameter count within 5 % of the weights' own size (the index's total_size
  at the config's dtype), family by family: GQA and head_dim, gated or plain MLPs, MoE, tied embeddings,
  Qwen-1's, ChatGLM's, Falcon's, MPT's and BLOOM's own keys;
- the weights' tensors say whether the output layer is tied; config.json, or its family's default, says
  the same;
- a .bin checkpoint's index gives its count exactly; a safetensors index whose shards are Git LFS
  pointers (a clone without Git LFS) is refused in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from launcher.errors import SafeSftError
from launcher.probe.model_size import probe_model
from launcher.probe.weight_bytes import DTYPE_BYTES
from tests.unit.test_weight_bytes import POINTER

DATA = Path(__file__).resolve().parents[1] / "data" / "model_configs"
ROWS: list[dict[str, Any]] = [json.loads(line) for line in (DATA / "index.jsonl").read_text().splitlines()]
WITHIN = 0.05
OUTPUT_LAYERS = ("lm_head.weight", "output_layer.weight", "embed_out.weight", "output.weight")

# Where config.json does not describe what the weights hold (each checked by hand against the index)
KNOWN_MISSES = {
    "Zekun525__lisa-7B": "LLaVA-1 names its CLIP tower by hub id (mm_vision_tower), no vision_config sizes",
    "EmotioTech__EmotioLocal": "MiniCPM-V 2 names its SigLIP tower by timm id (vision_encoder), no vision_config",
    "sen-ye__DeepSeek-OCR2-query-ablation": "DeepSeek-OCR nests its encoders' sizes (SAM, a Qwen2) in vision_config",
    "kurokencom__DeepSeekOcrCPUWin__model": "DeepSeek-OCR nests its encoders' sizes (SAM, a Qwen2) in vision_config",
    "BrianYAU-NTEC__olmOCR": "its vision_config leaves the tower's sizes to Qwen2-VL's class defaults",
    "LiamZhao326__CogStream__model": "VideoLLaMA3 keeps its tower's sizes under vision_encoder_config, not read here",
    "InternLM__InternLM-XComposer__huggingface_internlm-xcomposer": (
        "its index holds 4.6B at the stated dtype, less than the 7B decoder its config describes"
    ),
}
TIE_UNSEEN = {  # whose tensors cannot show a tie: no output layer at all, or one under another name
    "junqi-jiang__oasstpythia1.5brm": "a reward model",
    "19ShengSheng__Flames": "a sequence classifier",
    "reubzdubz__Molmo7B_D_NF4Quant": "Molmo's output layer is ff_out",
}


def _folder(row: dict[str, Any]) -> Path:
    return DATA / "files" / row["dir"]


def _weight_map(row: dict[str, Any]) -> dict[str, str]:
    weight_map: dict[str, str] = json.loads((_folder(row) / row["index_file"]).read_text())["weight_map"]
    return weight_map


def _counted_rows() -> list[Any]:
    """Unquantized rows whose config states a dtype: their total_size / dtype bytes is the count."""
    rows = [row for row in ROWS if not row["quantized"] and row["torch_dtype"] in DTYPE_BYTES]
    return [
        pytest.param(row, id=row["dir"], marks=[pytest.mark.xfail(reason=KNOWN_MISSES[row["dir"]], strict=True)])
        if row["dir"] in KNOWN_MISSES
        else pytest.param(row, id=row["dir"])
        for row in rows
    ]


def test_the_set_is_as_described() -> None:
    assert len(ROWS) == 52 and len({row["model_type"] for row in ROWS}) == 38
    assert all(
        (_folder(row) / "config.json").is_file() and (_folder(row) / row["index_file"]).is_file() for row in ROWS
    )


@pytest.mark.parametrize("row", _counted_rows())
def test_config_json_alone_counts_the_weights(tmp_path: Path, row: dict[str, Any]) -> None:
    shutil.copy(_folder(row) / "config.json", tmp_path)
    facts = probe_model(str(tmp_path), {}, tmp_path)
    weights = row["total_size"] / DTYPE_BYTES[row["torch_dtype"]]
    assert facts.source == "config"
    assert facts.total_params is not None, "no count from config.json"
    assert abs(facts.total_params / weights - 1) <= WITHIN, (
        f"{facts.total_params:,} counted, {weights:,.0f} in the weights"
    )


@pytest.mark.parametrize("row", [pytest.param(row, id=row["dir"]) for row in ROWS if row["dir"] not in TIE_UNSEEN])
def test_a_tied_output_layer_is_read_as_the_weights_have_it(tmp_path: Path, row: dict[str, Any]) -> None:
    shutil.copy(_folder(row) / "config.json", tmp_path)
    has_output_layer = any(name.endswith(OUTPUT_LAYERS) for name in _weight_map(row))
    assert probe_model(str(tmp_path), {}, tmp_path).tie_word_embeddings is not has_output_layer


def _with_shards(row: dict[str, Any], folder: Path, shard: bytes) -> None:
    """The row's config.json and index in `folder`, and each shard its index names holding `shard`."""
    for name in ("config.json", row["index_file"]):
        shutil.copy(_folder(row) / name, folder)
    for name in set(_weight_map(row).values()):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(shard)


BIN_ROWS = [row for row in ROWS if row["index_file"] == "pytorch_model.bin.index.json"]


@pytest.mark.parametrize("row", [pytest.param(row, id=row["dir"]) for row in BIN_ROWS])
def test_a_bin_checkpoint_is_counted_by_its_index(tmp_path: Path, row: dict[str, Any]) -> None:
    _with_shards(row, tmp_path, b"\0" * 2048)  # a stand-in: the index's total is what is read
    facts = probe_model(str(tmp_path), {}, tmp_path)
    if row["torch_dtype"] in DTYPE_BYTES and not row["quantized"]:
        assert (facts.source, facts.total_params) == (
            "weights_size",
            row["total_size"] // DTYPE_BYTES[row["torch_dtype"]],
        )
    else:
        assert facts.source == "config"


SAFETENSORS_ROWS = [row for row in ROWS if row["index_file"] == "model.safetensors.index.json"]


@pytest.mark.parametrize("row", [pytest.param(row, id=row["dir"]) for row in SAFETENSORS_ROWS])
def test_shards_left_as_git_lfs_pointers_are_refused_in_one_line(tmp_path: Path, row: dict[str, Any]) -> None:
    _with_shards(row, tmp_path, POINTER.encode())
    with pytest.raises(SafeSftError) as err:
        probe_model(str(tmp_path), {}, tmp_path)
    assert "is a Git LFS pointer, not the weights" in err.value.message and "git lfs pull" in err.value.hint
