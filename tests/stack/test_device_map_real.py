"""device_map on the real stack, as far as this CPU machine allows.

Several visible devices cannot exist here (no CUDA), so swift cannot run its single-process split on them;
what can run for real does: safe-sft's CLI plans a device_map run of a real checkpoint for assumed GPUs, the
`--max_memory` it writes goes through ms-swift's own argument parsing (ModelArguments._init_max_memory), and
transformers' own placement for `device_map='auto'` (get_balanced_memory + infer_auto_device_map, on the model
built on the meta device) puts exactly the layers safe-sft planned on each GPU, the embeddings on the first and
the lm_head on the last. The choice itself (device_map when only it fits without offload) is tested in
tests/unit/test_device_map.py; the run path's refusal on the CPU below.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

LAYERS = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, stack_installed: None) -> Path:
    """A real Qwen2 checkpoint (random bf16 weights, untied head), big enough that layers weigh something."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = tmp_path_factory.mktemp("dm-model")
    config = Qwen2Config(
        hidden_size=256, intermediate_size=1024, num_hidden_layers=LAYERS, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=32000, tie_word_embeddings=False, torch_dtype="bfloat16",
    )  # fmt: skip
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    return out


def plan_json(*args: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--json", *args], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def transformers_places(checkpoint: Path, max_memory: dict[int, int]) -> dict[str, object]:
    """What transformers 5 does with this max_memory for device_map='auto' (from_pretrained's own path)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.integrations.accelerate import _get_device_map

    config = AutoConfig.from_pretrained(checkpoint)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    placed: dict[str, object] = _get_device_map(model, "auto", dict(max_memory), None)
    return placed


def device_of(placed: dict[str, object], name: str) -> object:
    owner = max((k for k in placed if name == k or name.startswith(k + ".") or k == ""), key=len)
    return placed[owner]


# 8 GPUs: transformers' cap on GPU 0 (model / 8 + 1.25 x the embeddings, less the room it keeps there for
# them) is below the 16 MB embeddings, so it leaves GPU 0 empty and the split starts on GPU 1
@pytest.mark.parametrize("gpus", ["4x2GiB", "3x80GiB", "8x2GiB"])
def test_transformers_places_the_split_safe_sft_planned(checkpoint: Path, gpus: str) -> None:
    # swift's own --device_map auto: the user's choice, kept; safe-sft adds the balanced --max_memory
    plan = plan_json(
        "--assume-gpus", gpus, "--assume-ram", "64GiB", "--model", str(checkpoint), "--tuner_type", "lora",
        "--max_length", "2048", "--device_map", "auto", "--output_dir", str(checkpoint / "out"),
    )  # fmt: skip
    assert plan["strategy"] == "device_map", plan["strategy_reason"]
    env = plan["env"]
    assert isinstance(env, dict) and env["NPROC_PER_NODE"] == "1"
    split = plan["device_map"]
    assert isinstance(split, dict) and sum(split["layers"]) == LAYERS
    assert max(split["layers"]) < LAYERS  # a split: the budgets had once put every layer on the last GPU

    # ms-swift's own parsing of the argument (ModelArguments._init_max_memory: ast.literal_eval, then JSON)
    from swift.arguments.base_args.model_args import ModelArguments

    holder = SimpleNamespace(max_memory=plan["max_memory_arg"])
    ModelArguments._init_max_memory(holder)  # type: ignore[arg-type]
    assert holder.max_memory == dict(enumerate(split["max_memory"]))

    placed = transformers_places(checkpoint, holder.max_memory)
    per_gpu = [0] * len(split["layers"])
    for i in range(LAYERS):
        device = device_of(placed, f"model.layers.{i}")
        assert isinstance(device, int), f"layer {i} went to {device!r}"
        per_gpu[device] += 1
    assert per_gpu == split["layers"]
    assert device_of(placed, "model.embed_tokens") == split["embeddings_gpu"]
    assert device_of(placed, "lm_head") == split["head_gpu"]


def test_the_run_path_refuses_device_map_on_the_cpu(checkpoint: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "--layout", "device_map", "--model", str(checkpoint), "--use_cpu", "true",
         "--output_dir", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--layout device_map needs several GPUs" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
