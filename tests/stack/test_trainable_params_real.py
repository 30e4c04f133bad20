"""What real LLaMA-Factory and real `swift sft` train, against what safe-sft's plan counts for the same
arguments.

The plan is trainer-blind: LLaMA-Factory's backend reads `finetuning_type` as swift's --tuner_type. It had
not, and every LLaMA-Factory config was estimated as LoRA, a full fine-tune without its gradients and
optimizer states. Here real LLaMA-Factory 0.9.5 (its own environment) loads the tiny model for one step
with each finetuning_type and logs its count ("trainable params: N || all params: M"); the plan's Adam
states under DDP, twice a float32 weight's bytes for each trained parameter, give safe-sft's count of the
same config.

swift's full tuning freezes the first --freeze_parameters_ratio of the parameters and the modules
--freeze_parameters names; the plan had counted every parameter as trained. Real `swift sft` logs its
count ("0.1151M Params (0.0576M Trainable"), to a tenth of a thousand.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stack.test_backends_real import LF_PYTHON, LF_VENV, llamafactory_config

COUNT = re.compile(r"trainable params: ([\d,]+) \|\| all params: ([\d,]+)")


def _llamafactory_trains(config: Path, out: Path, *overrides: str) -> tuple[int, int]:
    done = subprocess.run(
        [str(LF_VENV / "bin" / "llamafactory-cli"), "train", str(config), *overrides, "max_steps=1",
         "save_steps=100", f"output_dir={out}"],
        capture_output=True, text=True, timeout=300, cwd=out.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = COUNT.search(done.stderr + done.stdout)
    assert found, done.stderr[-2000:]
    trained, total = (int(group.replace(",", "")) for group in found.groups())
    return trained, total


def _plan_counts(config: Path, *overrides: str) -> int:
    return _counted([str(LF_PYTHON), "-m", "launcher", "plan", "--json", "--assume-gpus", "1x80GiB", "--backend",
                     "llamafactory", str(config), "use_cpu=false", *overrides])  # fmt: skip


def _counted(plan_argv: list[str]) -> int:
    """The parameters the plan gives Adam's states under DDP: the tiny model is float32, so each trained
    parameter's two moments take twice the bytes its weight does (the plan's gpu_weights, every parameter's)."""
    done = subprocess.run(plan_argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    assert plan["model"]["dtype"] == "F32"
    parts, total = plan["estimates"]["ddp"]["parts"], int(plan["model"]["total_params"])
    return round(parts["gpu_optimizer"] / (2 * parts["gpu_weights"]) * total)


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(("finetuning_type=full",), id="full"),
        pytest.param(("finetuning_type=freeze",), id="freeze-last-2"),
        pytest.param(("finetuning_type=freeze", "freeze_trainable_layers=-1"), id="freeze-first-1"),
        pytest.param(("finetuning_type=lora",), id="lora-all"),
        pytest.param(("finetuning_type=lora", "lora_target=q_proj,v_proj", "lora_rank=4"), id="lora-qv"),
    ],
)
def test_the_plan_counts_the_parameters_llamafactory_trains(
    tiny: dict[str, object], tmp_path: Path, overrides: tuple[str, ...]
) -> None:
    config = llamafactory_config(tiny, tmp_path / "unused", tmp_path / "lf")
    trained, _total = _llamafactory_trains(config, tmp_path / "out", *overrides)
    counted = _plan_counts(config, *overrides)
    # freeze: the plan's layer is the decoder's share, the final norm's few weights spread over the layers
    assert counted == pytest.approx(trained, rel=0.01), (counted, trained)


SWIFT = ["--model_type", "qwen2", "--template", "qwen", "--check_model", "false", "--tuner_type", "full"]
SWIFT_COUNT = re.compile(r"Params \(([\d.]+)M Trainable")


@pytest.mark.parametrize(
    "frozen",
    [
        pytest.param(("--freeze_parameters_ratio", "0.5"), id="ratio"),
        pytest.param(("--freeze_parameters", "model.embed_tokens"), id="embeddings"),
        pytest.param(("--freeze_parameters_ratio", "0.5", "--freeze_parameters", "model.embed_tokens"), id="both"),
    ],
)
def test_the_plan_counts_the_parameters_swift_trains_of_a_partly_frozen_full_tuning(
    tiny: dict[str, object], tmp_path: Path, frozen: tuple[str, ...]
) -> None:
    args = ["--model", str(tiny["model"]), "--dataset", str(tiny["dataset"]), *SWIFT, *frozen]
    swift = str(Path(sys.executable).parent / "swift")
    done = subprocess.run(
        [swift, "sft", *args, "--use_cpu", "true", "--report_to", "none", "--max_steps", "1",
         "--dataloader_num_workers", "0", "--output_dir", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = SWIFT_COUNT.search(done.stdout + done.stderr)
    assert found, done.stderr[-2000:]
    trained = float(found.group(1)) * 1e6
    counted = _counted([sys.executable, "-m", "launcher", "plan", "--json", "--assume-gpus", "1x80GiB", *args])
    # swift freezes whole tensors up to the ratio: fewer than the share, by less than one tensor
    assert counted == pytest.approx(trained, rel=0.03), (counted, trained)
