"""The plan's LoRA parameter count held against swift's own target search and peft (real, on the CPU).

`swift sft --tuner_type lora` adapts what swift's `find_all_linears` returns for `all-linear` (modules whose
class name says Linear), or the parameters `--target_parameters` names (peft's ParamWrapper). transformers 5
keeps an MoE layer's routed experts as fused 3-D parameters, so all-linear reaches only attention and the
shared experts' MLP. The plan reads config.json alone (launcher/plan/features.py); its count must be what
peft makes trainable on the model built from that config. The models have grouped k/v heads and heads wider
than hidden / heads, so k, v and q are each their own width.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from launcher.plan.features import lora_adapters, lora_params, trainable_params
from launcher.plan.swift_args import parse_swift_argv
from launcher.probe.model_size import probe_model

RANK = 8
BASE = {
    "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 96, "vocab_size": 1000, "intermediate_size": 704, "pad_token_id": 0, "bos_token_id": 1,
    "eos_token_id": 2,
}  # fmt: skip
CASES = [
    ("llama", {}, ()),
    ("mixtral", {"num_local_experts": 8, "num_experts_per_tok": 2}, ()),
    ("qwen3_moe", {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128}, ()),
    (
        "qwen2_moe",
        {
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 128,
            "shared_expert_intermediate_size": 384,
        },
        (),
    ),
    (
        "qwen3_moe",
        {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128},
        ("mlp.experts.gate_up_proj", "mlp.experts.down_proj"),
    ),
]
# Families that name or fuse their linears otherwise (launcher.plan.estimate.FAMILY_LINEARS): Phi-3's
# qkv_proj and gate_up_proj, GLM-4's gate_up_proj, GPT-NeoX's query_key_value and ungated MLP, Phi-2's and
# StarCoder2's ungated MLPs. Their q is hidden wide (head_dim = hidden / heads, as most of their configs
# derive it); GPT-NeoX has no grouped k/v heads.
FAMILY_CASES = [
    ("phi3", {"head_dim": 64}),
    ("glm4", {"head_dim": 64}),
    ("gpt_neox", {"head_dim": None, "num_key_value_heads": None}),
    ("phi", {"head_dim": None}),
    ("starcoder2", {"head_dim": None}),
]
CASES += [(model_type, fields, ()) for model_type, fields in FAMILY_CASES]
# Linears the plan leaves out: Qwen2-MoE's 1-wide sigmoid gate on the shared experts (rank x (h + 1) per
# layer, under 0.1 % of the adapters at real sizes), and GPT-NeoX's output layer, named embed_out, which
# swift's all-linear skips only under the name lm_head (ms-swift registers no GPT-NeoX model).
UNCOUNTED = ("shared_expert_gate", "embed_out")


def peft_trainable(model_type: str, config: dict[str, Any], parameters: tuple[str, ...], use_dora: bool = False) -> int:
    """Parameters peft trains with swift's all-linear targets, rank RANK, on the model built from `config`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from swift.utils.transformers_utils import find_all_linears
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    fields = {k: v for k, v in config.items() if k != "model_type" and v is not None}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **fields))
    model.model_meta = SimpleNamespace(model_arch=None)  # what swift's loader attaches; no arch: lm_head skipped
    targets = [name for name in find_all_linears(model) if not name.endswith(UNCOUNTED)]
    lora = LoraConfig(r=RANK, target_modules=targets, target_parameters=list(parameters) or None, use_dora=use_dora)
    adapted = get_peft_model(model, lora)
    return sum(p.numel() for p in adapted.parameters() if p.requires_grad)


@pytest.mark.parametrize(
    ("model_type", "routing", "parameters"),
    CASES,
    ids=[f"{case[0]}{'-target_parameters' if case[2] else ''}" for case in CASES],
)
def test_the_plans_lora_count_is_what_peft_trains(
    stack_installed: None, tmp_path: Path, model_type: str, routing: dict[str, Any], parameters: tuple[str, ...]
) -> None:
    config = {**BASE, **routing, "model_type": model_type}
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    ours, unknown = lora_params(facts, RANK, ("all-linear",), llm=True, vision=False, parameters=parameters)
    assert unknown == ()
    assert ours == peft_trainable(model_type, config, parameters)


def test_dora_trains_a_magnitude_per_adapted_output(stack_installed: None, tmp_path: Path) -> None:
    """`--use_dora true`: peft's DoRA layer adds a magnitude vector, one entry per output, to each adapted
    linear; the plan's trainable count (launcher.plan.features.trainable_params) is what peft trains."""
    config = {**BASE, "model_type": "llama"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    facts = probe_model(str(tmp_path), {}, tmp_path)
    args = parse_swift_argv(["--tuner_type", "lora", "--lora_rank", str(RANK), "--use_dora", "true"])
    ours, _, warnings = trainable_params(args, facts, lora_adapters(args, facts))
    assert warnings == ()
    assert ours == peft_trainable("llama", config, (), use_dora=True) > peft_trainable("llama", config, ())
