"""Memory each strategy needs, per GPU and per node's host RAM, as named parts.

Contract: pure functions of a TrainShape (the model's real shapes and the run's settings) and, for the
DeepSpeed strategies, the ZeroSettings read from the very config the run will use (launcher.plan.ds_config).
Every byte is in a named part of `Estimate.parts`, so a user sees where the memory goes:

    gpu_weights            the 16-bit (or fp32, or 4/8-bit quantized frozen) weights this GPU holds
    gpu_zero3_live_params  ZeRO-3: parameters gathered and kept live (stage3_max_live_parameters, the
                           reuse distance, the prefetch bucket), at least the largest layer
    gpu_zero3_persistent   ZeRO-3: parameters under stage3_param_persistence_threshold, never partitioned
    gpu_gradients          16-bit gradients (DDP: and its bucket copies; ZeRO-3: and a gathered layer's)
    gpu_step_gradients     ZeRO: the fp32 gradient partition (ZeRO-3: of the sub-group being stepped,
                           sub_group_size), made at the optimizer step, after the backward freed the
                           activations: only what it needs beyond them
    gpu_optimizer          fp32 master weights and Adam moments of this GPU's partition
    gpu_zero_buckets       reduce bucket (x2 with overlap_comm), zero2 allgather bucket, zero3 prefetch bucket
    gpu_activations        saved layer inputs (checkpointing) plus one layer's activations, or all layers'
                           (under LoRA: the frozen layer's and its adapters' own)
    gpu_attention_scores   eager attention only: heads x length^2 per layer
    gpu_logits             the logits over the vocabulary, their fp32 copy and gradient
    gpu_vision             the vision tower's activations for MAX_PIXELS images
    gpu_moe_experts        MoE with --experts_impl batched_mm: each token's experts' weights gathered
    gpu_sequence_parallel  --sequence_parallel_size: the all-to-all buffers of one layer's q/k/v/output
                           (Ulysses) or k/v blocks (ring), and the full-length input embeddings
    gpu_cuda_context       CUDA context, cuBLAS/NCCL workspaces (fitted)
    gpu_fragmentation_margin  what the caching allocator reserves beyond what is allocated (fitted)
    gpu_measured_correction   after an attempt of this run was measured: what its peak / estimate adds

The parts in DATA_PARTS grow with the tokens of a micro-batch: the worst case (every sample at max_length)
is `gpu_need_bytes`; what the data cannot change is `gpu_fixed_bytes` (weights, gradients, optimizer state,
buffers, context, and the fragmentation margin over these). A plan refuses a run only when no strategy's
fixed bytes fit (launcher.plan.strategy).

Model states reduce to DeepSpeed's own estimators for a full zero2 fine-tune (2P + 18P/N); for LoRA only
trainable parameters carry gradients and optimizer state. These are planning numbers, not promises: the
ladder in launcher.plan.degrade handles what they miss.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from launcher.model import Estimate, Strategy
from launcher.plan.attention_default import transformers_runs_eager, why_eager
from launcher.plan.ds_config import ZeroSettings
from launcher.plan.layer_bytes import (
    DORA_OUTPUTS_KEPT,
    adapter_bytes_per_token,
    eager_score_bytes,
    layer_bytes,
    vision_layer_bytes,
)
from launcher.plan.layer_bytes import describe as describe_layer
from launcher.units import GiB

BUFFER_FACTOR = 1.5  # DeepSpeed's additional_buffer_factor for host memory
HOST_BYTES_PER_PROCESS = 3 * GiB  # python, torch, the tokenizer and dataloader per training process
DEFAULT_SEQ_LEN = 2048
LORA_FALLBACK_FRACTION = 0.01

# Fitted on the calibration table (tests/data/calibration: table.jsonl with held-out tables 2 and 3 joined,
# 338 runs from 65 sources) by scripts/fit_memory.py (grid search; its leave-one-source-out report is in
# BENCHMARKS.md). The per-process CUDA context with cuBLAS/NCCL workspaces: the driver alone takes
# 0.3-0.6 GiB, cuBLAS and NCCL add their workspaces and communicators, and on an H200 NVML's peak less
# torch's reserved peak measured 1.5-2.3 GiB (BENCHMARKS.md, round 37); the fit searches that range and
# lands at 2 GiB, which also carries what every run keeps beyond its parts (the tokenizer's and collator's
# pinned buffers). The margin is what published figures (nvidia-smi or torch's reserved memory) hold beyond
# the allocated parts: the caching allocator's fragmentation, temporaries of the optimizer step and of
# NCCL; the fit lands at 14 % of the rest (the H200 measured 15 % and 21 % with expandable segments). Rows
# that report torch's allocated bytes are held to the parts without both. The objective is flat along a
# ridge where a larger context trades against a smaller margin ((1.5 GiB, 16 %) and (2 GiB, 14 %) lie a
# row apart); left free, the fit walks down it to a context the GPU contradicts (0.5 GiB, 22 %).
CUDA_CONTEXT_BYTES = int(2.0 * GiB)
FRAGMENTATION_MARGIN = 0.14

# Bytes per token one decoder layer saves for the backward, and per token x vocabulary entry the loss saves,
# come from launcher/plan/layer_bytes.py: measured on transformers' own code per model family (for Llama
# 16h + 4q + 4kv + 8i: the two RMSNorms' fp32 inputs and outputs, the residual adds, o_proj's and
# down_proj's inputs in h; q and the attention output at q's width; k and v as the attention kernel saves
# them; gate, up, silu(gate) and their product). For llama-7B (MHA, i = 2.7h) this is 46h; Korthikanti et
# al. count 34h for a GeLU MLP without the fp32 norms.
# The logits' peak, per token x vocabulary entry, is in the backward of the loss: what the loss saved (the
# fp32 log-softmax, 4 bytes; Gemma-2's soft-capped logits add 2) and the two fp32 gradients log-softmax's
# backward takes and makes. The trainer (HF's and swift's compute_loss) returns only the loss, so the 16-bit
# logits are freed before the backward; the forward's own peak (16-bit logits, their fp32 copy, the
# log-softmax: 10) is lower, as is that of an fp32 output layer (its logits are the copy).
LOGIT_GRADIENT_BYTES = 4 + 4
# Eager attention, per head x length^2: what each layer saves comes from launcher/plan/layer_bytes.py
# (measured: 6 bytes in bf16 for transformers' shared eager attention); the layer whose backward runs adds
# the fp32 gradient through the softmax and the scores' gradient at the weights' width.
EAGER_BACKWARD_FP32_BYTES = 4
# Quantized frozen weights, bytes per weight: bnb nf4 0.5 + double-quantized absmax; int8 1 + a row scale;
# GPTQ/AWQ 4-bit 0.5 + fp16 scales and packed zeros per group of 128.
QUANT_BYTES = {4: 0.53, 8: 1.01, 2: 0.28, 3: 0.4}
VISION_PATCH = 14  # Qwen2/2.5-VL / InternVL patch side in pixels, where config.json gives none
PATCH_MERGE = 2  # Qwen-VL's spatial_merge_size: one image token is PATCH_MERGE x PATCH_MERGE patches

# The parts that grow with a micro-batch's tokens; every other part is fixed whatever the data.
DATA_PARTS = frozenset(
    {
        "gpu_activations",
        "gpu_attention_scores",
        "gpu_logits",
        "gpu_vision",
        "gpu_moe_experts",
        "gpu_sequence_parallel",
    }
)


@dataclass(frozen=True)
class Adapters:
    """LoRA on the decoder layers (their weights frozen): the adapted linears' input widths by name, the
    rank, whether --lora_dropout is on (swift's 0.05), and under DoRA their output widths summed."""

    inputs: tuple[tuple[str, int], ...]
    rank: int = 8
    dropout: bool = True
    dora_outputs: int = 0  # --use_dora true: the adapted linears' output widths, summed; 0 for LoRA


# The projections of a decoder layer LoRA adapts by name (swift's all-linear: every one of them)
LORA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _projections(hidden: int, q_width: int, kv_width: int, mlp_width: int | None) -> dict[str, tuple[int, int]]:
    """(input, output) width of each projection LoRA can adapt: q, k, v and the MLP's gate and up read the
    hidden states, o the attention output (q's width), down the MLP's width; q writes q's width, k and v
    k/v's, gate and up the MLP's, o and down the hidden size. No MLP linears where `mlp_width` is None or 0
    (an MoE layer without shared experts)."""
    widths = {"q_proj": (hidden, q_width), "k_proj": (hidden, kv_width), "v_proj": (hidden, kv_width)}
    widths["o_proj"] = (q_width, hidden)
    if mlp_width:
        widths |= {"gate_proj": (hidden, mlp_width), "up_proj": (hidden, mlp_width), "down_proj": (mlp_width, hidden)}
    return widths


# The families whose decoder layer names or fuses the linears LoRA adapts otherwise than Llama
# (transformers 5's modeling code): each of the family's linears -> the Llama projections it computes. A
# fused linear reads its input once and writes its parts' widths together; a family without a gated MLP
# has no gate. Every other family is Llama's LORA_LINEARS.
_SEPARATE_ATTENTION = {name: (name,) for name in LORA_LINEARS[:4]}
FAMILY_LINEARS: dict[str, dict[str, tuple[str, ...]]] = {
    "phi3": {
        "qkv_proj": ("q_proj", "k_proj", "v_proj"), "o_proj": ("o_proj",),
        "gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",),
    },
    "glm": {**_SEPARATE_ATTENTION, "gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)},
    "glm4": {**_SEPARATE_ATTENTION, "gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)},
    "gpt_neox": {
        "query_key_value": ("q_proj", "k_proj", "v_proj"), "dense": ("o_proj",),
        "dense_h_to_4h": ("up_proj",), "dense_4h_to_h": ("down_proj",),
    },
    "phi": {
        "q_proj": ("q_proj",), "k_proj": ("k_proj",), "v_proj": ("v_proj",), "dense": ("o_proj",),
        "fc1": ("up_proj",), "fc2": ("down_proj",),
    },
    "starcoder2": {**_SEPARATE_ATTENTION, "c_fc": ("up_proj",), "c_proj": ("down_proj",)},
}  # fmt: skip


def all_linears(model_type: str | None) -> tuple[str, ...]:
    """The names swift's all-linear adapts in one decoder layer of a `model_type` model."""
    layout = FAMILY_LINEARS.get(model_type or "")
    return tuple(layout) if layout is not None else LORA_LINEARS


def layer_linears(
    model_type: str | None, hidden: int, q_width: int, kv_width: int, mlp_width: int | None
) -> dict[str, tuple[int, int]]:
    """(input, output) width of each linear LoRA can adapt in one decoder layer, by the family's own names
    (FAMILY_LINEARS; Llama's elsewhere)."""
    llama = _projections(hidden, q_width, kv_width, mlp_width)
    layout = FAMILY_LINEARS.get(model_type or "")
    if layout is None:
        return llama
    linears = {}
    for name, parts in layout.items():
        widths = [llama[part] for part in parts if part in llama]
        if widths:
            linears[name] = (widths[0][0], sum(out for _, out in widths))
    return linears


def adapter_inputs(
    hidden: int, q_width: int, mlp_width: int | None, targets: Iterable[str], model_type: str | None = None
) -> tuple[tuple[str, int], ...]:
    """The input widths of the linears named in `targets` (an MoE layer's MLP width is its shared
    experts'; None or 0 where it has no MLP linears)."""
    return inputs_of(layer_linears(model_type, hidden, q_width, 0, mlp_width), targets)  # no input is k/v wide


def adapter_outputs(
    hidden: int,
    q_width: int,
    kv_width: int,
    mlp_width: int | None,
    targets: Iterable[str],
    model_type: str | None = None,
) -> int:
    """The output widths of the linears named in `targets`, summed."""
    return outputs_of(layer_linears(model_type, hidden, q_width, kv_width, mlp_width), targets)


def inputs_of(linears: Mapping[str, tuple[int, int]], targets: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """(name, input width) of each of `linears` (layer_linears) named in `targets`."""
    named = set(targets)
    return tuple((name, width) for name, (width, _) in linears.items() if name in named)


def outputs_of(linears: Mapping[str, tuple[int, int]], targets: Iterable[str]) -> int:
    """The output widths of the `linears` (layer_linears) named in `targets`, summed."""
    named = set(targets)
    return sum(width for name, (_, width) in linears.items() if name in named)


def adapted_mlp_width(intermediate_size: int | None, moe: bool, shared_expert_size: int | None) -> int | None:
    """The MLP width LoRA's gate/up/down adapters see: a dense layer's, or an MoE layer's shared experts'
    (its routed experts are fused parameters, no linears; None where it has no shared experts)."""
    return shared_expert_size if moe else intermediate_size


@dataclass(frozen=True)
class TrainShape:
    """What the estimate needs to know of the model and the run."""

    total_params: int
    trainable_params: int
    largest_layer_params: int
    hidden_size: int | None
    num_layers: int | None
    vocab_size: int | None
    micro_batch: int
    seq_len: int
    gradient_checkpointing: bool
    gpus_per_node: int
    nnodes: int
    intermediate_size: int | None = None
    num_heads: int | None = None
    weight_bytes: int = 2  # --torch_dtype: 2 for bfloat16/float16, 4 for float32
    quant_bits: int | None = None  # frozen base weights quantized to this many bits (QLoRA, GPTQ, AWQ)
    quant_method: str | None = None  # how: bnb (bitsandbytes), gptq, awq, hqq, ...
    quantized_params: int = 0  # how many frozen weights are quantized (the decoder's linears)
    eager_attention: bool = False  # --attn_impl eager: scores materialised, quadratic in length
    attention_dropout: bool = False  # the config's attention dropout > 0: eager keeps its mask and output
    packing: bool = False  # --packing true: every sample is max_length tokens
    num_experts: int | None = None
    experts_per_token: int | None = None
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int | None = None  # MoE shared experts: every token runs them
    vision_hidden_size: int | None = None
    vision_layers: int | None = None
    image_pixels: int = 0  # MAX_PIXELS of one image per sample; 0 for text-only
    vision_trainable: bool = False  # --freeze_vit false
    vision_checkpointing: bool | None = None  # --vit_gradient_checkpointing; None: as gradient_checkpointing
    vision_intermediate_size: int | None = None  # the tower's MLP width; 4 x its width where unknown
    vision_patch_size: int = VISION_PATCH
    vision_merge: int = PATCH_MERGE  # patches per side of one language-model image token
    vision_type: str | None = None  # whose measured vision tower (layer_bytes.vision_family)
    adapters: Adapters | None = None  # LoRA: a frozen base with these adapters; None: the layers train
    fused_cross_entropy: bool = False  # --use_liger_kernel true: the logits are never materialised in full
    vocab_logits: bool = True  # False for --task_type seq_cls / embedding / reranker: no vocabulary head
    sequence_parallel: int = 1  # --sequence_parallel_size: each GPU holds 1/S of every sample's tokens
    sequence_ring: bool = False  # S exceeds gcd(kv heads, S): ring attention passes k/v blocks around
    padding_free: bool = False  # --padding_free (or packing): flash varlen, no padding, no length^2 scores
    logits_on_labels: bool = False  # use_logits_to_keep: logits only from the first label on (swift's default)
    label_fraction: float = 1.0  # share of tokens that are labels (data-dependent; 1.0 is the worst case)
    experts_impl: str | None = None  # --experts_impl grouped_mm | batched_mm | eager (transformers 5)
    loss_chunk_tokens: int = 0  # CELOSS_PARALLEL_SIZE under sequence parallelism: the loss in chunks
    num_kv_heads: int | None = None
    head_dim: int | None = None  # config.json's head_dim where q's width is not the hidden size (Gemma, Qwen3)
    model_type: str | None = None  # config.json's model_type: which measured layer (launcher.plan.layer_bytes)
    # peft's prepare_model_for_kbit_training (QLoRA in HF-Trainer scripts): every weight left unquantized
    # (embeddings, output layer, norms) upcast to fp32
    upcast_unquantized: bool = False
    optimizer_bits: int = 32  # bits per Adam moment: 8 for an 8-bit AdamW (--optim adamw_bnb_8bit)
    optimizer_paged: bool = False  # a paged optimizer (--optim paged_adamw_8bit): its states in host-backed memory
    optimizer_in_backward: bool = False  # each parameter stepped and its gradient freed during the backward
    activation_offload: bool = False  # the checkpointed layer inputs moved to host memory
    pure_dtype: bool = False  # weights, gradients, Adam moments all in the dtype (bf16-true): no fp32 copies
    # One micro-batch at the data's sampled lengths (launcher.plan.data_lengths); None: the worst case,
    # micro_batch samples of seq_len tokens with one image each
    batch_tokens: int | None = None  # tokens in it: padded to its longest sample, or summed padding-free
    batch_longest: int | None = None  # its longest sample: eager attention is quadratic in it
    batch_images: int | None = None  # images in it: the vision tower's activations
    grad_accum: int | None = None  # --gradient_accumulation_steps; None: unknown, read as accumulating

    @property
    def total_gpus(self) -> int:
        return max(self.gpus_per_node * self.nnodes, 1)

    @property
    def mixed_precision(self) -> bool:
        return self.weight_bytes < 4

    @property
    def tokens(self) -> int:
        """Tokens one GPU runs through the decoder per micro-batch: sequence parallelism splits each sample."""
        if self.batch_tokens is None:
            return self.micro_batch * -(-self.seq_len // max(self.sequence_parallel, 1))
        return -(-self.batch_tokens // max(self.sequence_parallel, 1))

    @property
    def sample_tokens(self) -> int:
        """Tokens of a micro-batch before any split (the input embeddings, the vision tower's images): at the
        data's sampled lengths where known, else micro_batch samples of seq_len."""
        return self.micro_batch * self.seq_len if self.batch_tokens is None else self.batch_tokens


@dataclass(frozen=True)
class Calibration:
    """The fitted constants (see scripts/fit_memory.py)."""

    cuda_context_bytes: int = CUDA_CONTEXT_BYTES
    fragmentation: float = FRAGMENTATION_MARGIN


def lora_trainable_params(
    linears: Mapping[str, tuple[int, int]], targets: Iterable[str], num_layers: int, rank: int, expert_widths: int = 0
) -> int:
    """LoRA's trained parameters: rank x (in + out) of each of the layer's `linears` (layer_linears) named in
    `targets`, in each of `num_layers` layers; `expert_widths` adds a layer's routed-expert adapters, in + out
    summed (routed experts that are linears, or fused parameters that --target_parameters names)."""
    return num_layers * rank * (adapted_widths(linears, targets) + expert_widths)


def adapted_widths(linears: Mapping[str, tuple[int, int]], targets: Iterable[str]) -> int:
    """in + out of each of `linears` (layer_linears) named in `targets`, summed: one rank's parameters."""
    named = set(targets)
    return sum(width_in + width_out for name, (width_in, width_out) in linears.items() if name in named)


def model_state_bytes(strategy: Strategy, shape: TrainShape) -> tuple[int, int]:
    """DeepSpeed's own estimators' formulas, (GPU bytes per GPU, host bytes per node), with only trainable
    parameters carrying gradients and optimizer state. Kept as the reference the parts are held against."""
    total_gpus = shape.total_gpus
    trainable = shape.trainable_params
    frozen = shape.total_params - trainable
    largest = shape.largest_layer_params
    if strategy in (Strategy.ZERO2, Strategy.DDP):
        gpu = 2 * shape.total_params + int(18 * trainable / total_gpus)
        cpu = shape.total_params * 4 * shape.gpus_per_node * BUFFER_FACTOR
    elif strategy is Strategy.ZERO3:
        gpu = 4 * largest + int((18 * trainable + 2 * frozen) / total_gpus)
        cpu = largest * 4 * shape.gpus_per_node * BUFFER_FACTOR
    else:
        gpu = 4 * largest
        cpu = (18 * trainable + 2 * frozen) / shape.nnodes * BUFFER_FACTOR
    return gpu, int(cpu)


def frozen_weight_bytes(shape: TrainShape) -> float:
    """Bytes of the frozen weights: quantized ones at their bits, the rest (embeddings, norms) at the dtype."""
    frozen = shape.total_params - shape.trainable_params
    if not shape.quant_bits:
        return float(frozen * shape.weight_bytes)
    quantized = min(shape.quantized_params, frozen)
    per = QUANT_BYTES.get(shape.quant_bits, shape.quant_bits / 8)
    rest = 4 if shape.upcast_unquantized else shape.weight_bytes
    return quantized * per + (frozen - quantized) * rest


def moment_bytes(shape: TrainShape, dtype_bytes: float) -> float:
    """Bytes of one Adam moment per parameter: the optimizer's own precision, or 8 bits with a 4-byte scale
    per block of 2048 (bitsandbytes' blockwise quantization)."""
    if shape.optimizer_bits >= 32:
        return dtype_bytes
    return shape.optimizer_bits / 8 + 4 / 2048


def persistent_params(shape: TrainShape, zero: ZeroSettings) -> int:
    """Parameters under stage3_param_persistence_threshold: norms and biases (a few of size h per layer)."""
    if not shape.hidden_size or not shape.num_layers or zero.persistence_threshold < shape.hidden_size:
        return 0
    return shape.num_layers * 4 * shape.hidden_size + shape.hidden_size


def weight_parts(strategy: Strategy, shape: TrainShape, zero: ZeroSettings | None) -> dict[str, int]:
    """Weights, gradients, optimizer state and DeepSpeed's buffers on one GPU."""
    w = shape.weight_bytes
    n = shape.total_gpus
    trainable = shape.trainable_params
    weights = trainable * w + frozen_weight_bytes(shape)
    mixed = shape.mixed_precision and not shape.pure_dtype
    master = 4 if mixed else 0
    grad32 = 4 if mixed else 0
    adam = 0.0 if shape.optimizer_paged else 2 * moment_bytes(shape, w if shape.pure_dtype else 4)
    if strategy is Strategy.DDP or zero is None:
        # torch AdamW keeps its moments in the parameters' dtype; DDP's buckets are a second copy of the
        # gradients (gradient_as_bucket_view is off in the HF Trainer); one process has no DDP wrapper.
        copies = 2 if n > 1 else 1
        gradients = copies * trainable * w
        if shape.optimizer_in_backward:
            gradients = min(shape.largest_layer_params, trainable) * w  # one parameter's gradient at a time
        moments = 0.0 if shape.optimizer_paged else trainable * 2 * moment_bytes(shape, w)
        return {"gpu_weights": int(weights), "gpu_gradients": gradients, "gpu_optimizer": int(moments)}
    parts: dict[str, int] = {}
    partition = trainable / n if zero.stage >= 1 else trainable  # stage 0 partitions nothing
    bucket_copies = 2 if zero.overlap_comm else 1
    if zero.stage == 3:
        largest_bytes = shape.largest_layer_params * w
        kept = max(shape.largest_layer_params, min(zero.max_live_parameters, zero.max_reuse_distance))
        gathered = min(shape.total_params, kept + zero.prefetch_bucket)
        gathered_bytes = gathered * weights / max(shape.total_params, 1)  # quantized weights gather quantized
        parts["gpu_weights"] = 0 if zero.offload_param else int(weights / n)
        parts["gpu_zero3_live_params"] = int(max(gathered_bytes, largest_bytes))
        parts["gpu_zero3_persistent"] = persistent_params(shape, zero) * w
        sub_group = min(zero.sub_group_size, partition)
        in_flight = min(shape.largest_layer_params, trainable) * w  # a gathered layer's full gradient, unreduced
        stored = 0 if zero.offload_optimizer else partition * w
        parts["gpu_gradients"] = int(in_flight + stored)
        parts["gpu_step_gradients"] = 0 if zero.offload_optimizer else int(sub_group * grad32)
        parts["gpu_optimizer"] = 0 if zero.offload_optimizer else int(partition * (master + adam))
        parts["gpu_zero_buckets"] = min(zero.reduce_bucket, trainable) * w * bucket_copies
        return parts
    # stage 0-2: the full 16-bit weights on every GPU
    parts["gpu_weights"] = int(weights)
    # stage 2: the contiguous gradient partition; stage 0/1 keep every gradient
    grads16 = partition * w if zero.stage == 2 else trainable * w
    parts["gpu_gradients"] = int(grads16)
    parts["gpu_step_gradients"] = 0 if zero.offload_optimizer else int(partition * grad32)
    parts["gpu_optimizer"] = 0 if zero.offload_optimizer else int(partition * (master + adam))
    reduce = min(zero.reduce_bucket, trainable) * w * bucket_copies if zero.contiguous_gradients else 0
    allgather = min(zero.allgather_bucket, trainable) * w if zero.stage >= 1 else 0
    parts["gpu_zero_buckets"] = reduce + allgather
    return parts


def backward_gradient_bytes(strategy: Strategy, shape: TrainShape, zero: ZeroSettings | None) -> int:
    """The 16-bit gradients the backward makes and the optimizer step frees (set to None): the parameters'
    .grad under DDP and ZeRO-0/1, ZeRO-2's partition (grads_in_partition). ZeRO-3's partition is a flat
    buffer kept from the start, and DDP's bucket copy is kept too."""
    if shape.optimizer_in_backward:
        return 0
    if strategy is Strategy.DDP or zero is None:
        return shape.trainable_params * shape.weight_bytes
    if zero.stage == 3:
        return 0
    if zero.stage == 2:
        return shape.trainable_params // shape.total_gpus * shape.weight_bytes
    return shape.trainable_params * shape.weight_bytes


def q_kv_widths(hidden: int, heads: int | None, kv_heads: int | None, head_dim: int | None) -> tuple[int, int]:
    """(q's width, k/v's width): heads x head_dim and kv_heads x head_dim; head_dim is hidden / heads unless
    config.json sets it; both the hidden size where the heads are unknown."""
    if not heads:
        return hidden, hidden
    width = head_dim or hidden // heads
    return heads * width, (kv_heads or heads) * width


def attention_widths(shape: TrainShape) -> tuple[int, int]:
    return q_kv_widths(shape.hidden_size or 0, shape.num_heads, shape.num_kv_heads, shape.head_dim)


def layer_bytes_per_token(shape: TrainShape) -> float:
    """Bytes one decoder layer saves for the backward per token (no checkpointing), at the weights' dtype."""
    h = shape.hidden_size or 0
    q_width, kv_width = attention_widths(shape)
    frozen = frozen_base(shape)
    family = layer_bytes(shape.model_type, frozen=frozen)
    if shape.num_experts and shape.moe_intermediate_size:
        # only the routed experts run per token; the dispatch copies of the hidden states come with them
        # (measured on Mixtral, Qwen3-MoE and Qwen2-MoE: tests/stack/test_activation_bytes_real.py); shared
        # experts run as one dense MLP of their width, their output kept for the gate that scales it. Frozen
        # experts (LoRA) keep no copy of their input for a weight gradient: 2h per routed pair, not 4h.
        top_k, shared = shape.experts_per_token or 1, shape.shared_expert_intermediate_size or 0
        per_token = family.per_token(h, q_width, kv_width, top_k * shape.moe_intermediate_size + shared)
        dispatch = (2 if frozen else 4) * top_k * h
        per_token += dispatch + 4 * shape.num_experts + (2 * h if shared else 0)
    else:
        per_token = family.per_token(h, q_width, kv_width, shape.intermediate_size or 4 * h)
    adapters = shape.adapters
    if adapters is None:
        return float(per_token * shape.weight_bytes / 2)
    widths = [width for _, width in adapters.inputs]
    kept = adapter_bytes_per_token(widths, adapters.rank, shape.weight_bytes, adapters.dropout)
    kept += DORA_OUTPUTS_KEPT * adapters.dora_outputs * shape.weight_bytes
    return float(per_token * shape.weight_bytes / 2 + kept)


def describe_activations(shape: TrainShape) -> tuple[str, ...]:
    """Lines for `plan --explain-memory`: whose measured layer the activations are counted as, LoRA's
    frozen base and adapters, the parts that never coexist with the activations, and eager attention's
    scores."""
    lines = [describe_layer(shape.model_type)]
    adapters = shape.adapters
    if adapters is not None:
        base = "its weights frozen" if frozen_base(shape) else "its quantized base counted as a trained layer"
        dropout = "with" if adapters.dropout else "without"
        kind = "DoRA" if adapters.dora_outputs else "LoRA"
        lines.append(
            f"{kind}: {base}; adapters on {len(adapters.inputs)} projections of each layer (rank {adapters.rank}, "
            f"{dropout} dropout), each keeping a 16-bit copy of its input"
            + (" and two of its output (DoRA's magnitude scaling)" if adapters.dora_outputs else "")
        )
    lines.append(
        "step_gradients (ZeRO): the fp32 gradient copy DeepSpeed makes at the optimizer step, after the backward "
        "freed the activations and logits: counted beyond them only (the fixed bytes hold all of it)"
    )
    if shape.grad_accum == 1 and shape.vocab_logits:
        lines.append(
            "logits: no gradient accumulation, so the loss's peak comes before the backward makes its gradients "
            "(DDP's, ZeRO-1/2's): counted beyond them only"
        )
    if shape.eager_attention:
        why = why_eager(shape.model_type)
        lines.append(
            f"eager attention: {eager_score_bytes(shape.model_type, shape.weight_bytes, shape.attention_dropout)} "
            "bytes per head x length^2 kept by each layer (attention_scores)"
            + (", with the config's attention dropout" if shape.attention_dropout else "")
            + (f"; {why}" if why else "")
        )
    return tuple(lines)


# bitsandbytes' 4-bit matmul (MatMul4Bit, its training path on every device) keeps only the quantized
# weight for the backward, no input: its layer keeps what a frozen layer keeps. Its 8-bit matmul on the GPU
# (MatMul8bitLt) keeps its 16-bit input whenever the input needs a gradient, as a trained linear does; the
# GPTQ/AWQ kernels are not read here. tests/stack/test_quantized_base_real.py holds the 4-bit case.
QUANT_KEEPS_NO_INPUT = frozenset({("bnb", 4)})


def frozen_base(shape: TrainShape) -> bool:
    """LoRA's base layers keep what frozen layers keep; a quantized base whose matmul keeps its input
    (bitsandbytes 8-bit, and GPTQ/AWQ, not read) is counted as a trained layer."""
    if shape.adapters is None:
        return False
    return not shape.quant_bits or (shape.quant_method, shape.quant_bits) in QUANT_KEEPS_NO_INPUT


def vision_checkpointed(shape: TrainShape) -> bool:
    """swift checkpoints the vision tower's blocks as it does the decoder's unless --vit_gradient_checkpointing
    says otherwise."""
    return shape.gradient_checkpointing if shape.vision_checkpointing is None else shape.vision_checkpointing


def planned_length(max_length: int | None) -> int:
    """The tokens a sample is sized at: --max_length (the plan's assumed length reads as it), else
    DEFAULT_SEQ_LEN."""
    return max_length or DEFAULT_SEQ_LEN


def logit_bytes(shape: TrainShape) -> float:
    """The logits' peak per token x vocabulary entry: what the loss saved and the backward's two gradients."""
    return layer_bytes(shape.model_type).logit_saved + LOGIT_GRADIENT_BYTES


def activation_parts(shape: TrainShape) -> dict[str, int]:
    """Per GPU: layer activations, eager attention scores, logits, the vision tower's activations, and the
    buffers of MoE expert dispatch and of sequence parallelism: every part in DATA_PARTS."""
    zero = {part: 0 for part in sorted(DATA_PARTS)}
    if not shape.hidden_size or not shape.num_layers:
        return zero
    scale = shape.weight_bytes / 2
    h, layers, tokens = shape.hidden_size, shape.num_layers, shape.tokens
    one_layer = tokens * layer_bytes_per_token(shape)
    if shape.gradient_checkpointing and shape.activation_offload:
        layer_acts = 2 * tokens * h * shape.weight_bytes + one_layer  # two checkpoints in flight + a recompute
    elif shape.gradient_checkpointing:
        layer_acts = tokens * h * shape.weight_bytes * layers + one_layer  # each checkpoint's input + a recompute
    else:
        layer_acts = one_layer * layers
    scores = 0.0
    if shape.eager_attention and not shape.packing and not shape.padding_free and shape.num_heads:
        # packing and padding_free run flash-attention's variable-length kernel: no length^2 term. Under
        # sequence parallelism (Ulysses) each GPU attends over the whole length for 1/S of the heads.
        heads = max(shape.num_heads // max(shape.sequence_parallel, 1), 1)
        per_layer = heads * (shape.batch_longest or shape.seq_len) ** 2 * shape.micro_batch
        saved_layers = 1 if shape.gradient_checkpointing else layers
        backward = EAGER_BACKWARD_FP32_BYTES + shape.weight_bytes
        saved = eager_score_bytes(shape.model_type, shape.weight_bytes, shape.attention_dropout)
        scores = per_layer * (saved * saved_layers + backward)
    # use_logits_to_keep: the head runs only on label positions; the worst case is every token a label
    logit_tokens = tokens * (shape.label_fraction if shape.logits_on_labels else 1.0)
    if not shape.vocab_logits:
        logits = 0.0
    elif shape.loss_chunk_tokens and not shape.fused_cross_entropy:
        # swift's ChunkedCrossEntropyLoss: the 16-bit logits and their gradient whole, the fp32 loss's
        # peak bytes (logit_bytes) one chunk at a time
        vocab = shape.vocab_size or 0
        chunk = min(shape.loss_chunk_tokens, logit_tokens)
        logits = logit_tokens * vocab * 4 + chunk * vocab * logit_bytes(shape)
    elif shape.fused_cross_entropy:
        # liger's fused linear cross-entropy works in chunks of about tokens x hidden / vocab rows: an fp32
        # chunk of logits and its gradient, about the size of one fp32 hidden state
        logits = logit_tokens * h * 8
    else:
        logits = logit_tokens * (shape.vocab_size or 0) * logit_bytes(shape)
    vision = 0.0
    if shape.image_pixels and shape.vision_hidden_size:
        images = shape.micro_batch if shape.batch_images is None else shape.batch_images
        patches = images * shape.image_pixels / shape.vision_patch_size**2
        vh = shape.vision_hidden_size
        vi = shape.vision_intermediate_size or 4 * vh
        per_layer_v = patches * vision_layer_bytes(shape.vision_type).per_token(vh, 0, 0, vi) * scale
        if not shape.vision_trainable:  # a frozen tower saves nothing: one block's transient
            vision = per_layer_v
        elif vision_checkpointed(shape):  # each block's input kept, one block recomputed at a time
            vision = patches * vh * shape.weight_bytes * (shape.vision_layers or 1) + per_layer_v
        else:
            vision = per_layer_v * (shape.vision_layers or 1)
    return {
        "gpu_activations": int(layer_acts),
        "gpu_attention_scores": int(scores),
        "gpu_logits": int(logits),
        "gpu_vision": int(vision),
        "gpu_moe_experts": moe_dispatch_bytes(shape),
        "gpu_sequence_parallel": sequence_parallel_bytes(shape),
    }


def moe_dispatch_bytes(shape: TrainShape) -> int:
    """--experts_impl batched_mm (transformers' `batched_mm_experts_forward`) indexes every routed expert's
    gate_up and down weights per token (`gate_up_proj[expert_ids]`), saved for the backward: tokens x top-k x
    3 x hidden x moe_intermediate per layer held. grouped_mm and eager run each expert's GEMM in place."""
    if shape.experts_impl != "batched_mm" or not shape.num_experts or not shape.moe_intermediate_size:
        return 0
    pairs = shape.tokens * (shape.experts_per_token or 1)
    held = 1 if shape.gradient_checkpointing else (shape.num_layers or 1)
    return int(pairs * 3 * (shape.hidden_size or 0) * shape.moe_intermediate_size * shape.weight_bytes * held)


def sequence_parallel_bytes(shape: TrainShape) -> int:
    """swift's sequence parallelism (swift/sequence_parallel): the full-length input embeddings before the
    split, and per layer the all-to-all copies (input and output, `torch.empty_like`) of q, k, v and the
    attention output (Ulysses); with ring attention also the k/v blocks in flight from the next peer."""
    if shape.sequence_parallel <= 1 or not shape.hidden_size:
        return 0
    h, w, tokens = shape.hidden_size, shape.weight_bytes, shape.tokens
    q, kv = attention_widths(shape)
    ulysses = 2 * (2 * q + 2 * kv) * tokens * w
    ring = 2 * 2 * kv * tokens * w if shape.sequence_ring else 0
    return int(shape.sample_tokens * h * w + ulysses + ring)


def activation_bytes(shape: TrainShape) -> int:
    """Per GPU: every activation part together."""
    return sum(activation_parts(shape).values())


def host_bytes(strategy: Strategy, shape: TrainShape, zero: ZeroSettings | None) -> int:
    """Host RAM per node for model states: DeepSpeed's estimators, with the config's offload sections."""
    trainable = shape.trainable_params
    if zero is None or strategy is Strategy.DDP:
        paged = trainable * 2 * moment_bytes(shape, shape.weight_bytes) if shape.optimizer_paged else 0
        return int((shape.total_params * shape.weight_bytes + paged) * shape.gpus_per_node)
    if zero.offload_param:
        return int((offloaded_optimizer_bytes(shape, zero) + offloaded_param_bytes(shape, zero)) * BUFFER_FACTOR)
    if zero.offload_optimizer:
        unpartitioned = 2 * shape.total_params * shape.gpus_per_node  # each process loads the whole model first
        return int(offloaded_optimizer_bytes(shape, zero) * BUFFER_FACTOR + unpartitioned)
    if zero.stage == 3:
        return int(shape.largest_layer_params * 4 * shape.gpus_per_node * BUFFER_FACTOR)
    return int(shape.total_params * 4 * shape.gpus_per_node * BUFFER_FACTOR)


def offloaded_optimizer_bytes(shape: TrainShape, zero: ZeroSettings) -> float:
    """Host RAM per node for an offloaded optimizer: its 16 bytes a trainable parameter (fp32 master, Adam's
    moments, fp32 gradients) in RAM, or, swapped to NVMe, the fp32 gradient partition and DeepSpeed's pinned
    swap buffers (buffer_count and one for gradients, each the largest sub-group of a partition)."""
    trainable = shape.trainable_params
    if zero.nvme is None or not zero.nvme.optimizer_buffers:
        return 16 * trainable / shape.nnodes
    partition = trainable / shape.total_gpus
    swapped = min(zero.sub_group_size, partition)
    return shape.gpus_per_node * 4 * (partition + (zero.nvme.optimizer_buffers + 1) * swapped)


def offloaded_param_bytes(shape: TrainShape, zero: ZeroSettings) -> float:
    """Host RAM per node for offloaded 16-bit parameters: all of them across the node's partitions, or,
    swapped to NVMe, what each process keeps in RAM (max_in_cpu of its partition) and its swap buffers."""
    if zero.nvme is None or not zero.nvme.param_buffer_elements:
        return 2 * shape.total_params / shape.nnodes
    partition = shape.total_params / shape.total_gpus
    kept = min(zero.nvme.param_max_in_cpu, partition)
    return shape.gpus_per_node * 2 * (kept + zero.nvme.param_buffer_elements)


def estimate(
    strategy: Strategy,
    shape: TrainShape,
    gpu_free_bytes: int | None,
    cpu_free_bytes: int | None,
    zero: ZeroSettings | None = None,
    calibration: Calibration | None = None,
) -> Estimate:
    """The estimate of one strategy; `zero` is the config's ZeRO settings (None for plain DDP)."""
    calibration = calibration or Calibration()
    runs_zero = zero if strategy is not Strategy.DDP else None
    parts = weight_parts(strategy, shape, runs_zero)
    data = activation_parts(shape)
    if shape.grad_accum == 1:
        # The logits' peak is the loss's backward, the first thing the backward runs: without accumulation
        # no gradient exists yet (the step set them to None); those made after it find the logits freed.
        fresh = backward_gradient_bytes(strategy, shape, runs_zero)
        data["gpu_logits"] = max(data["gpu_logits"] - fresh, 0)
    parts.update(data)
    parts["gpu_cuda_context"] = calibration.cuda_context_bytes
    # Without data the step's fp32 gradients are all on top of the rest; with it, the peak is the larger of
    # the backward's (activations, logits) and the step's, which never coexist: DeepSpeed makes the fp32
    # partition in step() and frees it after, when the backward's tensors are gone.
    step = parts.get("gpu_step_gradients", 0)
    fixed = sum(v for k, v in parts.items() if k not in DATA_PARTS)
    if step:
        parts["gpu_step_gradients"] = max(step - sum(data.values()), 0)
    subtotal = sum(parts.values())
    parts["gpu_fragmentation_margin"] = int(subtotal * calibration.fragmentation)
    gpu_need = sum(parts.values())
    gpu_fixed = fixed + int(fixed * calibration.fragmentation)
    states_cpu = host_bytes(strategy, shape, zero)
    host_processes = HOST_BYTES_PER_PROCESS * shape.gpus_per_node
    parts["cpu_model_states"] = states_cpu
    parts["cpu_processes"] = host_processes
    return Estimate(
        strategy=strategy,
        gpu_need_bytes=gpu_need,
        cpu_need_bytes=states_cpu + host_processes,
        gpu_free_bytes=gpu_free_bytes,
        cpu_free_bytes=cpu_free_bytes,
        parts=parts,
        gpu_fixed_bytes=gpu_fixed,
    )


def levers(
    strategy: Strategy, shape: TrainShape, zero: ZeroSettings | None, calibration: Calibration | None = None
) -> tuple[tuple[str, int], ...]:
    """What each one-setting change saves per GPU, the largest first: (description, bytes saved)."""
    base = estimate(strategy, shape, None, None, zero, calibration).gpu_need_bytes
    saved = [
        (text, base - estimate(strategy, changed, None, None, zero, calibration).gpu_need_bytes)
        for text, changed in lever_changes(shape)
    ]
    return tuple(sorted(((t, s) for t, s in saved if s > 0), key=lambda item: -item[1]))


def lever_changes(shape: TrainShape) -> list[tuple[str, TrainShape]]:
    """The one-setting changes the levers try, each with the shape it gives."""
    changes: list[tuple[str, TrainShape]] = []
    if shape.micro_batch > 1:
        half = max(shape.micro_batch // 2, 1)
        # as the ladder halves it: the accumulation doubles, and the global batch stays
        accum = shape.grad_accum and shape.grad_accum * shape.micro_batch // half
        halved = replace(shape, micro_batch=half, grad_accum=accum)
        changes.append((f"micro-batch {shape.micro_batch} -> {half}", halved))
    if shape.seq_len >= 512:
        half_len = shape.seq_len // 2
        changes.append((f"max_length {shape.seq_len} -> {half_len}", replace(shape, seq_len=half_len)))
    if not shape.gradient_checkpointing:
        changes.append(("gradient checkpointing on", replace(shape, gradient_checkpointing=True)))
    if shape.eager_attention and not transformers_runs_eager(shape.model_type):  # else sdpa is refused
        changes.append(("attn_impl eager -> sdpa", replace(shape, eager_attention=False)))
    if shape.weight_bytes == 4:
        changes.append(("torch_dtype float32 -> bfloat16", replace(shape, weight_bytes=2)))
    if shape.trainable_params == shape.total_params and shape.hidden_size and shape.num_layers:
        q_width, kv_width = attention_widths(shape)
        mlp = adapted_mlp_width(shape.intermediate_size, bool(shape.num_experts), shape.shared_expert_intermediate_size)
        linears = layer_linears(shape.model_type, shape.hidden_size, q_width, kv_width, mlp)
        lora = lora_trainable_params(linears, linears, shape.num_layers, 8)
        adapters = Adapters(inputs_of(linears, linears))
        changes.append(("LoRA rank 8 instead of full", replace(shape, trainable_params=lora, adapters=adapters)))
    if shape.trainable_params < shape.total_params and not shape.quant_bits:
        changes.append(
            ("4-bit base weights (--quant_method bnb --quant_bits 4)", replace(shape, quant_bits=4, quant_method="bnb"))
        )
    if shape.optimizer_bits >= 32 and not shape.optimizer_paged:
        changes.append(("8-bit AdamW (--optim adamw_bnb_8bit)", replace(shape, optimizer_bits=8)))
    if shape.vision_trainable:
        changes.append(("--freeze_vit true", replace(shape, vision_trainable=False)))
        if not vision_checkpointed(shape):
            changes.append(("--vit_gradient_checkpointing true", replace(shape, vision_checkpointing=True)))
    if shape.vocab_logits and not shape.fused_cross_entropy:
        changes.append(("--use_liger_kernel true", replace(shape, fused_cross_entropy=True)))
    doubled = 2 * shape.sequence_parallel
    if shape.seq_len >= 8192 and shape.total_gpus % doubled == 0 and shape.total_gpus >= doubled:
        changes.append(
            (
                f"--sequence_parallel_size {shape.sequence_parallel} -> {doubled}",
                replace(shape, sequence_parallel=doubled),
            )
        )
    return changes


CORRECTION_BOUNDS = (0.5, 2.0)  # a run's own measurement may move its estimate this far, no further


def measured_correction(attempts: Iterable[tuple[int | None, int, bool]]) -> float:
    """The factor this run's own measurements put on its estimates: (measured peak, estimate, died of OOM)
    per earlier attempt, the latest measured one deciding. A finished attempt gives peak / estimate; an OOM
    gives it only when above 1 (the peak when it died is a lower bound of the need). 1.0 when nothing
    was measured."""
    factor = 1.0
    for peak, need, oom in attempts:
        if not peak or need <= 0:
            continue
        ratio = peak / need
        if oom and ratio < 1.0:
            continue
        factor = min(max(ratio, CORRECTION_BOUNDS[0]), CORRECTION_BOUNDS[1])
    return factor


def corrected(est: Estimate, factor: float) -> Estimate:
    """`est` scaled by a run's measured correction, the difference a part of its own so the parts still add up."""
    if factor == 1.0:
        return est
    extra = int(est.gpu_need_bytes * (factor - 1.0))
    parts = {**est.parts, "gpu_measured_correction": extra}
    return replace(est, gpu_need_bytes=est.gpu_need_bytes + extra, parts=parts)
