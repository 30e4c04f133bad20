"""The config.json sizes safe-sft calls unusable, held against every default config of the installed transformers.

launcher/probe/model_size.py warns, naming the key, where a (text) config's size key holds no size (a string,
a bool, a fraction, a negative, or 0 for a key that needs a size). No config transformers itself writes for a
causal-LM or image-text-to-text model type may be flagged: a key whose 0 means "none" there (GLM-5's
head_dim, GraniteMoE's shared_intermediate_size) is allowed its 0.
"""

from __future__ import annotations

import pytest

from launcher.probe.model_size import _text_config, unusable_sizes


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A default config may name a hub checkpoint: never fetch it, and leave other tests' environment alone."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _decoder_default_configs() -> dict[str, dict[str, object]]:
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto

    found = {}
    for mapping in ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"):
        for model_type in getattr(modeling_auto, mapping):
            if model_type not in CONFIG_MAPPING:
                continue
            try:
                found[model_type] = CONFIG_MAPPING[model_type]().to_dict()
            except Exception:  # a config class that needs arguments has no default to hold
                continue
    return found


def test_no_default_config_of_transformers_is_flagged(stack_installed: None) -> None:
    configs = _decoder_default_configs()
    assert len(configs) > 200  # transformers 5.19 builds about 250 of them without arguments
    flagged = {name: bad for name, config in configs.items() if (bad := unusable_sizes(_text_config(config)))}
    assert flagged == {}
    zero_allowed = {name for name, config in configs.items() if _text_config(config).get("head_dim") == 0}
    assert zero_allowed, "no default config sets head_dim 0 any more: ZERO_MEANS_NONE_KEYS may be too wide"


@pytest.mark.parametrize(("key", "value"), [("hidden_size", "4096"), ("vocab_size", 0), ("num_hidden_layers", 2.5)])
def test_a_damaged_default_config_is_flagged(stack_installed: None, key: str, value: object) -> None:
    """The same check on a real default config with one size damaged: it names that key alone."""
    config = _text_config(_decoder_default_configs()["llama"])
    assert unusable_sizes({**config, key: value}) == [f"{key} {value!r}".replace("'", '"')]
