"""Find the shipped DeepSpeed configs, installed (package data) or in a source checkout.

The wheel maps the top-level deepspeed_configs/ to the package `launcher.deepspeed_configs`; a checkout
run as `python -m launcher` finds the folder beside the package.
"""

from __future__ import annotations

import json
from pathlib import Path

from launcher.errors import SafeSftError

CONFIG_NAMES = ("zero2", "zero3", "zero3_offload")


def config_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "deepspeed_configs", here.parent / "deepspeed_configs"):
        if (candidate / "zero2.json").is_file():
            return candidate
    raise SafeSftError("the DeepSpeed configs shipped with safe-sft are missing", "reinstall safe-sft")


def write_no_pin_offload_config(path: Path) -> Path:
    """zero3_offload.json with pin_memory off (for a memlock limit that cannot be raised), at `path`.

    Never overwrites a file that differs: an existing identical file is reused.
    """
    config = json.loads((config_dir() / "zero3_offload.json").read_text())
    for section in ("offload_optimizer", "offload_param"):
        config["zero_optimization"][section]["pin_memory"] = False
    text = json.dumps(config, indent=2) + "\n"
    if path.exists():
        if path.read_text() == text:
            return path
        raise SafeSftError(f"{path} exists and differs from the config safe-sft would write", "move it away")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
