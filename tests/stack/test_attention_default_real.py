"""The attention a run gets without `--attn_impl`, held against the installed transformers and ms-swift.

launcher/plan/attention_default.py lists the model types that run eager attention when none is asked
for: those whose transformers class has no sdpa path, and those ms-swift's loaders give eager. Both are
read again here from the real code, so a new transformers or swift that changes them fails this test.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from launcher.plan.attention_default import SWIFT_EAGER, TRANSFORMERS_EAGER

# State-space and recurrent models: no sdpa path, and no attention scores either (their code has no softmax).
ATTENTION_FREE = {"mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm"}
# Architectures swift forces to eager whose code is remote (trust_remote_code): their model_type is unknown
# to transformers, so the plan cannot recognise them (attention_default.py says so).
REMOTE_CODE = {"Spark2_5ForCausalLM"}


def _no_sdpa_model_types() -> set[str]:
    import transformers
    from transformers.models.auto import modeling_auto

    found = set()
    for mapping in ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"):
        for model_type, class_name in getattr(modeling_auto, mapping).items():
            if not getattr(getattr(transformers, class_name), "_supports_sdpa", False):
                found.add(model_type)
    return found


def test_the_models_transformers_runs_eager_are_the_list(stack_installed: None) -> None:
    no_sdpa = _no_sdpa_model_types()
    assert no_sdpa >= ATTENTION_FREE
    for model_type in ATTENTION_FREE:
        module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
        assert "softmax(" not in inspect.getsource(module), model_type
    assert no_sdpa - ATTENTION_FREE == TRANSFORMERS_EAGER


@pytest.mark.parametrize(("model_type", "expected"), [("bloom", "eager"), ("gpt_oss", "eager"), ("llama", "sdpa")])
def test_transformers_falls_back_to_eager_without_an_sdpa_path(
    stack_installed: None, model_type: str, expected: str
) -> None:
    """A tiny model built with no attention implementation asked for runs what the list says."""
    from transformers import AutoConfig, AutoModelForCausalLM

    sizes = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 128}
    if model_type == "bloom":
        sizes = {"hidden_size": 64, "n_head": 4, "n_layer": 1, "vocab_size": 128}
    else:
        sizes |= {"intermediate_size": 128, "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **sizes))
    assert model.config._attn_implementation == expected
    assert (model_type in TRANSFORMERS_EAGER) == (expected == "eager")


def _architecture_model_types() -> dict[str, str]:
    from transformers.models.auto import modeling_auto

    found: dict[str, str] = {}
    for name in dir(modeling_auto):
        mapping = getattr(modeling_auto, name)
        if name.endswith("_MAPPING_NAMES") and isinstance(mapping, dict):
            for model_type, class_name in mapping.items():
                if isinstance(class_name, str):
                    found.setdefault(class_name, model_type)
    return found


def test_the_models_swift_loads_with_eager_are_the_list(stack_installed: None) -> None:
    """Every swift loader that sets attn_impl to eager itself, by its architectures' model_type."""
    from swift.model.register import MODEL_MAPPING, ModelLoader

    forced: set[str] = set()
    for meta in MODEL_MAPPING.values():
        own = [cls for cls in meta.loader.__mro__ if issubclass(cls, ModelLoader) and cls is not ModelLoader]
        if any(re.search(r"attn_impl = .*'eager'", inspect.getsource(cls)) for cls in own):
            forced.update(meta.architectures)
    assert forced, "no swift loader sets eager attention: the test reads swift's code wrongly"
    model_types = _architecture_model_types()
    assert {a for a in forced if a not in model_types} == REMOTE_CODE
    assert {model_types[a] for a in forced if a in model_types} == SWIFT_EAGER
