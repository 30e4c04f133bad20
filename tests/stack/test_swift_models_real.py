"""The model type and template safe-sft decides for a model, held to the installed swift's own decision.

launcher/backends/swift_models.txt is written by scripts/swift_models.py from swift's registry;
launcher/plan/model_type.py decides from it, without importing swift, what swift decides before it loads
anything (`get_model_info_meta`, `get_template_meta`). Held here on the 52 real model folders of
tests/data/model_configs, each under its own repository's name (as a clone or download names it), and on
cases built to reach each of swift's branches: a config.json that names no architecture, an args.json
swift wrote, a group template, a user's --model_type and --template.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.backends.swift_models import TABLE_FILE, swift_models
from launcher.errors import SafeSftError
from launcher.plan.model_type import swift_naming
from launcher.probe.model_size import facts_from_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from swift_models import lines

DATA = Path(__file__).resolve().parents[1] / "data" / "model_configs"
ROWS = [json.loads(line) for line in (DATA / "index.jsonl").read_text().splitlines()]
# swift stops on a multimodal model it registers under no type ("is not supported because no suitable
# `model_type` was found"), multimodal by the config it loads (HfConfigFactory.is_multimodal): safe-sft reads
# config.json's keys, which tell it for a config of remote code, not for one whose transformers class adds
# the text and vision configs the file does not write
NOT_DECIDED = {
    "Zekun525__lisa-7B": "model_type llava: transformers' LlavaConfig adds the text and vision configs its "
    "config.json does not write, which swift reads as multimodal"
}


def test_the_shipped_table_is_the_installed_swifts() -> None:
    assert TABLE_FILE.read_text(encoding="utf-8") == "\n".join(lines()) + "\n", "run scripts/swift_models.py"


def swifts_decision(model: Path, model_type: str | None = None, template: str | None = None) -> tuple[Any, ...]:
    from swift.model.model_meta import get_model_info_meta
    from swift.template.register import get_template_meta

    try:
        info, meta = get_model_info_meta(str(model), model_type=model_type)
        return ("runs", meta.model_type, get_template_meta(info, meta, template).template_type)
    except ValueError:
        return ("stops",)


def safe_sfts_decision(model: Path, model_type: str | None = None, template: str | None = None) -> tuple[Any, ...]:
    try:
        naming = swift_naming(swift_models(), str(model), facts_from_dir(model, str(model)), model_type, template)
    except SafeSftError:
        return ("stops",)
    return ("runs", naming.model_type, naming.template)


def _named_folder(row: dict[str, Any], root: Path) -> Path:
    """The folder's config.json under the name its repository gives it."""
    name = (row["path"].rstrip("/") or row["repo"]).rsplit("/", 1)[-1]
    folder = root / row["dir"] / name
    folder.mkdir(parents=True)
    shutil.copy(DATA / "files" / row["dir"] / "config.json", folder / "config.json")
    return folder


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(row, marks=pytest.mark.xfail(reason=NOT_DECIDED[row["dir"]], strict=True))
        if row["dir"] in NOT_DECIDED
        else row
        for row in ROWS
    ],
    ids=[row["dir"] for row in ROWS],
)
def test_real_model_folders_are_named_as_swift_names_them(tmp_path: Path, row: dict[str, Any]) -> None:
    folder = _named_folder(row, tmp_path)
    assert safe_sfts_decision(folder) == swifts_decision(folder)


def test_most_real_folders_under_their_own_names_stop_swift(tmp_path: Path) -> None:
    """Why the check is worth its table: a clone under its repository's name is mostly no name swift
    registers, and its architecture mostly that of several types."""
    stops = [row["dir"] for row in ROWS if safe_sfts_decision(_named_folder(row, tmp_path)) == ("stops",)]
    assert len(stops) >= len(ROWS) // 3, stops


def _config(folder: Path, **config: Any) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, **config}))
    return folder


QWEN2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}


@pytest.mark.parametrize(
    ("name", "config", "args_json", "model_type", "template"),
    [
        ("no-architecture", {"model_type": "gemma2"}, None, None, None),
        ("no-architecture", {"model_type": "gemma2"}, None, "gemma2", None),
        ("my-qwen", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, None, None, None),
        ("my-qwen", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, None, "qwen2", None),
        ("my-qwen", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, None, "qwen2", "qwen"),
        ("my-qwen", QWEN2, {"model_type": "qwen2", "swift_version": "4.6.0"}, None, None),
        ("my-qwen", QWEN2, {"model_type": "qwen2", "template": "qwen2_5", "swift_version": "4.6.0"}, None, None),
        ("my-qwen", QWEN2, {"model_type": "qwen2", "template": "qwen2_5", "swift_version": "3.9.0"}, None, None),
        ("my-qwen", QWEN2, {"model_type": "qwen2", "template": "qwen2_5"}, None, None),
        ("my-qwen", QWEN2, {"model_type": "qwen2", "template": "qwen2_5"}, "qwen2", None),
        ("my-qwen", QWEN2, {"model_type": "no_such_type", "swift_version": "4.6.0"}, None, None),
        ("my-qwen", QWEN2, {"template": "no_such_template"}, "qwen2", None),
        ("my-vl", {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
                   "vision_config": {}}, None, None, None),
        ("Qwen2.5-7B-Instruct", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, None, None, None),
        ("Qwen2___5-7B-Instruct", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, None, None, None),
        ("QwQ-32B", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, None, None, None),
        ("QwQ-32B", {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, None, "qwen2", None),
        ("brand-new", {"model_type": "brand_new", "architectures": ["BrandNewForCausalLM"]}, None, None, None),
        ("brand-new-vl", {"model_type": "brand_new_vl", "architectures": ["BrandNewForConditionalGeneration"],
                          "text_config": {}, "vision_config": {}}, None, None, None),
        ("brand-new-vl", {"model_type": "brand_new_vl", "architectures": ["BrandNewForConditionalGeneration"],
                          "text_config": {}, "vision_config": {}}, None, "qwen2_vl", None),
    ],
)  # fmt: skip
def test_built_folders_are_named_as_swift_names_them(
    tmp_path: Path,
    name: str,
    config: dict[str, Any],
    args_json: dict[str, Any] | None,
    model_type: str | None,
    template: str | None,
) -> None:
    folder = _config(tmp_path / name, **config)
    if args_json is not None:
        (folder / "args.json").write_text(json.dumps(args_json))
    assert safe_sfts_decision(folder, model_type, template) == swifts_decision(folder, model_type, template)


@pytest.mark.parametrize(
    ("option", "value"),
    [("optimizer", "adamw_torch"), ("callbacks", "early_stopping"), ("loss_type", "ce"), ("loss_scale", "herms")],
)
def test_a_name_swift_does_not_register_stops_swift_after_the_model_loads_and_safe_sft_before(
    tiny: dict[str, object], tmp_path: Path, option: str, value: str
) -> None:
    """Real `swift sft` takes the name, loads the model, then stops on a bare KeyError; safe-sft refuses the
    same argv before anything starts (exit 2), naming the names swift has."""
    args = [
        "--model", str(tiny["model"]), "--model_type", "qwen2", "--template", "qwen", "--check_model", "false",
        "--use_cpu", "true", "--fp16", "false", "--report_to", "none", "--dataset", str(tiny["dataset"]),
        "--max_steps", "1", "--dataloader_num_workers", "0", f"--{option}", value,
    ]  # fmt: skip
    swift = subprocess.run(
        [str(Path(sys.executable).parent / "swift"), "sft", *args, "--output_dir", str(tmp_path / "swift")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert swift.returncode != 0 and "Traceback" in swift.stderr, swift.stderr[-2000:]
    if option != "loss_scale":  # an unknown loss scale ends on a TypeError, not its name
        assert f"KeyError: '{value}'" in swift.stderr, swift.stderr[-2000:]
    assert "model_info" in swift.stderr or "model_info" in swift.stdout  # it had loaded the model first
    ours = subprocess.run(
        [sys.executable, "-m", "launcher", *args, "--output_dir", str(tmp_path / "ours")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ours.returncode == 2, ours.stderr[-2000:]
    assert f"safe-sft: error: --{option} {value!r} is no name swift sft 4.6.0 registers for it" in ours.stderr
    assert not (tmp_path / "ours").exists()
