"""DeepSpeed config files: find the shipped ones, read the user's, write derived copies.

The wheel maps the top-level deepspeed_configs/ to the package `launcher.deepspeed_configs`; a checkout
run as `python -m launcher` finds the folder beside the package.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path
from typing import Any

from launcher.errors import SafeSftError
from launcher.paths import is_file
from launcher.plan.ds_config import (
    RUNG_NAMES,
    JsonObject,
    UserConfig,
    canonical_text,
    lacks_batch_size,
    nvme_problem,
    stage_problem,
)
from launcher.swift_json import as_swift_repairs

CONFIG_NAMES = ("zero2", "zero3", "zero3_offload")  # shipped in deepspeed_configs/


def config_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "deepspeed_configs", here.parent / "deepspeed_configs"):
        if (candidate / "zero2.json").is_file():
            return candidate
    raise SafeSftError("the DeepSpeed configs shipped with safe-sft are missing", "reinstall safe-sft")


def load_templates() -> dict[str, JsonObject]:
    """The shipped configs by rung name: zero2, zero3, zero3_offload."""
    folder = config_dir()
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in CONFIG_NAMES}


def read_user_deepspeed(value: str | None, repair: bool = False, names: bool = True) -> UserConfig | None:
    """The user's --deepspeed file or inline JSON, read once; None for swift's names or no DeepSpeed.
    `repair`: inline JSON as swift reads it (launcher.swift_json), single quotes and all. `names`: the trainer
    takes swift's names (zero2, ...) too, so a fix may offer them (LLaMA-Factory's and a script's take a file)."""
    if not value or value in RUNG_NAMES:
        return None
    path = Path(value)
    offer = "pass one of zero2, zero3, zero3_offload" if names else "give the path of a DeepSpeed JSON config"
    fix = f"fix it, or {offer}"
    named = is_file(path)
    try:
        config = _finite_json(path.read_text() if named else as_swift_repairs(value) if repair else value)
    except _NotFinite as exc:
        raise SafeSftError(f"--deepspeed {value}: {exc} is no number DeepSpeed can use", fix) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        if named:
            why = exc or "nested too deep"
            raise SafeSftError(f"--deepspeed {value}: not a readable JSON file ({why})", fix) from None
        nor = f", no inline JSON and none of {', '.join(RUNG_NAMES)}" if names else " and no inline JSON"
        raise SafeSftError(
            f"--deepspeed {value!r} is no file{nor}", f"check the path (relative to where safe-sft runs), or {offer}"
        ) from None
    stem = path.stem if named else "inline"
    if not isinstance(config, dict):
        raise SafeSftError(f"--deepspeed {value}: the JSON is not an object", fix)
    problem = stage_problem(config)
    if problem:
        raise SafeSftError(f"--deepspeed {value}: {problem}", 'write "stage": 0, 1, 2 or 3 in "zero_optimization"')
    nvme = nvme_problem(config)
    if nvme:
        raise SafeSftError(
            f"--deepspeed {value}: {nvme}: DeepSpeed takes it, then fails in every rank as it builds the model "
            "or its optimizer",
            'add "nvme_path": a folder on the NVMe disk of every node, or set "device": "cpu"',
        )
    if lacks_batch_size(config):
        raise SafeSftError(
            f"--deepspeed {value}: sets neither train_micro_batch_size_per_gpu nor train_batch_size "
            "(DeepSpeed refuses to start)",
            'add "train_micro_batch_size_per_gpu": "auto" to it',
        )
    return UserConfig(stem=stem, config=config)


class _NotFinite(ValueError):
    """NaN, Infinity, a number too large for a float (1e400, which json reads as inf) or for a 64-bit int."""


def _reject(text: str) -> float:
    raise _NotFinite(text)


def _finite_float(text: str) -> float:
    number = float(text)
    return number if math.isfinite(number) else _reject(text)


def _bounded_int(text: str) -> int:
    number = int(text)
    return number if abs(number) < 2**63 else int(_reject(text))


def _finite_json(text: str) -> Any:
    """JSON with finite numbers only: DeepSpeed's sizes and counts become ints, and int(inf) fails."""
    return json.loads(text, parse_constant=_reject, parse_float=_finite_float, parse_int=_bounded_int)


def write_config(path: Path, config: JsonObject) -> Path:
    """Write a derived DeepSpeed config at `path`, once: an identical file is reused, a differing one is an error.

    Every node of a multi-node run writes the same file to the shared output dir: the content goes to a
    private temporary file first and is linked into place, so no node ever reads a half-written copy.
    """
    text = canonical_text(config)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        staged.write_text(text)
        try:
            os.link(staged, path)
        except FileExistsError:
            pass  # another node linked it first: compared below
        finally:
            staged.unlink()
    if path.read_text() != text:
        raise SafeSftError(f"{path} exists and differs from the config safe-sft would write", "move it away")
    return path
