"""The parameter count from config.json as safe-sft computed it at commit 32c1c5d, kept as the baseline
scripts/bench_model_configs.py measures today's against: Llama's keys only, every layer's attention 4 x
hidden^2 (no GQA, no head_dim), a gated MLP of intermediate_size, embeddings untied unless config.json says
so, no vision tower."""

from __future__ import annotations

from collections.abc import Mapping


def _int(config: Mapping[str, object], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def count(config: Mapping[str, object]) -> int | None:
    text: Mapping[str, object] = config
    for key in ("text_config", "llm_config", "language_config"):
        sub = config.get(key)
        if isinstance(sub, Mapping) and "hidden_size" in sub:
            text = sub
    hidden = _int(text, "hidden_size", "n_embd", "d_model")
    layers = _int(text, "num_hidden_layers", "n_layer", "num_layers")
    intermediate = _int(text, "intermediate_size", "ffn_dim", "n_inner")
    vocab = _int(text, "vocab_size")
    if not (hidden and layers and intermediate and vocab):
        return None
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    experts = _int(text, "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
    width = _int(text, "moe_intermediate_size", "expert_intermediate_size", "expert_ffn_hidden_size") or intermediate
    if experts and experts >= 2:
        shared = _int(text, "shared_expert_intermediate_size", "shared_intermediate_size")
        if shared is None and (n_shared := _int(text, "n_shared_experts", "num_shared_experts")):
            shared = n_shared * width
        mlp = (experts * width + (shared or 0)) * 3 * hidden + hidden * experts
    else:
        mlp = 3 * hidden * intermediate
    return vocab * hidden * (1 if tied else 2) + layers * (4 * hidden * hidden + mlp)
