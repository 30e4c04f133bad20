"""Find the latest complete checkpoint under an output dir, swift's `v<N>-<timestamp>` run dirs included.

Complete means trainer_state.json beside the weights (model*.safetensors, adapter_model.safetensors,
pytorch_model*.bin, or DeepSpeed's `latest` with its global_step*/ folder). A checkpoint half-written by
a kill lacks one of them and is skipped. This module only reads: it never deletes, moves or writes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_RUN_DIR_RE = re.compile(r"^v\d+-")
_WEIGHT_GLOBS = ("model*.safetensors", "adapter_model.safetensors", "pytorch_model*.bin", "adapter_model.bin")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    has_optimizer_state: bool
    deepspeed: str | None  # the --deepspeed value of the run that wrote it (from its args.json)


def is_complete(path: Path) -> bool:
    if not (path / "trainer_state.json").is_file():
        return False
    if any(any(path.glob(pattern)) for pattern in _WEIGHT_GLOBS):
        return True
    latest = path / "latest"
    return latest.is_file() and (path / latest.read_text().strip()).is_dir()


def _has_optimizer_state(path: Path) -> bool:
    if (path / "optimizer.pt").is_file() or any(path.glob("optimizer*.safetensors")):
        return True
    return any(path.glob("global_step*/*optim_states*"))


def _deepspeed_of(path: Path) -> str | None:
    for args_file in (path / "args.json", path.parent / "args.json"):
        if args_file.is_file():
            try:
                value = json.loads(args_file.read_text()).get("deepspeed")
            except (OSError, ValueError):
                return None
            return value if isinstance(value, str) else (json.dumps(value) if value else None)
    return None


def run_dirs(output_dir: Path) -> list[Path]:
    """swift's run dirs under output_dir (v<N>-<timestamp>, one per run with add_version), by name."""
    if not output_dir.is_dir():
        return []
    return sorted(p for p in output_dir.iterdir() if p.is_dir() and _RUN_DIR_RE.match(p.name))


def candidate_dirs(output_dir: Path) -> list[Path]:
    """checkpoint-N dirs directly in output_dir and in its v*-* run dirs."""
    if not output_dir.is_dir():
        return []
    roots = [output_dir, *run_dirs(output_dir)]
    return [c for root in roots for c in root.iterdir() if c.is_dir() and _CHECKPOINT_RE.match(c.name)]


Snapshot = dict[Path, tuple[int, int]]  # checkpoint dir -> (its mtime, its trainer_state.json's mtime)


def _signature(path: Path) -> tuple[int, int]:
    state = path / "trainer_state.json"
    try:
        return path.stat().st_mtime_ns, state.stat().st_mtime_ns if state.is_file() else 0
    except OSError:
        return 0, 0


def snapshot(output_dir: Path) -> Snapshot:
    """The checkpoint dirs there now, as they are: taken before a run starts, to tell an earlier run's apart."""
    return {path: _signature(path) for path in candidate_dirs(output_dir)}


def latest_complete(
    output_dir: Path, *, before: Snapshot | None = None, also: Path | None = None
) -> tuple[Checkpoint | None, list[Path]]:
    """(the newest complete checkpoint, the incomplete ones that were skipped).

    With `before`, a checkpoint that was already there and is unchanged (an earlier run's) is left out,
    except `also` (the checkpoint this run itself started from). No clock is compared: on a shared
    filesystem the server's clock stamps the files.
    """
    complete: list[tuple[int, float, Path]] = []
    skipped: list[Path] = []
    for path in candidate_dirs(output_dir):
        if before is not None and path != also and before.get(path) == _signature(path):
            continue
        match = _CHECKPOINT_RE.match(path.name)
        assert match is not None
        if is_complete(path):
            complete.append((int(match.group(1)), path.stat().st_mtime, path))
        else:
            skipped.append(path)
    if not complete:
        return None, skipped
    step, _, path = max(complete)
    return Checkpoint(path, step, _has_optimizer_state(path), _deepspeed_of(path)), skipped


def zero_stage(deepspeed: str | None) -> int | None:
    """The ZeRO stage of a --deepspeed value: a name (zero3_offload), a config's JSON text, or None."""
    if not deepspeed:
        return None
    match = re.match(r"^zero(\d)", deepspeed)
    if match:
        return int(match.group(1))
    try:
        config = json.loads(deepspeed)
    except ValueError:
        return None
    stage = config.get("zero_optimization", {}).get("stage") if isinstance(config, dict) else None
    return stage if isinstance(stage, int) else None


def checkpoint_at(path: Path, step: int) -> Checkpoint | None:
    """The checkpoint at a known path (a requeued job's), or None when it is not complete."""
    if not is_complete(path):
        return None
    return Checkpoint(path, step, _has_optimizer_state(path), _deepspeed_of(path))
