"""Find the latest complete checkpoint under an output dir, swift's `v<N>-<timestamp>` run dirs included.

Complete means readable, judged from the bytes alone (no torch): trainer_state.json parses as a JSON
object; there are weights (model*.safetensors, adapter_model.safetensors, pytorch_model*.bin, or
DeepSpeed's `latest` naming its global_step*/ folder); every safetensors file's header parses, its
tensors' offsets cover the file's data exactly, and that data is not zeros throughout; every shard a
safetensors index names is there and holds every tensor the index maps to it; every torch file (.bin, .pt,
.pth) in zip format has its central directory, and none is empty; an optimizer.pt comes with its
scheduler.pt, and a DeepSpeed checkpoint holds every rank's ZeRO shards (no gap in the ranks, as many as
saved their rng state) and, under an NVMe optimizer offload, every rank's swapped state (offloaded_tensors);
trainer_state.json holds the whole-number global_step and train_batch_size transformers resumes from. A
checkpoint half-written by a kill, truncated by a full disk, emptied or zero-filled by a crash, or copied
without one of its files is skipped, with the reason.
This module only reads: it never deletes, moves or writes.
"""

from __future__ import annotations

import json
import math
import re
import stat
import struct
import zipfile
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.plan.ds_config import on_nvme, zero_section

_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_RUN_DIR_RE = re.compile(r"^v\d+-")
_WEIGHT_GLOBS = ("model*.safetensors", "adapter_model.safetensors", "pytorch_model*.bin", "adapter_model.bin")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    has_optimizer_state: bool
    deepspeed: str | None  # the --deepspeed value of the run that wrote it (from its args.json)
    zero_ranks: int | None = None  # the ranks whose DeepSpeed ZeRO optimizer states it holds (None: not ZeRO's)


_DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
    "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "C64": 8,
}  # fmt: skip
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit
# A file whose blocks never reached the disk (a crash before the page cache was written back) reads as
# zeros after a header that did. Trained weights are never zero throughout (norm weights, LoRA's A), so
# zeros at every one of these evenly spread samples prove it; zeros in its tail alone would not.
_ZERO_SAMPLES = 16
_ZERO_SAMPLE_BYTES = 4096
_ZIP_MAGIC = b"PK\x03\x04"


def safetensors_problem(path: Path, expected: Collection[str] = ()) -> str | None:
    """Why this safetensors file cannot be loaded, from its header and size; None when it can.
    `expected`: the tensors an index maps to this file, each of which its header must hold."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                return f"{path.name} is {size} bytes, shorter than a safetensors header"
            (length,) = struct.unpack("<Q", prefix)
            if length > min(_MAX_HEADER, size - 8):
                return f"{path.name}: its header claims {length} bytes, the file has {size}"
            raw = handle.read(length)
    except OSError as err:
        return f"{path.name} cannot be read ({err.strerror or err})"
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return f"{path.name}: its header is not JSON"
    if not isinstance(header, dict):
        return f"{path.name}: its header is not a JSON object"
    spans: list[tuple[int, int]] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return f"{path.name}: tensor {name!r} has no valid data_offsets"
        begin, end = offsets
        shape, width = info.get("shape"), _DTYPE_BYTES.get(str(info.get("dtype")))
        sized = isinstance(shape, list) and width is not None and all(isinstance(d, int) for d in shape)
        if sized and end - begin != math.prod(shape) * width:
            return f"{path.name}: tensor {name!r} spans {end - begin} bytes, its shape and dtype need more"
        spans.append((begin, end))
    covered = 0
    for begin, end in sorted(spans):
        if begin != covered or end < begin:
            return f"{path.name}: its tensors' data offsets overlap or leave gaps"
        covered = end
    data = size - 8 - length
    if covered != data:
        return f"{path.name}: its header describes {covered} bytes of tensor data, the file holds {data} (truncated?)"
    absent = sorted(set(expected) - header.keys())
    if absent:
        return f"{path.name} lacks {absent[0]!r}, which the index maps to it"
    if data and _zeros_throughout(path, 8 + length, data):
        return f"{path.name}: its tensor data is all zeros (written, but lost before it reached the disk?)"
    return None


def _zeros_throughout(path: Path, start: int, data: int) -> bool:
    """Whether the data region [start, start + data) reads as zeros at every sample (all of it if small)."""
    whole = data <= _ZERO_SAMPLES * _ZERO_SAMPLE_BYTES
    step = 0 if whole else (data - _ZERO_SAMPLE_BYTES) // (_ZERO_SAMPLES - 1)
    spans = [(start, data)] if whole else [(start + i * step, _ZERO_SAMPLE_BYTES) for i in range(_ZERO_SAMPLES)]
    try:
        with path.open("rb") as handle:
            for offset, count in spans:
                handle.seek(offset)
                if handle.read(count).strip(b"\0"):
                    return False
    except OSError:
        return False  # unreadable data is the loader's to report; the header was read
    return True


def torch_file_problem(path: Path) -> str | None:
    """Why a torch.save file (.bin, .pt, .pth) cannot be loaded; only the zip format's end can be checked."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
        if not magic:
            return f"{path.name} is empty"
        if magic != _ZIP_MAGIC:
            return None  # torch's legacy format: nothing more to check without unpickling
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except OSError as err:
        return f"{path.name} cannot be read ({err.strerror or err})"
    except zipfile.BadZipFile as err:
        return f"{path.name} is not a complete torch file ({err}; truncated?)"
    return None


def _json_problem(path: Path) -> str | None:
    try:
        mode = path.stat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a FIFO, a device: a read blocks or never ends
            return f"{path.name} is not a regular file"
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return f"{path.name} is missing"
    except OSError as err:
        return f"{path.name} cannot be read ({err.strerror or err})"
    except (ValueError, UnicodeDecodeError, RecursionError):
        return f"{path.name} is not valid JSON (empty, cut short, or nested too deep?)"
    return None if isinstance(value, dict) else f"{path.name} is not a JSON object"


def _trainer_state_problem(path: Path) -> str | None:
    """transformers resumes from the state's global_step and divides its train_batch_size (5.x's
    compare_trainer_and_checkpoint_args): a state without a whole number for either, `{}` or
    `{"global_step": 6}` say, stops every rank in Trainer._init_training_state."""
    state = json.loads(path.read_bytes())
    step = state.get("global_step")
    if type(step) is not int or step < 0:
        return f"{path.name} has no global_step (it holds {json.dumps(step)}): not a state transformers saved"
    if type(state.get("train_batch_size")) is not int:
        held = json.dumps(state.get("train_batch_size"))
        return f"{path.name} has no train_batch_size (it holds {held}): transformers stops on it as it resumes"
    named = checkpoint_step(path.parent)
    if named is not None and named != step:  # the trainer resumes at the state's step, whatever the name says
        return f"its name says step {named}, its {path.name} step {step} (renamed, copied or linked from another?)"
    return None


def unreadable(path: Path) -> str | None:
    """Why a checkpoint dir cannot be resumed from, or None when it is complete and readable."""
    problem = _json_problem(path / "trainer_state.json") or _trainer_state_problem(path / "trainer_state.json")
    if problem is not None:
        return problem
    try:
        files = [p for p in path.iterdir() if p.is_file()]
    except OSError as err:
        return f"it cannot be listed ({err.strerror or err})"
    weights = [p for p in files if any(p.match(pattern) for pattern in _WEIGHT_GLOBS)]
    latest = path / "latest"
    deepspeed_dir = None
    if latest.is_file():
        try:
            tag = latest.read_text().strip()
        except (OSError, UnicodeDecodeError):
            return "latest cannot be read"
        deepspeed_dir = path / tag if tag and "/" not in tag else None
        if deepspeed_dir is None or not deepspeed_dir.is_dir():
            return f"latest names {tag!r}, which is not there"
    if not weights and deepspeed_dir is None:
        return "no weights (model*.safetensors, adapter_model.*, pytorch_model*.bin, or DeepSpeed's latest)"
    indexed: dict[str, set[str]] = {}  # shard file name -> the tensors an index maps to it
    for index in (p for p in files if p.name.endswith(".safetensors.index.json")):
        problem = _json_problem(index)
        if problem is not None:
            return problem
        weight_map = json.loads(index.read_bytes()).get("weight_map")
        for tensor, shard in weight_map.items() if isinstance(weight_map, dict) else ():
            indexed.setdefault(str(shard), set()).add(str(tensor))
        missing = sorted(shard for shard in indexed if not (path / shard).is_file())
        if missing:
            return f"{index.name} names {missing[0]}, which is not there"
    for file in files:
        if file.suffix == ".safetensors":
            problem = safetensors_problem(file, indexed.get(file.name, ()))
        elif file.suffix in (".bin", ".pt", ".pth"):
            problem = torch_file_problem(file)
        else:
            continue
        if problem is not None:
            return problem
    if deepspeed_dir is not None:
        for file in sorted(deepspeed_dir.glob("*.pt")):
            problem = torch_file_problem(file)
            if problem is not None:
                return f"{deepspeed_dir.name}/{problem}"
        return _zero_shards_problem(path, deepspeed_dir, files) or _nvme_swap_problem(path, deepspeed_dir)
    return _optimizer_files_problem(path, files)


# transformers' optimizer files (Trainer._load_optimizer_and_scheduler): optimizer.pt, optimizer.bin, and the
# sharded `rank<r>-of-<n>-optimizer.pt` / `optimizer.pt_<r>` of FSDP and SageMaker model parallelism
_OPTIMIZER = re.compile(r"^(rank\d+-of-\d+-)?optimizer\.(pt|bin)(_\d+)?$")


# the end of a problem that leaves the weights whole: such a checkpoint is resumed weights only where no
# complete one is left (latest_complete)
LOST_OPTIMIZER = "the optimizer state was lost (a copy without its .pt files?)"


def _optimizer_files_problem(path: Path, files: Sequence[Path]) -> str | None:
    """Without DeepSpeed, transformers saves the optimizer and the scheduler together (neither under
    save_only_model) and loads them only together. An optimizer file without scheduler.pt would resume with
    Adam and the schedule started over, silently. A scheduler.pt alone, or no optimizer file where the run's
    args.json says save_only_model false, is a copy that lost the optimizer (a sync that left out the large
    .pt files): an older complete checkpoint is taken over it, and where none is, latest_complete still takes
    it, weights only. A checkpoint saved without its state (save_only_model, or no args.json to tell) is
    neither: it resumes weights only, and says so."""
    names = {file.name for file in files}
    optimizer = next((name for name in sorted(names) if _OPTIMIZER.match(name)), None)
    if optimizer is not None and "scheduler.pt" not in names:
        return f"{optimizer} without scheduler.pt: transformers would load neither, and restart Adam and the schedule"
    if optimizer is not None:
        return None
    if "scheduler.pt" in names:
        return f"scheduler.pt without its optimizer file: {LOST_OPTIMIZER}"
    if saved_args(path).get("save_only_model") is False:
        return f"no optimizer file, though it was saved with save_only_model false: {LOST_OPTIMIZER}"
    return None


_RNG_STATE = re.compile(r"^rng_state_(\d+)\.pth$")


def _zero_shards_problem(path: Path, deepspeed_dir: Path, files: Sequence[Path]) -> str | None:
    """Every rank saves its ZeRO shard (`zero_pp_rank_<r>_mp_rank_00_optim_states.pt`, and under ZeRO-3 its
    `..._model_states.pt`) and its rng_state_<r>.pth: a gap in the ranks, fewer shards than ranks saved their
    rng state, or fewer than the run's world size its args.json names, is a copy that lost a file. DeepSpeed
    would load it only into as many ranks, and safe-sft would resume it with the optimizer state reset."""
    saved = sum(1 for f in files if _RNG_STATE.match(f.name))
    args = saved_args(path)
    sharded = args.get("sequence_parallel_size") in (None, 1)  # sequence parallel ranks share ZeRO's partitions
    world = saved_count(args, "global_world_size") if sharded else None
    for kind in ("optim_states", "model_states"):
        ranks = _shard_ranks(deepspeed_dir.glob(f"*{kind}*"))
        if not ranks:
            continue
        gap = next((r for r in range(max(ranks) + 1) if r not in ranks), None)
        if gap is not None:
            last = max(ranks)
            return f"{deepspeed_dir.name} has no zero_pp_rank_{gap} {kind} file (a shard of the ranks 0 to {last})"
        if saved > len(ranks) and sharded:
            return f"{deepspeed_dir.name} holds {len(ranks)} rank(s)' {kind}, and {saved} ranks saved this checkpoint"
        if world is not None and len(ranks) < world:  # the last ranks' shards and rng states both lost
            return (
                f"{deepspeed_dir.name} holds {len(ranks)} rank(s)' {kind}, and its run had {world} "
                "(args.json's global_world_size)"
            )
    return None


_SWAP_RANK = re.compile(r"^rank(\d+)$")


def _nvme_swap_problem(path: Path, deepspeed_dir: Path) -> str | None:
    """Under an NVMe optimizer offload, each rank's optimizer state lives in its swap files: DeepSpeed copies
    them into `<tag>/offloaded_tensors/rank<NN>` before it writes `latest`, and a resume copies that folder
    back, failing where it is not there. A copy of the checkpoint that left out offloaded_tensors, or a
    rank's folder of it, or emptied one, cannot be resumed whole. With node-local storage the folders are
    numbered by local rank, so there only a gap is a loss."""
    config = saved_args(path).get("deepspeed")
    config = config if isinstance(config, dict) else {}
    swap = deepspeed_dir / "offloaded_tensors"
    if not swap.is_dir():
        if on_nvme(zero_section(config), "offload_optimizer"):
            return f"{deepspeed_dir.name} has no offloaded_tensors, and its run swapped the optimizer to NVMe"
        return None
    try:
        folders = {int(m.group(1)): d for d in swap.iterdir() if (m := _SWAP_RANK.match(d.name)) and d.is_dir()}
        empty = next((d.name for _, d in sorted(folders.items()) if not any(d.iterdir())), None)
    except OSError as err:
        return f"{deepspeed_dir.name}/offloaded_tensors cannot be listed ({err.strerror or err})"
    checkpoint = config.get("checkpoint")
    node_local = isinstance(checkpoint, dict) and checkpoint.get("use_node_local_storage") is True
    ranks = set(range(max(folders, default=-1) + 1))
    if not node_local:
        ranks |= _shard_ranks(deepspeed_dir.glob("*optim_states*"))
    gap = next((r for r in sorted(ranks) if r not in folders), None)
    if gap is not None or not folders:
        return f"{deepspeed_dir.name}/offloaded_tensors has no rank{gap or 0:02d} (a rank's NVMe optimizer state)"
    if empty is not None:
        return f"{deepspeed_dir.name}/offloaded_tensors/{empty} is empty (a rank's NVMe optimizer state)"
    return None


def missing_rng_states(path: Path) -> list[int]:
    """The ranks whose rng_state_<r>.pth a checkpoint lacks: below the world size its run wrote in args.json
    (global_world_size), or gaps below the highest saved. The trainer resumes such a rank with a fresh random
    state (it logs that at info level only): its dropout and other random draws are not an exact resume's (the
    data order is: the sampler draws it from its own seed)."""
    try:
        ranks = {int(m.group(1)) for f in path.iterdir() if (m := _RNG_STATE.match(f.name))}
    except OSError:
        return []
    world = saved_count(saved_args(path), "global_world_size") or 0
    wrote = world if world > 1 else 0
    if not ranks and not wrote:
        return []  # one process saves rng_state.pth, or nothing told of several
    return [r for r in range(max(wrote, max(ranks, default=-1) + 1)) if r not in ranks]


def is_complete(path: Path) -> bool:
    return path.is_dir() and unreadable(path) is None


_ZERO_RANK = re.compile(r"zero_pp_rank_(\d+)_")


def _shard_ranks(files: Iterable[Path]) -> set[int]:
    """The ranks whose ZeRO shards these are (`*zero_pp_rank_<r>_mp_rank_00_*.pt`, one per data-parallel rank)."""
    return {int(m.group(1)) for f in files if (m := _ZERO_RANK.search(f.name))}


def zero_ranks(path: Path) -> int | None:
    """How many ranks' ZeRO optimizer states a DeepSpeed checkpoint holds (one file per data-parallel rank:
    `*zero_pp_rank_<r>_mp_rank_00_optim_states.pt`); DeepSpeed loads them only into as many ranks."""
    return len(_shard_ranks(path.glob("global_step*/*optim_states*"))) or None


def _found(path: Path, step: int) -> Checkpoint:
    return Checkpoint(path, step, _has_optimizer_state(path), _deepspeed_of(path), zero_ranks(path))


def _has_optimizer_state(path: Path) -> bool:
    if (path / "optimizer.pt").is_file() or any(path.glob("optimizer*.safetensors")):
        return True
    return any(path.glob("global_step*/*optim_states*"))


def saved_args(path: Path) -> dict[str, object]:
    """The arguments of the run that saved a checkpoint, as swift wrote them (its args.json, in the checkpoint
    or its run dir: the first there is theirs); {} where none can be read."""
    for args_file in (path / "args.json", path.parent / "args.json"):
        if args_file.is_file():
            try:
                args = json.loads(args_file.read_bytes())
            except (OSError, ValueError, RecursionError):
                return {}
            return args if isinstance(args, dict) else {}
    return {}


def saved_count(args: Mapping[str, object], key: str) -> int | None:
    """A positive whole number in a run's args.json (saved_args): a batch size, a world size; None where it is
    missing or not one (a bool is no count)."""
    value = args.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _deepspeed_of(path: Path) -> str | None:
    value = saved_args(path).get("deepspeed")
    return value if isinstance(value, str) else (json.dumps(value) if value else None)


def run_dirs(output_dir: Path) -> list[Path]:
    """swift's run dirs under output_dir (v<N>-<timestamp>, one per run with add_version), by name."""
    if not output_dir.is_dir():
        return []
    return sorted(p for p in output_dir.iterdir() if p.is_dir() and is_version_dir(p.name))


def saved_after(checkpoint: Path, step: int) -> Checkpoint | None:
    """The newest complete checkpoint saved after `checkpoint` (at `step`) by a later run that went on from
    it: at a higher step in its own dir, or in a swift run dir of a higher version beside it (v<N>-<time>,
    N counting up run by run). None when there is none. Steps and names only, no clock."""
    run_dir = checkpoint.parent
    roots = [run_dir]
    version = _version(run_dir.name)
    if version is not None:
        roots += [d for d in run_dirs(run_dir.parent) if (_version(d.name) or -1) > version]
    found = [c for root in roots if (c := latest_complete(root)[0]) is not None and c.step > step]
    return max(found, key=lambda c: c.step, default=None)


def is_version_dir(name: str) -> bool:
    """A run dir `v<N>-<time>` that swift (add_version) or safe-sft (a fresh --output_dir) names."""
    return bool(_RUN_DIR_RE.match(name))


def _version(name: str) -> int | None:
    head = name.split("-", 1)[0]
    return int(head[1:]) if is_version_dir(name) and head[1:].isdigit() else None


def later_by_name(chosen: Path) -> Path | None:
    """A complete checkpoint at a higher step in a run dir beside `chosen`'s whose swift version (v<N>) is
    higher: newer by swift's own numbering, where the files' times (which `latest_complete` goes by) say
    otherwise, as after a copy that did not keep them (cp -r, rsync without -t). None where there is none."""
    run, step = chosen.parent, checkpoint_step(chosen)
    version = _version(run.name)
    if version is None or step is None:
        return None
    later = [
        path
        for path in candidate_dirs(run.parent)
        if (v := _version(path.parent.name)) is not None and v > version and (checkpoint_step(path) or 0) > step
    ]
    for path in sorted(later, key=lambda p: checkpoint_step(p) or 0, reverse=True):
        if unreadable(path) is None:
            return path
    return None


def candidate_dirs(output_dir: Path) -> list[Path]:
    """checkpoint-N dirs directly in output_dir and in its v*-* run dirs. A run dir this user cannot list (a
    colleague's, mode 700, in a shared output dir) holds none of this user's: swift lists only names too."""
    if not output_dir.is_dir():
        return []
    found = []
    for root in [output_dir, *run_dirs(output_dir)]:
        try:
            entries = list(root.iterdir())
        except OSError:
            continue
        found += [c for c in entries if c.is_dir() and _CHECKPOINT_RE.match(c.name)]
    return found


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


def checkpoint_step(path: Path) -> int | None:
    """N of a `checkpoint-N` dir, else None."""
    match = _CHECKPOINT_RE.match(path.name)
    return int(match.group(1)) if match else None


def latest_complete(
    output_dir: Path,
    *,
    before: Snapshot | None = None,
    set_aside: Collection[Path] = (),
) -> tuple[Checkpoint | None, dict[Path, str]]:
    """(the newest complete checkpoint, the newer ones that were skipped as unreadable, with why).

    Newest: of the run that saved last (the output dir's own checkpoints, with --add_version false, or a
    v<N>-<time> run dir's: whichever holds the checkpoint whose trainer_state.json was written last) and
    holds a complete one, the highest step. Every experiment on a model shares swift's default output
    dir: an older run's later step is another experiment's, not this one's.

    With `before`, a checkpoint that was already there and is unchanged (an earlier run's) is left out.
    `set_aside` (checkpoints that failed to load in an attempt) are left out too. The checkpoints' own
    times are compared with each other, never with this machine's clock: on a shared filesystem the
    server's clock stamps them.
    """
    candidates: list[tuple[Path, int, float, Path]] = []  # (its run, step, mtime, the checkpoint)
    for path in candidate_dirs(output_dir):
        if path in set_aside:
            continue
        if before is not None and before.get(path) == _signature(path):
            continue
        match = _CHECKPOINT_RE.match(path.name)
        assert match is not None
        try:
            candidates.append((path.parent, int(match.group(1)), _saved_at(path), path))
        except OSError:
            continue
    last_saved: dict[Path, tuple[float, int]] = {}  # a run -> (when it last saved, its v<N>)
    for run, _, mtime, _ in candidates:
        version = _version(run.name) if run != output_dir else None
        last_saved[run] = max(last_saved.get(run, (mtime, -1)), (mtime, -1 if version is None else version))
    skipped: dict[Path, str] = {}
    # the newest that lost only its optimizer state, and the newer ones skipped before it
    weights_only: tuple[Checkpoint, dict[Path, str]] | None = None
    # newest first: the run that saved last, its highest step first; stop at the first readable one
    for _, step, _, path in sorted(candidates, key=lambda c: (last_saved[c[0]], c[1], c[2]), reverse=True):
        problem = unreadable(path)
        if problem is None:
            return _found(path, step), skipped
        if weights_only is None and problem.endswith(LOST_OPTIMIZER):
            weights_only = (_found(path, step), dict(skipped))
        skipped[path] = problem
    # no complete one: the weights are whole, better than step 0; resumed weights only, and said so
    return weights_only if weights_only is not None else (None, skipped)


def _saved_at(path: Path) -> float:
    """When the trainer saved this checkpoint: its trainer_state.json's time (the dir's own changes when
    anything is added later: `swift infer` writes its results into the checkpoint it evaluates)."""
    try:
        return (path / "trainer_state.json").stat().st_mtime
    except OSError:  # none, or none this user may see (a dir of mode 000): the dir's own, then it is named
        return path.stat().st_mtime


def zero_stage(deepspeed: str | None) -> int | None:
    """The ZeRO stage of a --deepspeed value: a name (zero3_offload), a config's JSON text, or None."""
    if not deepspeed:
        return None
    match = re.match(r"^zero(\d)", deepspeed)
    if match:
        return int(match.group(1))
    try:
        config = json.loads(deepspeed)
    except (ValueError, RecursionError):
        return None
    stage = config.get("zero_optimization", {}).get("stage") if isinstance(config, dict) else None
    return stage if isinstance(stage, int) else None


# Frames and errors of loading a checkpoint (transformers, safetensors, torch, DeepSpeed): an attempt that
# resumed and died with one of these before its first new step could not load its checkpoint. The state
# file is named only on an error's line: transformers warns about it on every resume with other settings.
_LOAD_FAILURE = re.compile(
    r"_load_from_checkpoint|load_from_json|_load_rng_state|_load_optimizer_and_scheduler|load_checkpoint|"
    r"SafetensorError|safe_open|PytorchStreamReader|BadZipFile|UnpicklingError|Error\b.*trainer_state\.json"
)
# the exception a traceback ends in, after any `[rankN]:` prefix: `ValueError: ...`, `torch.x.SomeError: ...`
_EXCEPTION = re.compile(r"^(?:\[rank\d+\]:)?\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b:")


def load_failure_line(lines: Sequence[str]) -> str | None:
    """What shows a failed checkpoint load, if anything: the exception that ended the load's traceback (the
    line that says what was wrong), else the loading frame or error line itself."""
    found = next((i for i, line in enumerate(lines) if _LOAD_FAILURE.search(line)), None)
    if found is None:
        return None
    error = next((line for line in lines[found:] if _EXCEPTION.search(line)), lines[found])
    return error.strip()


def checkpoint_problem(path: Path) -> str | None:
    """Why a checkpoint the user named (--resume_from_checkpoint) cannot be resumed from; None when it can.

    Checked before launch, so that swift does not fail on it after the model has loaded.
    """
    if not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is not a directory"
    why = unreadable(path)
    if why is not None:
        return f"is not a complete, readable checkpoint: {why}"
    return None


def checkpoint_at(path: Path, step: int) -> Checkpoint | None:
    """The checkpoint at a known path (a requeued job's), or None when it is not complete."""
    if not is_complete(path):
        return None
    return _found(path, step)
