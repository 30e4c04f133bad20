"""The families safe-sft takes as tying their output layer when config.json does not say
(launcher.probe.config_count.TIED_BY_DEFAULT) are those whose installed transformers config class ties by
default, for every decoder family transformers has whose models swift fine-tunes commonly."""

from __future__ import annotations

import pytest

from launcher.probe.config_count import TIED_BY_DEFAULT, tied_unstated

FAMILIES = sorted(
    TIED_BY_DEFAULT
    | {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "phimoe", "gpt_neox",
       "gptj", "phi", "olmo", "olmo2", "granite", "granitemoe", "deepseek_v3", "glm4", "stablelm", "codegen"}
)  # fmt: skip


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_tie_default_is_transformers_own(model_type: str) -> None:
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type]()
    text = config.get_text_config()
    assert tied_unstated(model_type) is bool(getattr(text, "tie_word_embeddings", config.tie_word_embeddings))
