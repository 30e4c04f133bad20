"""A DeepSpeed config as JSON: where it stands on the ZeRO ladder, and its copy for another rung.

Pure. A user's own config (a file or inline JSON given to `--deepspeed`) joins the ladder like ours:
`rung_of` names its place (zero2, zero3_offload, ...), and `for_rung` keeps everything the user set
except what the rung decides (the stage and which offload sections there are, from the rung's shipped
template; an offload section the user wrote keeps its device, NVMe included, and its settings) and the
batch sizes, which become "auto" so transformers fills them from the arguments the ladder changes (an
explicit value that disagrees is an error there).
"""

from __future__ import annotations

import copy
import hashlib
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

JsonObject = dict[str, Any]

RUNG_NAMES = ("zero0", "zero1", "zero2", "zero2_offload", "zero3", "zero3_offload")  # also swift's own names
OFFLOAD_SECTIONS = ("offload_optimizer", "offload_param")
BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")
OFFLOAD_DEVICES = ("cpu", "nvme")
# DeepSpeed's deprecated spellings (deepspeed/runtime/zero/config.py), still in committed configs: `true`
# offloads to the host as the section it names would. A copy for another rung drops them with the user's
# offload sections, since DeepSpeed refuses a config that spells one both ways.
LEGACY_OFFLOAD = {"offload_optimizer": "cpu_offload", "offload_param": "cpu_offload_param"}
LEGACY_OFFLOAD_KEYS = (*LEGACY_OFFLOAD.values(), "cpu_offload_use_pin_memory")
# The ZeRO keys DeepSpeed takes under two names (a field and its alias, or a deprecated name and its
# replacement: deepspeed/runtime/zero/config.py; tests/unit/test_ds_config.py holds this to DeepSpeed's own
# model), each -> the name this module reads. A config may write either (axolotl's and LLaVA's drop the
# `stage3_` prefix), and DeepSpeed refuses both together: a rung's copy keeps the user's spelling only.
ZERO_ALIASES = {
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "param_persistence_threshold": "stage3_param_persistence_threshold",
    "model_persistence_threshold": "stage3_model_persistence_threshold",
    "max_live_parameters": "stage3_max_live_parameters",
    "max_reuse_distance": "stage3_max_reuse_distance",
    "gather_16bit_weights_on_model_save": "stage3_gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save": "stage3_gather_16bit_weights_on_model_save",
    "module_granularity_threshold": "stage3_module_granularity_threshold",
    "use_all_reduce_for_fetch_params": "stage3_use_all_reduce_for_fetch_params",
    "allgather_sequential": "stage3_allgather_sequential",
}


DEEPSPEED_VERSION = "0.19"  # the DeepSpeed whose model ZERO_KEYS lists (pyproject's lowest; 0.19.8 read)
# Every key the ZeRO section of DeepSpeed 0.19 takes (its fields and their aliases): it refuses any other,
# in every rank at start (tests/unit/test_ds_config.py holds this to DeepSpeed's own model).
ZERO_KEYS = frozenset(
    {
        "allgather_bucket_size", "allgather_partitions", "compute_grad_norm", "contiguous_gradients",
        "elastic_checkpoint", "enable_sanity_checks", "ignore_unused_parameters", "leaf_module", "legacy_stage1",
        "load_from_fp32_weights", "log_trace_cache_warnings", "memory_efficient_linear", "offload_optimizer",
        "offload_param", "overlap_comm", "override_module_apply", "parameter_alignment",
        "pipeline_loading_checkpoint", "reduce_bucket_size", "reduce_scatter", "round_robin_gradients",
        "save_muon_momentum_buffer_in_memory", "stage", "sub_group_size", "use_multi_rank_bucket_allreduce",
        "zenflow", "zero_hpz_partition_size", "zero_quantized_gradients", "zero_quantized_nontrainable_weights",
        "zero_quantized_weights", *LEGACY_OFFLOAD_KEYS, *ZERO_ALIASES, *ZERO_ALIASES.values(),
    }
)  # fmt: skip


def unknown_zero_key_warnings(config: Mapping[str, Any]) -> list[str]:
    """A warning for each ZeRO key of the user's config that DeepSpeed does not take, with the known key it
    most looks like (a warning, not an error: another DeepSpeed version may take it)."""
    unknown = [key for key in zero_section(config) if key not in ZERO_KEYS]
    if not unknown:
        return []
    import difflib  # only for a config that has such a key

    warnings = []
    for key in unknown:
        like = difflib.get_close_matches(key, ZERO_KEYS, n=1, cutoff=0.8)
        fix = f"did you mean {like[0]!r}?" if like else "remove it"
        warnings.append(
            f"--deepspeed config: DeepSpeed {DEEPSPEED_VERSION} takes no zero_optimization key {key!r} and stops every "
            f"rank at start with it: {fix}"
        )
    return warnings


def nvme_sections(config: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The ZeRO offload sections of a config that name NVMe as their device, by name."""
    zero = zero_section(config)
    found = [(name, zero.get(name)) for name in OFFLOAD_SECTIONS]
    return [
        (name, section) for name, section in found if isinstance(section, Mapping) and section.get("device") == "nvme"
    ]


def nvme_problem(config: Mapping[str, Any]) -> str | None:
    """An NVMe offload section without its nvme_path under ZeRO-3: DeepSpeed takes the config, then fails in
    every rank (zero.Init's assertion for the parameters; joining None to its swap folder's name for the
    optimizer, once the model is loaded). None where there is none."""
    if _stage_number(zero_section(config).get("stage", 0)) != 3:
        return None
    for name, section in nvme_sections(config):
        if not section.get("nvme_path"):
            return f'"{name}" swaps to NVMe ("device": "nvme") but names no "nvme_path"'
    return None


def nvme_below_zero3_warnings(config: Mapping[str, Any]) -> list[str]:
    """ZeRO 1 and 2 read an NVMe device as the host's: the state lands in host RAM, not on the NVMe disk."""
    if _stage_number(zero_section(config).get("stage", 0)) == 3:
        return []
    return [
        f'--deepspeed config: "{name}" names NVMe, which ZeRO stage 1 and 2 do not swap to: DeepSpeed offloads it to '
        "host RAM instead (its nvme_path unused); only stage 3 swaps to NVMe"
        for name, _ in nvme_sections(config)
    ]


def zero_key(name: str) -> str:
    """A ZeRO key's one name here, whichever of DeepSpeed's names a config wrote."""
    return ZERO_ALIASES.get(name, name)


@dataclass(frozen=True)
class UserConfig:
    """The user's own --deepspeed config (the argv keeps the value as given): a name for copies, its JSON."""

    stem: str  # the file's stem, or "inline"
    config: JsonObject

    @property
    def rung(self) -> str:
        return rung_of(self.config)


def zero_section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    section = config.get("zero_optimization")
    return section if isinstance(section, Mapping) else {}


def offloaded(zero: Mapping[str, Any], name: str) -> bool:
    """Whether a ZeRO section offloads `name` (offload_optimizer or offload_param) to the host or NVMe,
    in either spelling."""
    section = zero.get(name)
    if isinstance(section, Mapping):
        return section.get("device") in OFFLOAD_DEVICES
    return zero.get(LEGACY_OFFLOAD[name]) is True


def on_nvme(zero: Mapping[str, Any], name: str) -> bool:
    """Whether a ZeRO section swaps `name` (offload_optimizer or offload_param) to NVMe."""
    section = zero.get(name)
    return isinstance(section, Mapping) and section.get("device") == "nvme"


def offloads(config: Mapping[str, Any]) -> bool:
    """True when the config offloads the optimizer or the parameters to the host (or NVMe)."""
    zero = zero_section(config)
    return any(offloaded(zero, name) for name in OFFLOAD_SECTIONS)


def stage_problem(config: Mapping[str, Any]) -> str | None:
    """Why the config's ZeRO section or stage cannot be placed on the ladder; None when it can.

    DeepSpeed's own validation takes stages 0 to 3 as integers, whole floats or digit strings; anything
    else (7, "two", true) must not be guessed at (it used to be read as zero0).
    """
    if "zero_optimization" in config and not isinstance(config["zero_optimization"], Mapping):
        return f'"zero_optimization": {json.dumps(config["zero_optimization"])} is not an object'
    stage = zero_section(config).get("stage", 0)
    if _stage_number(stage) is None:
        return f'"stage": {json.dumps(stage)} is not a ZeRO stage (0, 1, 2 or 3)'
    return None


def _stage_number(stage: Any) -> int | None:
    if isinstance(stage, bool):
        return None
    if isinstance(stage, float) and stage.is_integer():
        stage = int(stage)
    if isinstance(stage, int) and 0 <= stage <= 3:
        return stage
    if isinstance(stage, str) and stage.strip() in ("0", "1", "2", "3"):
        return int(stage)
    return None


def rung_of(config: Mapping[str, Any]) -> str:
    """The ladder name of a config: zero0, zero1, zero2, zero2_offload, zero3 or zero3_offload."""
    stage = _stage_number(zero_section(config).get("stage", 0)) or 0  # stage_problem has refused the rest
    if offloads(config):  # below stage 2 too: its next rung must keep the offload (zero3_offload)
        return "zero3_offload" if stage == 3 else "zero2_offload"
    return f"zero{stage}"


def estimated_as(rung: str) -> str:
    """The planner's strategy under which a config of this rung is estimated: ZeRO 0 to 2, offload or not, keep
    every 16-bit weight on each GPU as zero2 does; the config's own stage and offload sections say the rest."""
    return rung if rung in ("zero3", "zero3_offload") else "zero2"


def lacks_batch_size(config: Mapping[str, Any]) -> bool:
    """DeepSpeed refuses a config with neither batch size, and transformers fills only the keys present."""
    return "train_micro_batch_size_per_gpu" not in config and "train_batch_size" not in config


def batch_disagreement(config: Mapping[str, Any], micro_batch: int, grad_accum: int, world_size: int) -> str | None:
    """A literal batch value of the config that the run's own batch contradicts (transformers refuses the
    config in every rank then: "Please correct the following DeepSpeed config values that mismatch
    TrainingArguments"), as `key value != run's`; None when every literal agrees or is "auto"."""
    runs = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "train_batch_size": micro_batch * grad_accum * world_size,
    }
    for key, value in runs.items():
        given = config.get(key)
        if given is not None and given != "auto" and given != value:
            return f"{key} {json.dumps(given)} != {value}"
    return None


def for_rung(base: Mapping[str, Any], template: Mapping[str, Any], *, pin_memory: bool) -> JsonObject:
    """`base` moved to the template's rung: its stage and offload sections (where `base` offloads a section
    too, `base`'s own), the rest of `base` kept."""
    config = copy.deepcopy(dict(base))
    target = zero_section(template)
    kept = {
        key: value
        for key, value in zero_section(base).items()
        if key not in ("stage", *OFFLOAD_SECTIONS, *LEGACY_OFFLOAD_KEYS)
        and not (zero_key(key).startswith("stage3_") and target.get("stage") != 3)
    }
    spelled = {zero_key(key) for key in kept}  # the template's own spelling of a key the user set goes
    zero: JsonObject = {
        **{key: copy.deepcopy(value) for key, value in target.items() if zero_key(key) not in spelled},
        **copy.deepcopy(kept),
    }
    for name in OFFLOAD_SECTIONS:
        # The rung decides whether a section offloads; the user's section, where it offloads too, says where
        # and how: an NVMe offload chosen for a host short of RAM must not become a host offload.
        own = zero_section(base).get(name)
        if offloaded(target, name) and isinstance(own, Mapping) and own.get("device") in OFFLOAD_DEVICES:
            zero[name] = copy.deepcopy(dict(own))
    if not pin_memory:
        for name in OFFLOAD_SECTIONS:
            section = zero.get(name)
            if isinstance(section, dict):
                section["pin_memory"] = False
    config["zero_optimization"] = zero
    for key in BATCH_KEYS:
        if key in config:
            config[key] = "auto"
    return config


def derived_path(output_dir: str, stem: str, rung: str, pin_memory: bool, config: Mapping[str, Any]) -> str:
    """Where a derived config lives: the content's hash in the name, so a file is never rewritten."""
    text = canonical_text(config)
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    pin = "" if pin_memory else "-nopin"
    return posixpath.join(output_dir, "safe-sft", f"{stem}-{rung}{pin}-{digest}.json")


def canonical_text(config: Mapping[str, Any]) -> str:
    return json.dumps(config, indent=2) + "\n"


# DeepSpeed's own defaults for keys a config leaves out (deepspeed/runtime/zero/config.py).
_ZERO_DEFAULTS = {
    "reduce_bucket_size": 500_000_000,
    "allgather_bucket_size": 500_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_max_live_parameters": 1_000_000_000,
    "stage3_max_reuse_distance": 1_000_000_000,
    "stage3_param_persistence_threshold": 100_000,
    "sub_group_size": 1_000_000_000,
}


@dataclass(frozen=True)
class NvmeSwap:
    """What ZeRO-3 keeps in host RAM of the state it swaps to NVMe (ZeRO 1 and 2 read an NVMe offload as a
    host offload), in elements, DeepSpeed's defaults where the section leaves them out
    (deepspeed/runtime/zero/offload_config.py)."""

    optimizer_buffers: int  # offload_optimizer's buffer_count, each a sub-group's fp32 partition; 0: not on NVMe
    param_buffer_elements: int  # offload_param's buffer_count x buffer_size; 0: parameters not on NVMe
    param_max_in_cpu: int  # offload_param's max_in_cpu: the elements of its partition a process keeps in RAM


def nvme_swap(zero: Mapping[str, Any], stage: int) -> NvmeSwap | None:
    """The NVMe side of a ZeRO section, None where nothing is swapped to NVMe."""

    def section(name: str) -> Mapping[str, Any] | None:
        value = zero.get(name)
        return value if isinstance(value, Mapping) and on_nvme(zero, name) else None

    def count(of: Mapping[str, Any], key: str, default: int) -> int:
        value = of.get(key, default)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default

    optimizer, param = section("offload_optimizer"), section("offload_param")
    if stage != 3 or (optimizer is None and param is None):
        return None
    return NvmeSwap(
        optimizer_buffers=count(optimizer, "buffer_count", 4) if optimizer is not None else 0,
        param_buffer_elements=count(param, "buffer_count", 5) * count(param, "buffer_size", 100_000_000)
        if param is not None
        else 0,
        param_max_in_cpu=count(param, "max_in_cpu", 1_000_000_000) if param is not None else 0,
    )


@dataclass(frozen=True)
class ZeroSettings:
    """The ZeRO keys that decide what DeepSpeed keeps resident on each GPU, in elements, "auto" resolved."""

    stage: int
    offload_optimizer: bool
    offload_param: bool
    reduce_bucket: int
    allgather_bucket: int
    prefetch_bucket: int
    max_live_parameters: int
    max_reuse_distance: int
    persistence_threshold: int
    sub_group_size: int
    overlap_comm: bool
    contiguous_gradients: bool
    nvme: NvmeSwap | None = None  # what stays in host RAM of the state swapped to NVMe; None: none is


def auto_value(key: str, hidden_size: int | None) -> int:
    """What transformers' HfDeepSpeedConfig fills in for an "auto" bucket key from the model's hidden size."""
    if hidden_size:
        h = hidden_size
        filled = {
            "reduce_bucket_size": h * h,
            "stage3_prefetch_bucket_size": int(0.9 * h * h),
            "stage3_param_persistence_threshold": 10 * h,
        }
        if key in filled:
            return filled[key]
    return _ZERO_DEFAULTS[key]


def zero_settings(config: Mapping[str, Any], hidden_size: int | None) -> ZeroSettings:
    """Read a DeepSpeed config's ZeRO section; "auto" values as transformers fills them, missing keys as DeepSpeed's."""
    zero = {zero_key(key): value for key, value in zero_section(config).items()}

    def size(key: str) -> int:
        value = zero.get(key, _ZERO_DEFAULTS[key])
        if value == "auto":
            return auto_value(key, hidden_size)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _ZERO_DEFAULTS[key]

    stage = _stage_number(zero.get("stage", 0)) or 0  # as DeepSpeed reads it: 3, 3.0 or "3"
    overlap = zero.get("overlap_comm")
    return ZeroSettings(
        stage=stage,
        offload_optimizer=offloaded(zero, "offload_optimizer"),
        offload_param=stage == 3 and offloaded(zero, "offload_param"),
        reduce_bucket=size("reduce_bucket_size"),
        allgather_bucket=size("allgather_bucket_size"),
        prefetch_bucket=size("stage3_prefetch_bucket_size"),
        max_live_parameters=size("stage3_max_live_parameters"),
        max_reuse_distance=size("stage3_max_reuse_distance"),
        persistence_threshold=size("stage3_param_persistence_threshold"),
        sub_group_size=size("sub_group_size"),
        overlap_comm=bool(overlap) if overlap is not None else stage == 3,  # DeepSpeed turns it on for stage 3
        contiguous_gradients=bool(zero.get("contiguous_gradients", True)),
        nvme=nvme_swap(zero, stage),
    )


# The ZeRO sections of the shipped deepspeed_configs/*.json, for plans built without reading them (tests,
# `--assume-*` what-ifs); tests/unit/test_ds_config.py holds them equal to the files.
_ZERO3: JsonObject = {
    "stage": 3,
    "overlap_comm": False,
    "contiguous_gradients": True,
    "sub_group_size": 1000000000,
    "reduce_bucket_size": "auto",
    "stage3_prefetch_bucket_size": "auto",
    "stage3_param_persistence_threshold": "auto",
    "stage3_max_live_parameters": 1000000000,
    "stage3_max_reuse_distance": 1000000000,
    "stage3_gather_16bit_weights_on_model_save": True,
}
_OFFLOAD: JsonObject = {
    "offload_optimizer": {"device": "cpu", "pin_memory": True},
    "offload_param": {"device": "cpu", "pin_memory": True},
}
SHIPPED_ZERO: dict[str, JsonObject] = {
    "zero2": {
        "zero_optimization": {
            "stage": 2,
            "allgather_partitions": True,
            "allgather_bucket_size": 200000000,
            "reduce_scatter": True,
            "reduce_bucket_size": "auto",
            "overlap_comm": False,
            "contiguous_gradients": True,
        }
    },
    "zero3": {"zero_optimization": dict(_ZERO3)},
    "zero3_offload": {"zero_optimization": {**_ZERO3, **_OFFLOAD}},
}
