"""Frozen value types shared by every layer: facts, topology, estimates, plans, failures.

No I/O and no imports from the rest of the package. Outcomes are enums, never strings. Where a probe
could not read a fact, the field is `None` ("unknown") and the probe adds a warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

T = TypeVar("T")


class Source(str, Enum):
    """Where a setting came from, in precedence order (flag beats env beats config beats Slurm ...)."""

    FLAG = "flag"
    SAFE_SFT_ENV = "safe-sft env"  # SAFE_SFT_<NAME>, which stands for safe-sft's own flag --<name>
    ENV = "env"
    CONFIG = "config"  # the ENV block of a swift YAML/JSON config file
    SLURM = "slurm"
    AUTO = "auto"
    DEFAULT = "default"


@dataclass(frozen=True)
class Sourced(Generic[T]):
    value: T
    source: Source
    note: str = ""


# ---- facts (filled by launcher.probe) -------------------------------------------------------------


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    total_bytes: int
    free_bytes: int
    used_bytes: int
    compute_processes: int = 0


@dataclass(frozen=True)
class GpuFacts:
    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostMemory:
    available_bytes: int | None
    total_bytes: int | None
    cgroup_limit_bytes: int | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rlimit:
    """A resource limit; `None` soft or hard means unlimited."""

    soft: int | None
    hard: int | None


@dataclass(frozen=True)
class Limits:
    memlock: Rlimit | None
    nofile: Rlimit | None
    shm_bytes: int | None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class NetworkFacts:
    ib_devices: tuple[str, ...] = ()
    interfaces: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    known: bool = True  # False: planning for an assumed machine (--assume-*), whose network nobody probed


@dataclass(frozen=True)
class HostFacts:
    gpus: GpuFacts
    memory: HostMemory
    limits: Limits
    network: NetworkFacts
    disk_free_bytes: int | None
    versions: dict[str, str | None]
    free_port: int
    disk_path: str | None = None  # where disk_free_bytes was measured (the output dir or its nearest parent)
    disk_problem: str | None = None  # why nothing can be written there (read-only, not a directory)
    cpu_cores: int | None = None  # the CPU cores this process may run on (its affinity); None: not known
    cpu_count: int | None = None  # os.cpu_count(), what torchrun counts for NPROC_PER_NODE=cpu

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.gpus.warnings + self.memory.warnings + self.limits.warnings + self.network.warnings


def module_pattern(path: str) -> str:
    """A module path as ModelFacts.module_paths holds it: each number (a layer's, an expert's) as `#`, so
    a model of 80 layers or 256 experts keeps one path per kind of module."""
    return ".".join("#" if part.isdigit() else part for part in path.split("."))


def modules_of(tensors: Iterable[str]) -> frozenset[str]:
    """ModelFacts.module_paths of a checkpoint's tensor names: each name less its last part, as a pattern."""
    return frozenset(module_pattern(tensor.rpartition(".")[0]) for tensor in tensors)


@dataclass(frozen=True)
class ModelFacts:
    """What is known of the model without loading its weights."""

    name: str
    total_params: int | None
    source: str  # safetensors | weights_size (.bin bytes at the dtype) | config | name | flag | unknown
    largest_layer_params: int | None = None
    hidden_size: int | None = None
    num_layers: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    dtype: str | None = None
    is_multimodal: bool = False
    model_type: str | None = None  # config.json's model_type (qwen2_5_vl, qwen3_vl, ...)
    warnings: tuple[str, ...] = ()
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None  # GQA: sequence parallelism splits these heads
    num_experts: int | None = None  # MoE: routed experts per layer
    experts_per_token: int | None = None  # MoE: experts each token goes through
    moe_intermediate_size: int | None = None  # one routed expert's MLP width
    shared_expert_intermediate_size: int | None = None  # MoE: the always-on shared experts' MLP width
    tie_word_embeddings: bool = False
    quant_bits: int | None = None  # a pre-quantized checkpoint (bnb, GPTQ, AWQ): bits per frozen weight
    quant_method: str | None = None  # that checkpoint's method: bnb, gptq, awq, ...
    max_model_len: int | None = None  # swift's limit on a sample when --max_length is unset (config.json)
    attention_dropout: bool = False  # config.json drops attention probabilities while training (> 0)
    vision_params: int = 0  # the vision tower's parameters (frozen by swift's default freeze_vit)
    vision_hidden_size: int | None = None
    vision_layers: int | None = None
    vision_intermediate_size: int | None = None  # the tower's MLP width (intermediate_size, or mlp_ratio x width)
    vision_patch_size: int | None = None  # pixels per patch side (14 for Qwen2/2.5-VL, 16 for Qwen3-VL)
    vision_model_type: str | None = None  # the tower's own type (vision_config.model_type: siglip_vision_model)
    vision_image_size: int | None = None  # the side of the square images the tower takes (vision_config)
    # a tiling processor's own tile side and most tiles, where the model's files give them: MiniCPM-V's
    # slice_config in config.json (scale_resolution, max_slice_nums; the side else its top-level image_size),
    # transformers' InternVL's max_patches in preprocessor_config.json
    vision_tile_side: int | None = None
    vision_max_tiles: int | None = None
    head_dim: int | None = None  # config.json's head_dim where q's width is not hidden / heads (Gemma, Qwen3)
    decoder_type: str | None = None  # the text decoder's model_type (qwen3_vl_text inside qwen3_vl)
    # what swift names the model's type by when its name is none it registers (launcher.plan.model_type):
    # config.json's architectures (None: no config.json read), and the model_type and template of the
    # args.json swift writes beside what it trains and exports
    architectures: tuple[str, ...] | None = None
    saved_model_type: str | None = None
    saved_template: str | None = None
    swift_model_type: str | None = None  # the type swift runs it as, so decided (None: not decided here)
    swift_multimodal: bool = False  # config.json has a key swift reads as a multimodal model's
    # the modules the safetensors headers name weights of: each tensor's name less its last part, layer and
    # expert numbers as `#` (launcher.plan.lora_targets); None where no header was read
    module_paths: frozenset[str] | None = None


@dataclass(frozen=True)
class RowText:
    """One sampled dataset row as characters by script (tokens are estimated from these in launcher.plan)."""

    latin: int  # ASCII letters, spaces and punctuation
    wide: int  # 3-4 byte UTF-8 characters: CJK ideographs, kana, Hangul, Indic and Thai scripts, emoji
    digits: int
    other: int  # 2-byte UTF-8 characters: accented Latin, Greek, Cyrillic, Arabic, Hebrew
    messages: int  # turns as the template writes them (system, user, assistant, tool)
    images: int = 0
    other_media: bool = False  # videos or audios: their tokens are not estimated
    weight: float = 1.0  # how many of the file's rows it stands for, relative to its dataset's other rows
    labels: RowText | None = None  # the assistant's turns alone: what swift trains on (its labels)
    tools: bool = False  # the row offers tools: the agent template writes their schemas with its preamble
    system: bool = False  # the row has its own system prompt, which takes the template's default's place


class SampleStatus(str, Enum):
    SAMPLED = "sampled"
    NOT_LOCAL = "not_local"  # a hub id: swift downloads it
    NOT_READ = "not_read"  # local, but not read here (a directory, a format the planner does not read, an error)


@dataclass(frozen=True)
class DatasetSample:
    """What was read of one `--dataset` value (launcher.probe.dataset)."""

    spec: str  # as given, `#N` included
    status: SampleStatus
    path: str | None = None
    take: int | None = None  # `path#N`: swift trains on N rows of it
    rows: tuple[RowText, ...] = field(default=(), repr=False)
    malformed: int = 0  # rows skipped: not JSON, not a row swift reads
    too_long: int = 0  # rows longer than the read limit: counted as max_length tokens
    rows_in_file: int | None = None
    rows_in_file_exact: bool = False  # the whole file was read; else estimated from the bytes per row read
    bytes_read: int = 0
    note: str = ""  # how it was read, or why not
    missing: bool = False  # a file's name that is no file: swift would take it for a hub id and fail to download it
    empty: bool = False  # a local file of nothing but whitespace: swift's loader finds no rows in it and stops
    not_json: str | None = None  # a JSON Lines line that does not parse, and why: swift's loader stops on it
    # the file's encoding where swift's loader stops on the whole file for it: UTF-16 or UTF-32 (their
    # byte-order mark), or a JSON list after a UTF-8 byte-order mark
    encoding: str | None = None
    # the extension swift takes for the name of a `datasets` loader where no loader has it (`JSONL`, `gz`):
    # it looks the name up on the hub instead, and stops
    unloadable_suffix: str | None = None


@dataclass(frozen=True)
class DataFacts:
    datasets: tuple[DatasetSample, ...] = ()
    warnings: tuple[str, ...] = ()
    # the system prompt swift writes into a row without its own: --system, else the template's default
    # (launcher.plan.model_type), as (latin, wide, digits, other) characters; None where not known
    default_system: tuple[int, int, int, int] | None = None


@dataclass(frozen=True)
class DataLengths:
    """The data's lengths in tokens (estimated from characters) and one micro-batch at a high percentile."""

    datasets: tuple[DatasetSample, ...]
    complete: bool  # every dataset was sampled: the figures speak for the whole training set
    max_length: int
    truncation_strategy: str  # swift's: delete (rows above max_length dropped), left/right (cut), split
    max_length_assumed: bool = False  # --max_length not set: the plan's assumed length, rows above it counted at it
    rows_sampled: int = 0
    rows_malformed: int = 0
    longer_than_max_length: int = 0  # sampled rows above max_length before truncation
    tokens_per_sample: tuple[tuple[int, int], ...] = ()  # (percentile, tokens): p50, p95, p99, p100 (max)
    image_tokens: int = 0  # tokens one image takes in the LLM sequence (the image budget)
    mode: str = "padded"  # padded (to the longest sample), padding_free (summed), packing (max_length each)
    micro_batch: int = 1
    percentile: int = 99
    batch_tokens: int | None = None  # one micro-batch at the percentile; None: not known (or packing)
    batch_longest: int | None = None
    batch_images: int | None = None
    # padding-free: the assistant's tokens in one micro-batch at the percentile, where swift's use_logits_to_keep
    # computes logits; None: not known (padded micro-batches keep logits from their earliest first label on)
    batch_label_tokens: int | None = None
    worst_case_tokens: int = 0  # micro_batch x max_length
    default_system_tokens: int = 0  # what the default system prompt adds to a row without its own (system_tokens)


# ---- topology and plan (built by launcher.plan) ----------------------------------------------------


@dataclass(frozen=True)
class Topology:
    nproc_per_node: Sourced[int]
    nnodes: Sourced[int]
    node_rank: Sourced[int]
    master_addr: Sourced[str]
    master_port: Sourced[int]
    visible_devices: Sourced[str] | None  # CUDA_VISIBLE_DEVICES for the children; None: leave as it is
    gpus: tuple[GpuInfo, ...]  # the GPUs the children will use (empty on CPU)
    # processes per node plain `swift sft` would start here (NPROC_PER_NODE, else 1); None: as ours
    swift_nproc_per_node: int | None = None
    warnings: tuple[str, ...] = ()  # e.g. a stale NNODES beating Slurm's value

    @property
    def world_size(self) -> int:
        return self.nproc_per_node.value * self.nnodes.value

    @property
    def swift_world_size(self) -> int:
        nproc = self.nproc_per_node.value if self.swift_nproc_per_node is None else self.swift_nproc_per_node
        return nproc * self.nnodes.value


@dataclass(frozen=True)
class GlobalBatch:
    """The batch an attempt trains with, against the one plain `swift sft` would have used (plan/batch.py)."""

    micro_batch: int
    grad_accum: int  # what safe-sft runs with
    world_size: int
    swift_accum: int  # what plain swift would have used: the given value, or its default for its world size
    swift_world_size: int
    accum_given: int | None  # --gradient_accumulation_steps as the user gave it

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.world_size

    @property
    def swift_global_batch(self) -> int:
        return self.micro_batch * self.swift_accum * self.swift_world_size

    @property
    def changed(self) -> bool:
        """safe-sft runs another number of processes than plain swift would."""
        return self.world_size != self.swift_world_size

    @property
    def kept(self) -> bool:
        return self.global_batch == self.swift_global_batch


class Strategy(str, Enum):
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    ZERO3_OFFLOAD = "zero3_offload"
    DDP = "ddp"  # no DeepSpeed: estimated so a plain run can be checked, never chosen by the planner
    DEVICE_MAP = "device_map"  # one process, the model split over the node's GPUs (swift's own layout)


STRATEGY_ORDER: tuple[Strategy, ...] = (Strategy.ZERO2, Strategy.ZERO3, Strategy.ZERO3_OFFLOAD)


@dataclass(frozen=True)
class Estimate:
    """Memory one strategy needs: per GPU and per node's host RAM, against what is free."""

    strategy: Strategy
    gpu_need_bytes: int
    cpu_need_bytes: int
    gpu_free_bytes: int | None
    cpu_free_bytes: int | None
    parts: dict[str, int] = field(default_factory=dict)  # per-GPU breakdown, for display
    levers: tuple[tuple[str, int], ...] = ()  # (one-setting change, GPU bytes it saves), the largest first
    # per GPU, what no data can change (model states, buffers, context, their margin); None: not split
    gpu_fixed_bytes: int | None = None
    # the same estimate at the data's sampled lengths (launcher.plan.data_lengths); None: not sampled
    gpu_need_at_data_bytes: int | None = None
    parts_at_data: dict[str, int] | None = None

    @property
    def gpu_fits(self) -> bool:
        return self.gpu_free_bytes is not None and self.gpu_need_bytes <= self.gpu_free_bytes

    @property
    def fixed_fits(self) -> bool:
        """The parts the data cannot change fit the GPU, and the host RAM fits: a refusal needs this False."""
        fixed = self.gpu_need_bytes if self.gpu_fixed_bytes is None else self.gpu_fixed_bytes
        return self.gpu_free_bytes is not None and fixed <= self.gpu_free_bytes and self.cpu_fits

    @property
    def cpu_fits(self) -> bool:
        return self.cpu_free_bytes is None or self.cpu_need_bytes <= self.cpu_free_bytes

    @property
    def fits(self) -> bool:
        return self.gpu_fits and self.cpu_fits

    @property
    def gpu_need_for_choice(self) -> int:
        """The need the strategy choice weighs: at the data's lengths where they were sampled, else the worst case."""
        return self.gpu_need_bytes if self.gpu_need_at_data_bytes is None else self.gpu_need_at_data_bytes

    @property
    def fits_at_data(self) -> bool:
        """Fits at the data's sampled lengths (the worst case where the data was not sampled)."""
        gpu = self.gpu_free_bytes is not None and self.gpu_need_for_choice <= self.gpu_free_bytes
        return gpu and self.cpu_fits


@dataclass(frozen=True)
class DeviceMapLayout:
    """One process, the model split over the GPUs (launcher.plan.device_map): where the parts land."""

    layers: tuple[int, ...]  # decoder layers per GPU, in CUDA_VISIBLE_DEVICES order
    first_gpu: int  # holds the embeddings (and the vision tower)
    head_gpu: int  # holds the lm_head and the logits
    max_memory: tuple[int, ...]  # the budgets (bytes of weights per GPU) that give this placement
    need_bytes: tuple[int, ...] = ()  # each GPU's estimated need
    free_bytes: tuple[int | None, ...] = ()  # each GPU's free memory


@dataclass(frozen=True)
class EnvSetting:
    name: str
    value: str
    reason: str


@dataclass(frozen=True)
class Plan:
    topology: Topology
    strategy: str | None  # a Strategy value, the user's own --deepspeed value, or None (no DeepSpeed)
    strategy_reason: str
    deepspeed_arg: str | None  # what --deepspeed gets; None leaves the user's argv alone
    estimates: tuple[Estimate, ...]
    env: tuple[EnvSetting, ...]
    swift_argv: tuple[str, ...]
    command: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    write_no_pin_config: bool = False  # deepspeed_arg is a zero3_offload copy with pin_memory off, to write
    fits: bool = True  # False: no strategy fits the estimate (launch only with --force)
    batch: GlobalBatch | None = None  # the global batch, kept at plain swift's where the world size differs
    ddp_timeout_arg: str | None = None  # the --ddp_timeout safe-sft adds for its watchdog (docs/watch.md)
    assumed_machine: bool = False  # planned with --assume-*: this machine's network and limits not taken
    device_map: DeviceMapLayout | None = None  # the device_map strategy's split (chosen or not), per GPU
    max_memory_arg: str | None = None  # the --max_memory safe-sft adds for a device_map run
    data_lengths: DataLengths | None = None  # the sampled data's lengths (None: no --dataset given)
    backend: str = "swift"  # the trainer (launcher/backends): swift, torchrun (an HF-Trainer script)
    activations: tuple[str, ...] = ()  # how the activations are counted (plan --explain-memory)
    assumed_length: int | None = None  # tokens per sample assumed for an unset --max_length (None: swift's value)
    # the estimate the chosen strategy is (a Strategy value): the user's own config's rung is estimated as
    # launcher.plan.ds_config.estimated_as names it (zero2_offload as zero2, read from the user's file)
    estimated_as: str | None = None
    uses_gpus: bool = True  # the ranks train on GPUs (NCCL, pinned memory); False with none, or under --use_cpu

    def env_dict(self) -> dict[str, str]:
        return {setting.name: setting.value for setting in self.env}


# ---- failures (classified by launcher.run.classify) -------------------------------------------------


class FailureKind(str, Enum):
    CUDA_OOM = "cuda_oom"
    CUDA_OOM_LOAD = "cuda_oom_load"
    CUDA_OOM_SAVE = "cuda_oom_save"
    CUDA_OOM_EVAL = "cuda_oom_eval"
    HOST_OOM = "host_oom"
    MEMLOCK = "memlock"
    SHM = "shm"
    DISK_FULL = "disk_full"
    DOWNLOAD = "download"  # a web request (the model or dataset hub) failed: network, proxy, server
    COMM_TIMEOUT = "comm_timeout"
    COMM_ERROR = "comm_error"
    HANG = "hang"
    CUDA_ERROR = "cuda_error"
    CRASH = "crash"
    KILLED = "killed"
    USER_ERROR = "user_error"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"


class Confidence(str, Enum):
    """How well the evidence proves the kind: a proving line (firm), or an exit status alone (thin)."""

    FIRM = "firm"
    THIN = "thin"


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    evidence: tuple[str, ...]
    rank: int | None = None
    exit_code: int | None = None
    summary: str = ""
    confidence: Confidence = Confidence.FIRM
    runner_up: FailureKind | None = None  # the next most likely kind, where the evidence allows another

    def headline(self) -> str:
        """`kind: what happened on rank N`, the first line wherever a failure is shown."""
        where = f" on rank {self.rank}" if self.rank is not None else ""
        return f"{self.kind.value}: {self.summary or self.kind.value}{where}"

    def to_json(self) -> dict[str, object]:
        """As report.json and `safe-sft explain --json` show it."""
        return {
            "kind": self.kind.value,
            "summary": self.summary,
            "rank": self.rank,
            "exit_code": self.exit_code,
            "evidence": list(self.evidence),
            "confidence": self.confidence.value,
            "runner_up": None if self.runner_up is None else self.runner_up.value,
        }
