"""A model's parameter count from config.json's shapes, for a folder without safetensors to count.

Contract: `config_params(shape)` gives (all parameters, the largest layer's) from a decoder's sizes: the
embeddings (and an untied output layer), each layer's attention and MLP (an MoE layer's routed experts,
shared experts and router). An approximation: norms and biases are left out, and a family whose layers
differ from this picture is off by what differs; safetensors headers or the weights' bytes, where there,
are exact (launcher.probe.model_size, launcher.probe.weight_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigShape:
    hidden: int
    layers: int
    intermediate: int
    vocab: int
    tied: bool = False
    num_experts: int | None = None
    moe_intermediate: int | None = None
    shared_intermediate: int | None = None


def config_params(shape: ConfigShape) -> tuple[int, int]:
    """(total parameters, the largest layer's parameters)."""
    h = shape.hidden
    embed = shape.vocab * h * (1 if shape.tied else 2)
    if shape.num_experts and shape.moe_intermediate:
        shared = shape.shared_intermediate or 0
        mlp = (shape.num_experts * shape.moe_intermediate + shared) * 3 * h + h * shape.num_experts  # + router
    else:
        mlp = 3 * h * shape.intermediate
    per_layer = 4 * h * h + mlp
    return embed + shape.layers * per_layer, max(per_layer, shape.vocab * h)
