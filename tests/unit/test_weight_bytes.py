"""A model folder's weights read without loading them: PyTorch .bin weights counted by their bytes, and a
Git LFS pointer in a weight file's place refused in one line (files written by the test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.errors import SafeSftError
from launcher.probe.model_size import probe_model
from tests.unit.test_probes import write_safetensors

# A Git LFS pointer as `git clone` without Git LFS leaves it (the spec's three lines)
POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 15231233024\n"
)
# Qwen-7B's shapes (config.json of an older checkpoint that ships pytorch_model-*.bin)
CONFIG = {"model_type": "qwen", "hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 11008,
          "vocab_size": 151936, "num_attention_heads": 32, "torch_dtype": "bfloat16"}  # fmt: skip


def _model(directory: Path, config: dict[str, object] = CONFIG) -> Path:
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def _bin_index(directory: Path, total_size: int, files: dict[str, int]) -> None:
    """pytorch_model.bin.index.json over `files` (name -> bytes written, a stand-in for the pickled weights)."""
    weight_map = {f"tensor{i}": name for i, name in enumerate(files)}
    index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    (directory / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    for name, size in files.items():
        (directory / name).write_bytes(b"\0" * size)


def test_bin_weights_are_counted_by_the_index_total_at_config_dtype(tmp_path: Path) -> None:
    model = _model(tmp_path / "m")
    _bin_index(
        model, 15_442_649_088, {"pytorch_model-00001-of-00002.bin": 2000, "pytorch_model-00002-of-00002.bin": 10}
    )
    facts = probe_model(str(model), {}, tmp_path)
    assert (facts.total_params, facts.source) == (7_721_324_544, "weights_size")
    assert facts.largest_layer_params and facts.hidden_size == 4096  # the shapes still from config.json
    assert not any("estimated from config.json" in warning for warning in facts.warnings)


def test_a_single_bin_file_is_counted_by_its_size(tmp_path: Path) -> None:
    model = _model(tmp_path / "m", {**CONFIG, "torch_dtype": "float32"})
    (model / "pytorch_model.bin").write_bytes(b"\0" * 4000)
    assert probe_model(str(model), {}, tmp_path).total_params == 1000


def test_bin_weights_without_a_known_dtype_fall_back_to_the_shapes(tmp_path: Path) -> None:
    config = {key: value for key, value in CONFIG.items() if key != "torch_dtype"}
    model = _model(tmp_path / "m", config)
    (model / "pytorch_model.bin").write_bytes(b"\0" * 4000)
    facts = probe_model(str(model), {}, tmp_path)
    assert facts.source == "config" and facts.total_params and facts.total_params > 10**9


def test_a_bin_shard_missing_is_one_line(tmp_path: Path) -> None:
    model = _model(tmp_path / "m")
    _bin_index(model, 4000, {"pytorch_model-00001-of-00002.bin": 10, "pytorch_model-00002-of-00002.bin": 10})
    (model / "pytorch_model-00002-of-00002.bin").unlink()
    with pytest.raises(SafeSftError) as err:
        probe_model(str(model), {}, tmp_path)
    assert "pytorch_model-00002-of-00002.bin, which pytorch_model.bin.index.json names, is missing" in err.value.message


@pytest.mark.parametrize("weights", ["model.safetensors", "model-00002-of-00002.safetensors", "pytorch_model.bin"])
def test_a_git_lfs_pointer_for_weights_is_named_with_its_fix(tmp_path: Path, weights: str) -> None:
    model = _model(tmp_path / "m")
    if weights.startswith("model-"):
        write_safetensors(model / "model-00001-of-00002.safetensors", {"a": [4, 4]})
        index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": weights}}
        (model / "model.safetensors.index.json").write_text(json.dumps(index))
    (model / weights).write_text(POINTER)
    with pytest.raises(SafeSftError) as err:
        probe_model(str(model), {}, tmp_path)
    assert (
        err.value.message
        == f"{model / weights} is a Git LFS pointer, not the weights: the model was cloned without Git LFS"
    )
    assert f"git lfs pull` in {model}" in err.value.hint


def test_a_small_weight_file_that_is_no_pointer_is_read_as_weights(tmp_path: Path) -> None:
    model = _model(tmp_path / "m")
    write_safetensors(model / "model.safetensors", {"a": [3, 5]})  # a tiny model is smaller than a pointer
    assert probe_model(str(model), {}, tmp_path).total_params == 15


def test_a_hub_id_whose_cached_copy_was_cut_short_is_planned_from_its_name(tmp_path: Path) -> None:
    """swift's download completes a cached copy; only a local folder's missing shard stops the run."""
    snapshot = tmp_path / "hf" / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(CONFIG))
    write_safetensors(snapshot / "model-00001-of-00002.safetensors", {"a": [4, 4]})
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index))
    facts = probe_model("Qwen/Qwen2.5-7B-Instruct", {"HF_HUB_CACHE": str(tmp_path / "hf")}, tmp_path)
    assert facts.source == "name" and facts.total_params == 7 * 10**9
    assert any(
        "has an incomplete copy in the hub cache" in warning and "is missing" in warning for warning in facts.warnings
    )
    with pytest.raises(SafeSftError):
        probe_model(str(snapshot), {}, tmp_path)  # the same folder given as a path
