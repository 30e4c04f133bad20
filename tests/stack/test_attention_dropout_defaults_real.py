"""The attention dropout a config gets when config.json names none, held against the installed transformers.

launcher/probe/model_size.py reads a config's attention dropout from its keys, and where it sets none, from
DROPOUT_BY_DEFAULT: the generative model types whose config class defaults to a dropout above 0. Every such
class is built here with its defaults, so a transformers that changes one fails this test.
"""

from __future__ import annotations

import copy
import warnings

from launcher.probe.model_size import ATTENTION_DROPOUT_KEYS, DROPOUT_BY_DEFAULT, attention_dropout_of


def _class_defaults() -> dict[str, dict[str, object]]:
    """Each generative model type's config as its class builds it with no arguments, as a dict. A class that
    needs arguments (a composite of two models, say) is left out; the tests check that few are."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto

    generative = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    generative |= set(modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)
    found: dict[str, dict[str, object]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type in sorted(generative & set(CONFIG_MAPPING.keys())):
            try:
                found[model_type] = CONFIG_MAPPING[model_type]().to_dict()
            except (TypeError, ValueError, StrictDataclassError):
                continue
    assert len(found) > 0.95 * len(generative), f"only {len(found)} of {len(generative)} config classes built"
    return found


def _without_dropout_keys(config: dict[str, object]) -> dict[str, object]:
    """The config as a hand-made config.json would give it: no dropout key, in it or in its text config."""
    config = copy.deepcopy(config)
    for part in (config, config.get("text_config")):
        if isinstance(part, dict):
            for key in ATTENTION_DROPOUT_KEYS:
                part.pop(key, None)
    return config


def _drops(config: dict[str, object]) -> bool:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, dict)
    value = next((text[key] for key in ATTENTION_DROPOUT_KEYS if key in text), 0)
    return isinstance(value, int | float) and value > 0


def test_the_model_types_that_drop_by_default_are_the_installed_classes() -> None:
    dropping = {model_type for model_type, config in _class_defaults().items() if _drops(config)}
    assert dropping == DROPOUT_BY_DEFAULT, (
        f"add {sorted(dropping - DROPOUT_BY_DEFAULT)}, drop {sorted(DROPOUT_BY_DEFAULT - dropping)}"
    )


def test_a_config_without_dropout_keys_reads_as_its_class_default() -> None:
    configs = _class_defaults()
    wrong = [
        t for t, config in configs.items() if attention_dropout_of(_without_dropout_keys(config)) != _drops(config)
    ]
    assert len(configs) > 200 and wrong == []
