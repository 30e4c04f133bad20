"""A frozen copy of launcher/plan/estimate.py at commit 566cec5 (the estimate before issue 11), for
scripts/bench_memory.py to compare against. Not used by safe-sft.

Memory each ZeRO strategy needs, per GPU and per node's host RAM.

Model states follow DeepSpeed's own estimators (stage_1_and_2 / stage3 `estimate_*_mem_needs`) and
reduce to them exactly for a full fine-tune; for LoRA and partial tuning only trainable parameters carry
gradients and optimizer state (18 bytes each), frozen ones only their 2-byte weights. On top of that:
activations, logits, the CUDA context, and a fragmentation margin. These are planning numbers, not
promises: the ladder in launcher.run.degrade handles what they miss.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.model import Estimate, Strategy
from launcher.units import GiB

BUFFER_FACTOR = 1.5  # DeepSpeed's additional_buffer_factor for host memory
CUDA_CONTEXT_BYTES = 1 * GiB  # CUDA context, cuBLAS/NCCL workspaces per process
FRAGMENTATION_MARGIN = 0.10  # the caching allocator rarely packs tighter than this
HOST_BYTES_PER_PROCESS = 3 * GiB  # python, torch, the tokenizer and dataloader per training process
DEFAULT_SEQ_LEN = 2048
ACT_BYTES_PER_TOKEN_HIDDEN_LAYER = 34  # bf16 transformer layer with flash attention (Korthikanti et al.)
LORA_FALLBACK_FRACTION = 0.01


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


def lora_trainable_params(
    total_params: int,
    hidden_size: int | None,
    intermediate_size: int | None,
    num_layers: int | None,
    rank: int,
) -> int:
    """LoRA on every linear of each layer (swift's default `all-linear`): rank x (in + out) per linear."""
    if hidden_size and intermediate_size and num_layers:
        h, i = hidden_size, intermediate_size
        per_layer = rank * (4 * (h + h) + 3 * (h + i))  # q k v o, gate up down
        return num_layers * per_layer
    return int(total_params * LORA_FALLBACK_FRACTION)


def model_state_bytes(strategy: Strategy, shape: TrainShape) -> tuple[int, int]:
    """(GPU bytes per GPU, host bytes per node) of weights, gradients and optimizer state."""
    total_gpus = shape.gpus_per_node * shape.nnodes
    trainable = shape.trainable_params
    frozen = shape.total_params - trainable
    largest = shape.largest_layer_params
    if strategy is Strategy.ZERO2:
        gpu = 2 * shape.total_params + int(18 * trainable / total_gpus)
        cpu = shape.total_params * 4 * shape.gpus_per_node * BUFFER_FACTOR
    elif strategy is Strategy.ZERO3:
        gpu = 4 * largest + int((18 * trainable + 2 * frozen) / total_gpus)
        cpu = largest * 4 * shape.gpus_per_node * BUFFER_FACTOR
    else:
        gpu = 4 * largest
        cpu = (18 * trainable + 2 * frozen) / shape.nnodes * BUFFER_FACTOR
    return gpu, int(cpu)


def activation_bytes(shape: TrainShape) -> int:
    """Per GPU: layer activations (all layers, or one layer plus checkpoints) and fp32 logits."""
    if not shape.hidden_size or not shape.num_layers:
        return 0
    tokens = shape.micro_batch * shape.seq_len
    per_layer = ACT_BYTES_PER_TOKEN_HIDDEN_LAYER * tokens * shape.hidden_size
    if shape.gradient_checkpointing:
        layers = 2 * tokens * shape.hidden_size * shape.num_layers + per_layer
    else:
        layers = per_layer * shape.num_layers
    logits = 8 * tokens * (shape.vocab_size or 0)  # fp32 logits and their gradient
    return layers + logits


def estimate(strategy: Strategy, shape: TrainShape, gpu_free_bytes: int | None, cpu_free_bytes: int | None) -> Estimate:
    states_gpu, states_cpu = model_state_bytes(strategy, shape)
    activations = activation_bytes(shape)
    subtotal = states_gpu + activations + CUDA_CONTEXT_BYTES
    margin = int(subtotal * FRAGMENTATION_MARGIN)
    host_processes = HOST_BYTES_PER_PROCESS * shape.gpus_per_node
    return Estimate(
        strategy=strategy,
        gpu_need_bytes=subtotal + margin,
        cpu_need_bytes=states_cpu + host_processes,
        gpu_free_bytes=gpu_free_bytes,
        cpu_free_bytes=cpu_free_bytes,
        parts={
            "gpu_model_states": states_gpu,
            "gpu_activations": activations,
            "gpu_cuda_context": CUDA_CONTEXT_BYTES,
            "gpu_fragmentation_margin": margin,
            "cpu_model_states": states_cpu,
            "cpu_processes": host_processes,
        },
    )
