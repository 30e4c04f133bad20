"""config.json read as each family means it, on hand-written configs of real shapes."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.probe.model_size import probe_model

# tiiuae/falcon-7b's config.json as transformers 4.30 rewrote it: num_kv_heads copies the query heads, and
# multi_query (without new_decoder_architecture) makes one k/v head, as FalconAttention builds it
FALCON_7B = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
             "num_kv_heads": 71, "multi_query": True, "new_decoder_architecture": False, "vocab_size": 65024,
             "torch_dtype": "bfloat16"}  # fmt: skip


def _facts(tmp_path: Path, config: dict[str, object]):  # type: ignore[no-untyped-def]
    (tmp_path / "config.json").write_text(json.dumps(config))
    return probe_model(str(tmp_path), {}, tmp_path)


def test_falcon_multi_query_is_one_kv_head_and_a_plain_4h_mlp(tmp_path: Path) -> None:
    facts = _facts(tmp_path, FALCON_7B)
    assert (facts.num_key_value_heads, facts.intermediate_size) == (1, 4 * 4544)
    h, head_dim = 4544, 64
    layer = (2 * h * h + 2 * h * head_dim) + 2 * h * 4 * h  # q, o, one k/v head; up and down
    assert facts.total_params == 32 * layer + 2 * 65024 * h  # falcon-7b: 7.22B


def test_falcon_new_decoder_architecture_keeps_its_kv_heads(tmp_path: Path) -> None:
    config = {**FALCON_7B, "num_kv_heads": 8, "new_decoder_architecture": True}
    assert _facts(tmp_path, config).num_key_value_heads == 8


def test_qwen1_intermediate_size_is_its_two_projections_summed_in_the_count(tmp_path: Path) -> None:
    config = {"model_type": "qwen", "hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 22016,
              "vocab_size": 151936, "num_attention_heads": 32, "kv_channels": 128}  # fmt: skip
    facts = _facts(tmp_path, config)
    assert facts.intermediate_size == 22016  # the estimate's layers take it as written (launcher.probe.model_size)
    h, layers, vocab = 4096, 32, 151936
    assert facts.total_params == 2 * vocab * h + layers * (4 * h * h + 3 * h * 11008)  # w1, w2, c_proj: 11008 each


def test_gemma_ties_its_output_layer_unless_config_says(tmp_path: Path) -> None:
    config = {"model_type": "gemma", "hidden_size": 3072, "num_hidden_layers": 28, "intermediate_size": 24576,
              "vocab_size": 256000, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256}  # fmt: skip
    assert _facts(tmp_path, config).tie_word_embeddings is True
    assert _facts(tmp_path, {**config, "tie_word_embeddings": False}).tie_word_embeddings is False
