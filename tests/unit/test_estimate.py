"""The model-state part of the estimate equals DeepSpeed's own estimators for a full fine-tune."""

import math

# DeepSpeed's estimators are the golden values: without deepspeed these tests fail, never skip.
import deepspeed.runtime.zero.stage3 as ds_zero3
import deepspeed.runtime.zero.stage_1_and_2 as ds_zero2
import pytest

from launcher.model import Strategy
from launcher.plan.estimate import (
    LORA_LINEARS,
    TrainShape,
    activation_bytes,
    layer_linears,
    lora_trainable_params,
    model_state_bytes,
)


def shape(params: int, largest: int, gpus: int, nodes: int, trainable: int | None = None) -> TrainShape:
    return TrainShape(
        total_params=params,
        trainable_params=params if trainable is None else trainable,
        largest_layer_params=largest,
        hidden_size=None,
        num_layers=None,
        vocab_size=None,
        micro_batch=1,
        seq_len=2048,
        gradient_checkpointing=True,
        gpus_per_node=gpus,
        nnodes=nodes,
    )


SIZES = [
    pytest.param(494_032_768, 136_134_656, 1, 1, id="0.5B-1gpu"),
    pytest.param(7_615_616_512, 544_997_376, 8, 1, id="7B-8gpu"),
    pytest.param(7_615_616_512, 544_997_376, 4, 2, id="7B-2x4gpu"),
    pytest.param(72_706_203_648, 1_245_708_288, 8, 4, id="72B-4x8gpu"),
]


@pytest.mark.parametrize(("params", "largest", "gpus", "nodes"), SIZES)
def test_zero2_matches_deepspeed(params: int, largest: int, gpus: int, nodes: int) -> None:
    ds_cpu, ds_gpu = ds_zero2.estimate_zero2_model_states_mem_needs(params, gpus, nodes, cpu_offload=False)
    assert model_state_bytes(Strategy.ZERO2, shape(params, largest, gpus, nodes)) == (ds_gpu, ds_cpu)


@pytest.mark.parametrize(("params", "largest", "gpus", "nodes"), SIZES)
def test_zero3_matches_deepspeed(params: int, largest: int, gpus: int, nodes: int) -> None:
    ds_cpu, ds_gpu, _ = ds_zero3.estimate_zero3_model_states_mem_needs(params, largest, gpus, nodes, cpu_offload=False)
    assert model_state_bytes(Strategy.ZERO3, shape(params, largest, gpus, nodes)) == (ds_gpu, ds_cpu)


@pytest.mark.parametrize(("params", "largest", "gpus", "nodes"), SIZES)
def test_zero3_offload_matches_deepspeed(params: int, largest: int, gpus: int, nodes: int) -> None:
    ds_cpu, ds_gpu, _ = ds_zero3.estimate_zero3_model_states_mem_needs(
        params, largest, gpus, nodes, cpu_offload=True, cpu_offload_params=True, zero_init=True
    )
    gpu, cpu = model_state_bytes(Strategy.ZERO3_OFFLOAD, shape(params, largest, gpus, nodes))
    assert gpu == ds_gpu
    assert math.isclose(cpu, ds_cpu, abs_tol=1)  # same formula, float evaluation order differs


def test_lora_states_are_much_smaller_than_full() -> None:
    params = 7_615_616_512
    linears = layer_linears(None, 3584, 3584, 512, 18944)
    trainable = lora_trainable_params(linears, LORA_LINEARS, 28, rank=8)
    assert 10_000_000 < trainable < 50_000_000  # a rank-8 all-linear LoRA of a 7B model is ~20M
    full = model_state_bytes(Strategy.ZERO2, shape(params, 1, 1, 1))[0]
    lora = model_state_bytes(Strategy.ZERO2, shape(params, 1, 1, 1, trainable))[0]
    assert lora < full / 8
    assert lora >= 2 * params  # the frozen bf16 weights are still there


def test_gradient_checkpointing_cuts_activations() -> None:
    base = dict(
        total_params=1,
        trainable_params=1,
        largest_layer_params=1,
        hidden_size=4096,
        num_layers=32,
        vocab_size=0,
        micro_batch=4,
        seq_len=4096,
        gpus_per_node=1,
        nnodes=1,
    )
    with_ckpt = activation_bytes(TrainShape(**base, gradient_checkpointing=True))  # type: ignore[arg-type]
    without = activation_bytes(TrainShape(**base, gradient_checkpointing=False))  # type: ignore[arg-type]
    assert without > 10 * with_ckpt
    # 20h (norms, q, attention output, residuals) + 4 kv (k, v; no head counts: as wide as h) + 8i (SwiGLU
    # MLP) bytes per token per layer; i defaults to 4h: 56h
    assert without == 56 * 4 * 4096 * 4096 * 32
