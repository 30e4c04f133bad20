"""The tokens per sample a plan assumes when `--max_length` is not given.

Contract: pure. ms-swift 4.6 then trains every sample up to the model's own limit (max_model_len: the
smallest of config.json's length keys, swift/arguments/base_args/base_args.py), which is far above what
most runs meet. The plan assumes DEFAULT_SEQ_LEN, or, where every dataset was sampled and its longest row
is longer, that row's length, capped at the model's limit: swift trains such a row whole, not cut.
`assumed_length` gives that length (None: the default stands, or max_length is given); `unset_note` says
what was assumed.
"""

from __future__ import annotations

from collections.abc import Mapping

from launcher.model import DataFacts, ModelFacts
from launcher.plan.data_lengths import longest_row, wide_char_tokens
from launcher.plan.estimate import DEFAULT_SEQ_LEN
from launcher.plan.features import image_pixels, image_token_side
from launcher.plan.swift_args import SwiftArgs

UNBOUNDED = 1 << 30  # a model whose config names no limit: its images are not clamped by one


def assumed_length(
    swift: SwiftArgs, model: ModelFacts | None, data: DataFacts | None, env: Mapping[str, str]
) -> int | None:
    """The length to plan for in place of DEFAULT_SEQ_LEN, or None where that stands."""
    if swift.batch.max_length is not None or model is None or data is None:  # given, or the trainer's default
        return None
    limit = model.max_model_len
    tokens = 0
    if model.is_multimodal and model.vision_hidden_size:
        at_limit = swift.with_defaults({"max_length": str(limit or UNBOUNDED)})
        tokens = image_pixels(at_limit, model, env) // image_token_side(model) ** 2
    longest = longest_row(data, tokens, wide_char_tokens(model.decoder_type, model.vocab_size))
    if longest is None or longest <= DEFAULT_SEQ_LEN:
        return None
    return min(longest, limit) if limit else longest


def unset_note(assumed: int | None, model: ModelFacts | None) -> str:
    """The plan's note for an unset --max_length."""
    limit = model.max_model_len if model else None
    swift_limit = f"the model's {limit:,} tokens" if limit else "the model's own limit"
    if assumed is None:
        return (
            f"--max_length not set: activations estimated for {DEFAULT_SEQ_LEN} tokens per sample (swift trains "
            f"up to {swift_limit}; a sampled row above {DEFAULT_SEQ_LEN} would raise this)"
        )
    return (
        f"--max_length not set: swift trains up to {swift_limit}, so activations are estimated for "
        f"{assumed:,} tokens per sample, the longest sampled row (at most that limit)"
    )
