"""Probes against fakes: an NVML module, cgroup trees, safetensors files written by the test."""

import json
import os
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.errors import SafeSftError
from launcher.probe.gpus import probe_gpus
from launcher.probe.memory import cgroup_limit
from launcher.probe.model_size import params_from_name, probe_model
from launcher.units import GiB, parse_param_count


class FakeNvml:
    """Just enough of pynvml: two GPUs, the second busy."""

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.shutdown_called = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise OSError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        used = 70 * GiB if handle == 1 else GiB
        return SimpleNamespace(total=80 * GiB, free=80 * GiB - used, used=used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[object]:
        return [object()] * handle

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"


def test_nvml_probe_reads_every_gpu() -> None:
    nvml = FakeNvml()
    facts = probe_gpus(nvml)  # type: ignore[arg-type]
    assert facts.driver_version == "550.54.15"
    assert [(g.index, g.uuid, g.free_bytes // GiB, g.compute_processes) for g in facts.gpus] == [
        (0, "GPU-0", 79, 0),
        (1, "GPU-1", 10, 1),
    ]
    assert nvml.shutdown_called


def test_no_driver_is_zero_gpus_and_a_warning() -> None:
    facts = probe_gpus(FakeNvml(fail_init=True))  # type: ignore[arg-type]
    assert facts.gpus == ()
    assert "no NVIDIA driver" in facts.warnings[0]


def test_cgroup_v1_limit(tmp_path: Path) -> None:
    group = tmp_path / "memory" / "job"
    group.mkdir(parents=True)
    (group / "memory.limit_in_bytes").write_text(str(16 * GiB))
    (group / "memory.usage_in_bytes").write_text(str(4 * GiB))
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job\n0::/\n")
    assert cgroup_limit(tmp_path, proc) == (16 * GiB, 4 * GiB)


def test_cgroup_v1_unlimited(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/\n")
    assert cgroup_limit(tmp_path, proc) == (None, None)


def test_cgroup_v2_limit(tmp_path: Path) -> None:
    group = tmp_path / "user.slice"
    group.mkdir()
    (group / "memory.max").write_text(str(8 * GiB))
    (group / "memory.current").write_text(str(GiB))
    proc = tmp_path / "cgroup"
    proc.write_text("0::/user.slice\n")
    assert cgroup_limit(tmp_path, proc) == (8 * GiB, GiB)
    (group / "memory.max").write_text("max")
    assert cgroup_limit(tmp_path, proc) == (None, None)


def write_safetensors(path: Path, tensors: dict[str, list[int]], dtype: str = "BF16") -> None:
    header = {name: {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]} for name, shape in tensors.items()}
    header["__metadata__"] = {"format": "pt"}  # type: ignore[assignment]
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)


def test_model_dir_exact_count_and_largest_layer(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 100}))
    write_safetensors(
        tmp_path / "model-00001-of-00002.safetensors",
        {"model.embed_tokens.weight": [100, 8], "model.layers.0.mlp.up_proj.weight": [32, 8]},
    )
    write_safetensors(
        tmp_path / "model-00002-of-00002.safetensors",
        {
            "model.layers.0.self_attn.q_proj.weight": [8, 8],
            "model.layers.1.mlp.up_proj.weight": [32, 8],
            "lm_head.weight": [100, 8],
        },
    )
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert facts.total_params == 800 + 256 + 64 + 256 + 800
    assert facts.largest_layer_params == 800
    assert (facts.source, facts.dtype, facts.hidden_size, facts.num_layers) == ("safetensors", "BF16", 8, 2)


def _sharded(directory: Path) -> None:
    """Two shards and their index, and the same weights whole in consolidated.safetensors (Mistral's repos)."""
    directory.mkdir()
    shards = {"model-00001-of-00002.safetensors": {"a": [10, 10]}, "model-00002-of-00002.safetensors": {"b": [5]}}
    for name, tensors in shards.items():
        write_safetensors(directory / name, tensors)
    write_safetensors(directory / "consolidated.safetensors", {"a": [10, 10], "b": [5]})
    weight_map = {tensor: name for name, tensors in shards.items() for tensor in tensors}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_a_sharded_model_counts_the_files_its_index_names_and_only_those(tmp_path: Path) -> None:
    _sharded(tmp_path / "m")
    assert probe_model(str(tmp_path / "m"), {}, tmp_path).total_params == 105  # not 210


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(lambda m: (m / "model-00002-of-00002.safetensors").unlink(),
                     "model-00002-of-00002.safetensors, which model.safetensors.index.json names, is missing",
                     id="a-shard-missing"),
        pytest.param(lambda m: (m / "model.safetensors.index.json").write_text("[1]"),
                     "model.safetensors.index.json cannot be read", id="index-not-an-object"),
        pytest.param(lambda m: ((m / "model-00001-of-00002.safetensors").unlink(),
                                os.mkfifo(m / "model-00001-of-00002.safetensors")),
                     "is not a readable safetensors file: it is not a regular file", id="a-shard-a-fifo"),
    ],
)  # fmt: skip
def test_a_model_dir_a_download_left_incomplete_is_one_line(tmp_path: Path, damage, message: str) -> None:  # type: ignore[no-untyped-def]
    model = tmp_path / "m"
    _sharded(model)
    damage(model)
    with pytest.raises(SafeSftError) as err:
        probe_model(str(model), {}, tmp_path)
    assert message in err.value.message and "download the model again" in err.value.hint


def test_head_size_and_decoder_family_from_config(tmp_path: Path) -> None:
    """Gemma-2 sets head_dim apart from hidden / heads; a multimodal config's decoder family is its text
    config's model_type (what launcher/plan/layer_bytes.py keys on), beside the outer model_type."""
    gemma2 = tmp_path / "gemma2"
    gemma2.mkdir()
    config = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "intermediate_size": 14336,
              "vocab_size": 256000, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256}  # fmt: skip
    (gemma2 / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(gemma2), {}, tmp_path)
    assert (facts.head_dim, facts.decoder_type, facts.model_type) == (256, "gemma2", "gemma2")
    vl = tmp_path / "vl"
    vl.mkdir()
    text = {"model_type": "qwen3_vl_text", "hidden_size": 2560, "num_hidden_layers": 36, "head_dim": 128,
            "intermediate_size": 9728, "vocab_size": 151936, "num_attention_heads": 32}  # fmt: skip
    (vl / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "text_config": text, "vision_config": {}}))
    facts = probe_model(str(vl), {}, tmp_path)
    assert (facts.head_dim, facts.decoder_type, facts.model_type) == (128, "qwen3_vl_text", "qwen3_vl")


def test_hub_id_found_in_hf_cache(tmp_path: Path) -> None:
    snapshot = tmp_path / "hf" / "hub" / "models--Qwen--Tiny" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    write_safetensors(snapshot / "model.safetensors", {"w": [10, 10]})
    facts = probe_model("Qwen/Tiny", {"HF_HOME": str(tmp_path / "hf")}, tmp_path)
    assert (facts.total_params, facts.source) == (100, "safetensors")


def test_hub_id_found_in_modelscope_cache(tmp_path: Path) -> None:
    directory = tmp_path / "ms" / "models" / "Qwen" / "Tiny"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    write_safetensors(directory / "model.safetensors", {"w": [3, 7]})
    facts = probe_model("Qwen/Tiny", {"MODELSCOPE_CACHE": str(tmp_path / "ms")}, tmp_path)
    assert facts.total_params == 21


def test_unknown_model_size_from_name_warns(tmp_path: Path) -> None:
    facts = probe_model("Qwen/Qwen2.5-7B-Instruct", {}, tmp_path)
    assert (facts.total_params, facts.source) == (7_000_000_000, "name")
    assert any("read from its name" in w for w in facts.warnings)


def test_model_params_flag_overrides(tmp_path: Path) -> None:
    facts = probe_model("Qwen/Qwen2.5-7B-Instruct", {}, tmp_path, params_override=7_600_000_000)
    assert (facts.total_params, facts.source) == (7_600_000_000, "flag")


def test_model_params_flag_leaves_no_warning_of_how_the_files_were_counted(tmp_path: Path) -> None:
    """'parameter count estimated from config.json' had been shown where the count was --model-params'."""
    import json

    model = tmp_path / "m"
    model.mkdir()
    config = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
              "num_attention_heads": 4, "vocab_size": 100}  # fmt: skip
    (model / "config.json").write_text(json.dumps(config))
    assert any("estimated from config.json" in w for w in probe_model(str(model), {}, tmp_path).warnings)
    facts = probe_model(str(model), {}, tmp_path, params_override=7_000_000_000)
    assert not any("estimated from config.json" in w for w in facts.warnings)


def test_a_parameter_count_past_any_model_is_shown_as_a_number() -> None:
    from launcher.units import fmt_params

    assert (fmt_params(128 * 10**15), fmt_params(7_620_000_000)) == ("1.28e+17", "7.62B")


@pytest.mark.parametrize(
    ("text", "count"), [("7B", 7e9), ("7.6e9", 7.6e9), ("500M", 5e8), ("135168", 135168), ("1e-3B", 1e6)]
)
def test_model_params_flag_reads_counts_with_and_without_a_scale(text: str, count: float) -> None:
    assert parse_param_count(text) == int(count)


def test_a_bare_small_model_params_is_a_size_in_billions_missing_its_b() -> None:
    with pytest.raises(SafeSftError) as bad:
        parse_param_count("7")
    assert (bad.value.message, bad.value.hint) == (
        "parameter count '7' is 7 parameters, not 7 billion",
        "write 7B for billions, or the exact count like 7.6e9",
    )


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("Qwen2.5-7B-Instruct", 7e9),
        ("Qwen2.5-0.5B", 0.5e9),
        ("Qwen2-VL-72B", 72e9),
        ("SmolLM-135M", 135e6),
        ("llama", None),
    ],
)
def test_params_from_name(name: str, params: float | None) -> None:
    assert params_from_name(name) == (int(params) if params else None)


@pytest.mark.parametrize(
    ("file", "content", "said"),
    [
        pytest.param("config.json", b'{"model_type": "llama", ', "config.json is not readable JSON", id="config-cut"),
        pytest.param("config.json", b"[1]", "config.json holds a list, not a JSON object", id="config-list"),
        pytest.param("config.json", b"null", "config.json holds null, not a JSON object", id="config-null"),
        pytest.param("model.safetensors", b"abc", "shorter than the 8 bytes", id="safetensors-short"),
        pytest.param("model.safetensors", struct.pack("<Q", 10**9) + b"{}", "runs past the end", id="safetensors-cut"),
        pytest.param(
            "model.safetensors", struct.pack("<Q", 3) + b"[1]", "header is not a JSON object", id="header-list"
        ),
    ],
)
def test_a_corrupt_model_file_is_one_error_naming_it(tmp_path: Path, file: str, content: bytes, said: str) -> None:
    """A download cut short or a file that is not what its name says: SafeSftError naming the file and the
    fix, not a traceback."""
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 100}))
    (tmp_path / file).write_bytes(content)
    with pytest.raises(SafeSftError) as raised:
        probe_model(str(tmp_path), {}, tmp_path)
    assert str(tmp_path / file) in raised.value.message and said in raised.value.message
    assert "again" in raised.value.hint


def test_a_size_that_is_not_positive_is_unknown(tmp_path: Path) -> None:
    """A negative head_dim, a zero hidden size or a bool in config.json is no size: the next key, or
    unknown (the estimate then uses hidden / heads), never a negative width."""
    config = {"hidden_size": 0, "d_model": 64, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100,
              "head_dim": -256, "num_attention_heads": 4, "num_key_value_heads": True}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert (facts.hidden_size, facts.head_dim, facts.num_attention_heads, facts.num_key_value_heads) == (
        64,
        None,
        4,
        None,
    )


def test_a_size_that_is_not_positive_is_named_in_one_warning(tmp_path: Path) -> None:
    """A damaged or hand-edited config.json: the plan's warning names each key and value swift would choke
    on; null, a list (a width per layer) and 0 where 0 means none (no shared experts) are not flagged."""
    config = {"hidden_size": "4096", "num_hidden_layers": 2, "intermediate_size": [128, 256], "vocab_size": -5,
              "head_dim": None, "n_shared_experts": 0, "num_attention_heads": 4.0,
              "num_key_value_heads": True}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    flagged = [w for w in facts.warnings if "positive whole number" in w]
    assert flagged == [
        f'{tmp_path / "config.json"}: hidden_size "4096", vocab_size -5, num_attention_heads 4.0, '
        "num_key_value_heads true are not positive whole numbers: the memory estimate does without, and swift "
        "builds the model from this file (if it was edited, restore the model's own config.json)"
    ]
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_size": 64, "vocab_size": 100,
                                                      "num_attention_heads": 4, "num_key_value_heads": 2}))  # fmt: skip
    assert not [w for w in probe_model(str(tmp_path), {}, tmp_path).warnings if "positive whole number" in w]


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"hidden_size": 4096, "vocab_size": 128256, "intermediate_size": 14336}, "num_hidden_layers"),
        ({"hidden_size": None, "num_hidden_layers": 32, "vocab_size": 128256}, "hidden_size"),
        ({}, "hidden_size, num_hidden_layers, vocab_size"),
    ],
)
def test_a_config_without_the_sizes_to_count_says_which_and_how_to_go_on(
    tmp_path: Path, config: dict[str, object], named: str
) -> None:
    """No weights and a config.json that lacks a size: the plan had said "unknown parameters" and "Strategy: none"
    without naming why."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    assert facts.total_params is None
    [said] = [w for w in facts.warnings if "size is unknown" in w]
    assert said.startswith(f"{tmp_path / 'config.json'} has no {named}, and {tmp_path} no weights to count")
    assert "--model-params" in said


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        pytest.param({"dtype": "F32", "shape": [None]}, "tensor 'w' has the shape [null]", id="null-dim"),
        pytest.param({"dtype": "F32", "shape": ["7"]}, "tensor 'w' has the shape [\"7\"]", id="text-dim"),
        pytest.param({"dtype": "F32", "shape": [1.5, 1e300]}, "tensor 'w' has the shape [1.5, 1e+300]", id="float"),
        pytest.param({"dtype": "F32", "shape": [-5, 3]}, "tensor 'w' has the shape [-5, 3]", id="negative"),
        pytest.param({"dtype": "F32", "shape": [True]}, "tensor 'w' has the shape [true]", id="bool"),
        pytest.param({"dtype": "F32"}, "tensor 'w' has the shape null", id="no-shape"),
        pytest.param({"shape": [2]}, "tensor 'w' has no dtype", id="no-dtype"),
        pytest.param([1], "tensor 'w' has no dtype", id="a-list"),
    ],
)
def test_a_safetensors_header_of_another_shape_is_one_line(tmp_path: Path, entry: object, why: str) -> None:
    """Such a header gave a TypeError or an OverflowError (a traceback), or planned -15 parameters."""
    from launcher.probe.model_size import facts_from_dir

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 100}))
    blob = json.dumps({"w": entry}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob)
    with pytest.raises(SafeSftError) as err:
        facts_from_dir(tmp_path, "m")
    assert err.value.message.startswith(f"{tmp_path / 'model.safetensors'} is not a readable safetensors file: {why}")


@pytest.mark.parametrize("text", ["0", "0B", "-7B", "1e-3"])
def test_a_model_params_below_one_parameter_says_so(text: str) -> None:
    """`0` was told to write `0B`, which was then out of range; `-7B` and `1e-3B` were 'not a number'."""
    with pytest.raises(SafeSftError) as bad:
        parse_param_count(text)
    assert (bad.value.message, bad.value.hint) == (
        f"parameter count {text!r} is less than one parameter",
        "write the model's size like 7B",
    )


def test_a_safetensors_file_cut_short_behind_a_whole_header_is_one_line(tmp_path: Path) -> None:
    """An interrupted copy (scp, rsync, a full disk) keeps the header and loses tensors: the plan had read it
    as exact, and swift stopped at the load on "incomplete metadata, file not fully covered"."""
    header = json.dumps({"a": {"dtype": "BF16", "shape": [100], "data_offsets": [0, 200]}}).encode()
    whole = struct.pack("<Q", len(header)) + header + b"\0" * 200
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 9}))
    (tmp_path / "model.safetensors").write_bytes(whole)
    assert probe_model(str(tmp_path), {}, tmp_path).total_params == 100
    (tmp_path / "model.safetensors").write_bytes(whole[:-100])
    with pytest.raises(SafeSftError) as err:
        probe_model(str(tmp_path), {}, tmp_path)
    need = len(whole)
    assert err.value.message == (
        f"{tmp_path / 'model.safetensors'} is not a readable safetensors file: it is cut short, {need - 100:,} bytes "
        f"where its header describes {need:,}"
    )
    assert err.value.hint == "download the model again (or complete it)"
    (tmp_path / "model.safetensors").write_bytes(whole + b"\0" * 16)  # the loader refuses bytes it does not cover
    with pytest.raises(SafeSftError) as err:
        probe_model(str(tmp_path), {}, tmp_path)
    assert err.value.message.endswith(f"it has 16 bytes beyond the {need:,} its header describes")


def test_a_vision_language_config_alone_counts_the_tower_that_freeze_vit_freezes(tmp_path: Path) -> None:
    """Without weights, the tower's blocks were in the total but not in vision_params, so swift's default
    --freeze_vit true (and --freeze_vit false) changed nothing in a full fine-tune's plan. Qwen2.5-VL-7B's
    tower: 32 blocks of width 1280 and MLP width 3420."""
    from launcher.plan.features import read_features
    from launcher.plan.swift_args import parse_swift_argv

    text = {"hidden_size": 3584, "num_hidden_layers": 28, "intermediate_size": 18944, "vocab_size": 152064,
            "num_attention_heads": 28, "num_key_value_heads": 4}  # fmt: skip
    vision = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "patch_size": 14}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", **text, "vision_config": vision}))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    tower = 32 * (4 * 1280 * 1280 + 2 * 1280 * 3420)
    assert facts.source == "config" and facts.vision_params == tower

    def trained(*argv: str) -> int:
        swift = parse_swift_argv(["--model", str(tmp_path), "--tuner_type", "full", *argv])
        return read_features(swift, facts, {}, 8).trainable_params

    assert trained("--freeze_vit", "false") - trained() == tower  # swift freezes the tower by default
    assert trained("--freeze_llm", "true", "--freeze_vit", "false") >= tower


def test_a_weight_file_this_user_cannot_read_says_so_and_not_to_download_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mode-600 model.safetensors of another user (hostile47env F7): its bytes may be whole, so the fix is
    its permissions, not a download. (These tests run as root, whom no mode stops, so the read is refused here
    as the kernel refuses another user's.)"""
    from launcher.probe.model_size import facts_from_dir

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 100}))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0" * 16)
    opened = Path.open

    def refuse(self: Path, *args: object, **kwargs: object) -> object:
        if self == weights:
            raise PermissionError(13, "Permission denied", str(self))
        return opened(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(SafeSftError) as err:
        facts_from_dir(tmp_path, "m")
    assert err.value.message == f"{weights} cannot be read by this user: Permission denied"
    assert err.value.hint.startswith("make the model folder readable by this user")
