"""Which attention a run gets when `--attn_impl` is not given: eager (every layer's scores materialised,
quadratic in the length) or a fused kernel (sdpa).

Contract: pure data and three lookups, by config.json's model_type.
- `transformers_runs_eager(model_type)`: transformers (5.19, as ms-swift 4.6 installs it) falls back to
  eager for a model class with no sdpa path: BLOOM, GPT-J, GPT-Neo, MPT, CodeGen, gpt-oss, DeepSeek-V4, ...
- `swift_runs_eager(model_type)`: that, and the models ms-swift 4.6's own loaders give eager attention
  (Gemma-3, text and vision, "strongly recommended" by swift; HunYuan-VL).
- `why_eager(model_type)`: which of the two, in words, for `plan --explain-memory`.
Attention-free models (Mamba, RWKV, xLSTM) have no sdpa path and no scores either: they are not listed.
Remote-code models (trust_remote_code) are not known here; they count as sdpa.
tests/stack/test_attention_default_real.py reads both lists again from the installed transformers and swift.
"""

from __future__ import annotations

# Causal-LM and image-text-to-text classes whose `_supports_sdpa` is False, and which attend.
TRANSFORMERS_EAGER = frozenset(
    {
        "big_bird",
        "bigbird_pegasus",
        "blip",
        "bloom",
        "codegen",
        "cpmant",
        "deepseek_v4",
        "git",
        "got_ocr2",
        "gpt_neo",
        "gpt_neox_japanese",
        "gpt_oss",
        "gptj",
        "granite_swa",
        "granitemoe_swa",
        "hy_v4",
        "megatron-bert",
        "mimo_v2_flash",
        "mpt",
        "mvp",
        "openai-gpt",
        "pp_chart2table",
        "prophetnet",
        "reformer",
        "rembert",
        "roformer",
        "trocr",
        "xglm",
        "xlm",
        "xlnet",
    }
)
# The model types of the architectures whose ms-swift loader sets attn_impl to eager when none is given.
SWIFT_EAGER = frozenset({"gemma3", "gemma3_text", "hunyuan_vl"})


def transformers_runs_eager(model_type: str | None) -> bool:
    """transformers, asked for no attention implementation, runs this model's eager attention."""
    return model_type in TRANSFORMERS_EAGER


def swift_runs_eager(model_type: str | None) -> bool:
    """`swift sft` without --attn_impl runs this model's eager attention."""
    return model_type in SWIFT_EAGER or transformers_runs_eager(model_type)


def why_eager(model_type: str | None) -> str | None:
    """Why `swift sft` without --attn_impl runs this model's eager attention, or None where it does not."""
    if model_type in SWIFT_EAGER:
        return f"ms-swift's loader gives {model_type} eager attention when --attn_impl is unset"
    if transformers_runs_eager(model_type):
        return f"transformers has no sdpa path for {model_type}: --attn_impl unset, it runs eager"
    return None
