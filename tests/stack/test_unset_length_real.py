"""The limit ms-swift 4.6 trains a sample up to when `--max_length` is not given, held against its code.

launcher/probe/model_size.py reads max_model_len from config.json as swift does; swift sets max_length to it
when the user gives none. Both are read here from the installed swift.
"""

from __future__ import annotations

import inspect

import pytest

from launcher.probe.model_size import max_model_len_of

CONFIGS = [
    {"max_position_embeddings": 32768},
    {"max_position_embeddings": 32768, "seq_length": 8192},
    {"n_positions": 2048, "model_max_length": 4096},
    {"text_config": {"hidden_size": 64, "max_position_embeddings": 128000}},
    {"hidden_size": 64},
]


@pytest.mark.parametrize("config", CONFIGS)
def test_the_models_limit_is_swifts(stack_installed: None, config: dict[str, object]) -> None:
    from swift.utils.hf_config import HfConfigFactory

    assert max_model_len_of(config) == HfConfigFactory.get_max_model_len(config)


def test_swift_trains_up_to_that_limit_without_max_length(stack_installed: None) -> None:
    from swift.arguments.base_args import base_args

    source = inspect.getsource(base_args)
    assert "if self.max_length is None and self.model_info is not None:" in source
    assert "self.max_length = self.model_info.max_model_len" in source
