"""--target_modules as real swift and peft take them, and transformers' own modules against the checkpoints'.

launcher/plan/lora_targets.py judges a name by the modules the model's weights name. Held here:
- real `swift sft` on the tiny model: a comma-joined list (one name to swift's parser) loads the model and
  stops on peft's "not found in the base model"; safe-sft refuses the same argv before the start (exit 2).
  A misspelt name beside a right one runs, with adapters on the right one alone, as safe-sft's plan warns.
- real LLaMA-Factory (its own environment) on a `lora_target` of misspelt names: the same stop after the
  load; `safe-sft llamafactory train` refuses it before the start.
- transformers' own classes, built on the meta device from the 52 real folders' config.json
  (tests/data/model_configs): every module peft could adapt (a linear, an embedding, a convolution) has a
  name some path of the folder's own weights holds, or is a tied output layer; so a name the check refuses
  is one the loaded model lacks too. Folders of remote code (their classes are not installed) are counted
  apart: their modules are their checkpoint's names by construction.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from launcher.model import module_pattern, modules_of
from launcher.probe.model_size import read_safetensors_header
from tests.stack.test_backends_real import LF_PYTHON, LF_VENV, llamafactory_config
from tests.unit.test_real_model_configs import ROWS, _folder, _weight_map

BASE = ["--model_type", "qwen2", "--template", "qwen", "--check_model", "false", "--use_cpu", "true",
        "--fp16", "false", "--report_to", "none", "--max_steps", "1", "--dataloader_num_workers", "0",
        "--tuner_type", "lora"]  # fmt: skip


def _args(tiny: dict[str, object], *targets: str) -> list[str]:
    return ["--model", str(tiny["model"]), "--dataset", str(tiny["dataset"]), *BASE, "--target_modules", *targets]


def _swift(args: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    swift = str(Path(sys.executable).parent / "swift")
    return subprocess.run([swift, "sft", *args, "--output_dir", str(out)], capture_output=True, text=True, timeout=300)


def _safe_sft(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=120)


def test_a_comma_joined_list_stops_swift_after_the_load_and_safe_sft_before(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    args = _args(tiny, "q_proj,v_proj")
    swift = _swift(args, tmp_path / "swift")
    assert swift.returncode != 0, swift.stderr[-2000:]
    assert "ValueError: Target modules {'q_proj,v_proj'} not found in the base model" in swift.stderr
    assert "model_info" in swift.stderr + swift.stdout  # it had loaded the model first
    ours = _safe_sft(*args, "--output_dir", str(tmp_path / "ours"))
    assert ours.returncode == 2, ours.stderr[-2000:]
    assert "safe-sft: error: --target_modules q_proj,v_proj: no module of the model is so named" in ours.stderr
    assert "safe-sft: fix: give the names as separate words, as swift reads a list: --target_modules q_proj v_proj" in (
        ours.stderr
    )
    assert not (tmp_path / "ours").exists()


def test_a_misspelt_name_beside_a_right_one_trains_the_right_one_alone_as_the_plan_warns(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    args = _args(tiny, "qproj", "v_proj")
    swift = _swift([*args, "--save_steps", "1"], tmp_path / "swift")
    assert swift.returncode == 0, swift.stderr[-2000:]
    saved = next((tmp_path / "swift").glob("v*/checkpoint-1/adapter_model.safetensors"))
    adapted = {name.split(".")[-3] for name in read_safetensors_header(saved) if ".lora_" in name}
    assert adapted == {"v_proj"}, adapted
    plan = _safe_sft("plan", *args, "--output_dir", str(tmp_path / "ours"))
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "warning: --target_modules qproj: no module of the model is so named" in plan.stdout + plan.stderr
    assert "peft passes it over and adapts v_proj alone" in plan.stdout + plan.stderr


def test_llamafactory_stops_on_a_lora_target_the_model_lacks_after_the_load_and_safe_sft_before(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    config = llamafactory_config(tiny, tmp_path / "out", tmp_path / "lf")
    overrides = ["finetuning_type=lora", "lora_target=qproj,vproj"]
    plain = subprocess.run(
        [str(LF_VENV / "bin" / "llamafactory-cli"), "train", str(config), *overrides],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert plain.returncode != 0, plain.stderr[-2000:]
    assert "ValueError: Target modules {" in plain.stderr and "not found in the base model" in plain.stderr
    ours = subprocess.run(
        [str(LF_PYTHON), "-m", "launcher", "llamafactory", "train", str(config), *overrides],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert ours.returncode == 2, ours.stderr[-2000:]
    assert "safe-sft: error: lora_target: qproj,vproj: no module of the model is so named" in ours.stderr
    assert "safe-sft: fix: name modules the model has, or give lora_target: all" in ours.stderr


ADAPTABLE = ("Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "Conv1D")


def _built(row: dict[str, Any]) -> Any:
    """transformers' class for the folder's architecture, built on the meta device; None where transformers
    has no such class (remote code, or a name of the folder's own)."""
    import torch
    import transformers

    config_json = json.loads((_folder(row) / "config.json").read_text())
    architecture = (config_json.get("architectures") or [None])[0]
    cls = getattr(transformers, architecture, None) if isinstance(architecture, str) else None
    if cls is None or "auto_map" in config_json:
        return None
    config = transformers.AutoConfig.from_pretrained(_folder(row))
    with torch.device("meta"):
        return cls(config), bool(getattr(config.get_text_config(), "tie_word_embeddings", False))


def test_transformers_own_modules_are_named_by_the_checkpoints_weights() -> None:
    built, remote = 0, []
    unnamed: dict[str, set[str]] = {}
    for row in ROWS:
        made = _built(row)
        if made is None:
            remote.append(row["dir"])
            continue
        model, tied = made
        built += 1
        parts = {part for path in modules_of(_weight_map(row)) for part in path.split(".")}
        for name, module in model.named_modules():
            if type(module).__name__ not in ADAPTABLE or not list(module.parameters(recurse=False)):
                continue
            last = module_pattern(name.rpartition(".")[2])
            if last not in parts and not (last == "lm_head" and tied):
                unnamed.setdefault(row["dir"], set()).add(last)
    assert not unnamed, unnamed
    assert built >= 24, f"only {built} folders built by transformers' own classes ({len(remote)} remote code)"
