"""The data's lengths in tokens, estimated from characters, and one micro-batch of them at a high percentile.

Contract: pure. `data_lengths(facts, ...)` turns the sampled rows (launcher.probe.dataset) into tokens per
sample as swift would train them (the templated conversation plus its images, capped or dropped at
max_length by `--truncation_strategy`), and into the tokens of one micro-batch at PERCENTILE: padded to
its longest sample without `--padding_free`, the sum of its samples with it, and max_length per sample
with `--packing` (nothing changes). No tokenizer is loaded: tokens come from characters by script.
The micro-batch figure is drawn from the sample with a fixed seed, so a plan is reproducible.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import replace
from itertools import accumulate

from launcher.model import DataFacts, DataLengths, DatasetSample, RowText, SampleStatus

# Tokens per character, by script (launcher.probe.dataset counts them by UTF-8 length). Byte-level BPE
# tokenizers with 100k+ vocabularies (Qwen2/2.5/3, Llama-3, DeepSeek-V3) write English prose at about 4
# characters a token (OpenAI's rule of thumb for cl100k, which Qwen's vocabulary extends; measured with
# Qwen's real tokenizer on real rows: 0.20 tokens a Latin character). Qwen writes 1.6 Chinese characters a
# token, so one token per wide (3-4 byte: CJK, kana, Hangul, Indic, Thai, emoji) character errs high for the
# Qwen family swift mostly trains, and covers the large vocabularies not measured (Llama-3's); the
# vocabularies poor in CJK take CJK_POOR_WIDE. Qwen and Llama-2 split numbers into single digits: one token a digit
# (high for Llama-3's 3-digit groups). 2-byte scripts (Cyrillic, Greek, Arabic, Hebrew, accented Latin)
# take about 2 characters a token in these vocabularies.
TOKENS_PER_CHAR = {"latin": 0.25, "wide": 1.0, "digits": 1.0, "other": 0.5}
# The vocabularies poor in CJK write a wide character as more tokens: measured with swift's own encoding of
# 2,897 real rows (tests/data/datasets, BENCHMARKS.md), Llama-2's 32k 1.48 a character and Falcon's 65k 1.28
# (Qwen's 151k: 0.61). Llama-1/2, Mistral v0.x and Phi-3 (a 32k SentencePiece vocabulary; Yi's 64k
# Llama-shaped one is rich in CJK), and Falcon, GPT-NeoX, MPT and Phi-1/2, whatever their size.
CJK_POOR_WIDE = 1.5
CJK_POOR_32K = frozenset({"llama", "mistral", "mixtral", "phi3"})
CJK_POOR = frozenset({"falcon", "RefinedWeb", "RefinedWebModel", "gpt_neox", "mpt", "phi"})
SMALL_VOCAB = 32_768
# The template: ChatML writes `<|im_start|>role\n` and `<|im_end|>\n` around each turn (5 tokens), Llama-3
# a header and `<|eot_id|>` (5); per row a BOS or the default system prompt (Qwen2.5's is 17 tokens).
TOKENS_PER_TURN = 5
TOKENS_PER_ROW = 24
# A row without its own system prompt gets the template's default (or --system): TOKENS_PER_ROW holds one
# of up to this many tokens (Qwen2.5's); a longer one (Llama-2's `llama` template: about 130 tokens with
# its tokenizer; Devstral's: over 1,000) adds the rest.
SYSTEM_IN_ROW = 17
# A row with tools: the agent template's preamble around their schemas (swift's hermes, Qwen's default:
# 85 tokens with Qwen's tokenizer, measured by encoding a row with and without one small tool)
TOKENS_FOR_TOOLS = 85
# A micro-batch above the 99th percentile comes about once in 100 steps: the fragmentation margin and
# the OOM ladder cover those; the max_length worst case is shown beside it.
PERCENTILE = 99
SHOWN_PERCENTILES = (50, 95, 99, 100)
DRAWS = 2000  # simulated micro-batches: 20 lie above the 99th percentile
SEED = 0


def wide_char_tokens(model_type: str | None, vocab_size: int | None) -> float:
    """Tokens one wide (CJK, kana, Hangul, ...) character takes in this model's vocabulary."""
    small = vocab_size is not None and vocab_size <= SMALL_VOCAB
    if model_type in CJK_POOR or (model_type in CJK_POOR_32K and small):
        return CJK_POOR_WIDE
    return TOKENS_PER_CHAR["wide"]


def _turn_tokens(row: RowText, wide: float) -> int:
    text = (
        row.latin * TOKENS_PER_CHAR["latin"]
        + row.wide * wide
        + row.digits * TOKENS_PER_CHAR["digits"]
        + row.other * TOKENS_PER_CHAR["other"]
    )
    return math.ceil(text) + row.messages * TOKENS_PER_TURN


def system_tokens(chars: tuple[int, int, int, int] | None, wide: float = TOKENS_PER_CHAR["wide"]) -> int:
    """What the default system prompt (DataFacts.default_system's characters) adds to a row without its own,
    beyond the SYSTEM_IN_ROW tokens TOKENS_PER_ROW holds."""
    if chars is None:
        return 0
    return max(_turn_tokens(RowText(*chars, messages=0), wide) - SYSTEM_IN_ROW, 0)


def row_tokens(
    row: RowText, image_tokens: int, wide: float = TOKENS_PER_CHAR["wide"], default_system: int = 0
) -> int | None:
    """Tokens of one templated row; None for a row with videos or audios (not estimated: max_length).
    `wide` is wide_char_tokens for the model; `default_system` what system_tokens gives the run."""
    if row.other_media:
        return None
    tools = TOKENS_FOR_TOOLS if row.tools else 0
    system = 0 if row.system else default_system
    return _turn_tokens(row, wide) + TOKENS_PER_ROW + system + row.images * image_tokens + tools


def longest_row(facts: DataFacts, image_tokens: int, wide: float = TOKENS_PER_CHAR["wide"]) -> int | None:
    """The longest sampled row's tokens where every dataset was sampled, else None. Rows whose length is
    not estimated (videos, audios, rows over the read limit) do not count: they stay at max_length."""
    if not facts.datasets or any(d.status is not SampleStatus.SAMPLED for d in facts.datasets):
        return None
    system = system_tokens(facts.default_system, wide)
    rows = (r for d in facts.datasets for r in d.rows)
    lengths = [n for r in rows if (n := row_tokens(r, image_tokens, wide, system)) is not None]
    return max(lengths, default=None)


def label_tokens(row: RowText, wide: float = TOKENS_PER_CHAR["wide"]) -> int:
    """Tokens of the row's assistant turns (the labels swift trains on, with each turn's end marker)."""
    return _turn_tokens(row.labels, wide) if row.labels else 0


def trained_lengths(length: int | None, max_length: int, truncation: str) -> list[int]:
    """What swift trains of a row this long: dropped (delete, the default), cut (left/right), or split."""
    if length is None:
        return [max_length]
    if length <= max_length:
        return [length]
    if truncation in ("left", "right"):
        return [max_length]
    if truncation == "split":
        full, rest = divmod(length, max_length)
        return [max_length] * full + ([rest] if rest else [])
    return []  # delete: swift drops the row


def weighted_percentiles(values: Sequence[int], weights: Sequence[float], percentiles: Sequence[float]) -> list[int]:
    """Nearest-rank percentiles of `values` where each counts `weights` times (one sort for them all)."""
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(w for _, w in pairs)
    cumulative = list(accumulate(w for _, w in pairs))
    out = []
    for percentile in percentiles:
        target = total * percentile / 100 - 1e-9 * total
        out.append(pairs[min(bisect_left(cumulative, target), len(pairs) - 1)][0])
    return out


def weighted_percentile(values: Sequence[int], weights: Sequence[float], percentile: float) -> int:
    return weighted_percentiles(values, weights, [percentile])[0]


def percentile_of(values: list[int], percentile: float) -> int:
    ordered = sorted(values)
    rank = max(math.ceil(len(ordered) * percentile / 100), 1)
    return ordered[rank - 1]


def dataset_weight(sample: DatasetSample) -> float:
    """How many rows swift trains on from this dataset: `#N`, else the rows in its file."""
    if sample.take is not None:
        return float(sample.take)
    return float(sample.rows_in_file or len(sample.rows) + sample.too_long)


def _batches(values: list[int], size: int) -> Iterator[tuple[int, ...]]:
    """Consecutive groups of `size` (the draws of one micro-batch each)."""
    return zip(*[iter(values)] * size, strict=False)


def micro_batch_at(
    lengths: Sequence[int],
    images: Sequence[int],
    weights: Sequence[float],
    micro_batch: int,
    padding_free: bool,
    percentile: int = PERCENTILE,
) -> tuple[int, int, int]:
    """(tokens, longest sample, images) of one micro-batch at `percentile`: drawn DRAWS times, or exactly for a
    padded text-only micro-batch (its longest of n samples is below x with probability F(x)^n)."""
    if not padding_free and not any(images):
        top = weighted_percentile(lengths, weights, 100 * (percentile / 100) ** (1 / micro_batch))
        return top * micro_batch, top, 0
    rng, population, k = random.Random(SEED), range(len(lengths)), DRAWS * micro_batch
    if min(weights) == max(weights):  # one dataset read whole: plain draws are twice as fast
        drawn = rng.choices(population, k=k)
    else:
        drawn = rng.choices(population, cum_weights=list(accumulate(weights)), k=k)
    drawn_lengths = list(map(lengths.__getitem__, drawn))
    longest = list(map(max, _batches(drawn_lengths, micro_batch)))
    if padding_free:
        tokens = list(map(sum, _batches(drawn_lengths, micro_batch)))
    else:
        tokens = [top * micro_batch for top in longest]
    pictures = list(map(sum, _batches(list(map(images.__getitem__, drawn)), micro_batch)))
    return percentile_of(tokens, percentile), percentile_of(longest, percentile), percentile_of(pictures, percentile)


def data_lengths(
    facts: DataFacts,
    *,
    max_length: int,
    truncation_strategy: str,
    micro_batch: int,
    padding_free: bool,
    packing: bool,
    image_tokens: int,
    max_length_assumed: bool = False,
    wide: float = TOKENS_PER_CHAR["wide"],
) -> DataLengths:
    sampled = [d for d in facts.datasets if d.status is SampleStatus.SAMPLED]
    lengths: list[int] = []
    labels: list[int] = []
    images: list[int] = []
    weights: list[float] = []
    longer = 0
    system = system_tokens(facts.default_system, wide)
    for dataset in sampled:
        mean = sum(r.weight for r in dataset.rows) / len(dataset.rows) if dataset.rows else 1.0
        rows = [
            (row_tokens(r, image_tokens, wide, system), label_tokens(r, wide), r.images, r.weight) for r in dataset.rows
        ]
        rows += [(None, max_length, 0, mean)] * dataset.too_long
        scale = dataset_weight(dataset) / max(sum(row[3] for row in rows), 1e-9)
        for length, label, pictures, weight in rows:
            longer += length is None or length > max_length
            for trained in trained_lengths(length, max_length, truncation_strategy):
                lengths.append(trained)
                # a cut or split row keeps its share of labels; a row not estimated (videos) is all labels
                labels.append(trained if length is None else min(trained, label * trained // max(length, 1)))
                images.append(pictures)
                weights.append(weight * scale)
    mode = "packing" if packing else "padding_free" if padding_free else "padded"
    base = DataLengths(
        datasets=facts.datasets,
        complete=bool(facts.datasets) and len(sampled) == len(facts.datasets),
        max_length=max_length,
        max_length_assumed=max_length_assumed,
        truncation_strategy=truncation_strategy,
        rows_sampled=sum(len(d.rows) + d.too_long for d in sampled),
        rows_malformed=sum(d.malformed for d in facts.datasets),
        longer_than_max_length=longer,
        image_tokens=image_tokens,
        mode=mode,
        micro_batch=micro_batch,
        worst_case_tokens=micro_batch * max_length,
        default_system_tokens=system,
    )
    if not lengths:
        return base
    shown = tuple(zip(SHOWN_PERCENTILES, weighted_percentiles(lengths, weights, SHOWN_PERCENTILES), strict=True))
    if packing:  # every packed sample is max_length tokens: the worst case is the case
        return replace(base, tokens_per_sample=shown, batch_tokens=micro_batch * max_length, batch_longest=max_length)
    tokens, top, pictures = micro_batch_at(lengths, images, weights, micro_batch, padding_free)
    # padding-free, swift's use_logits_to_keep computes logits at the label positions alone; padded, from the
    # batch's earliest first label on, which these figures do not follow: there the worst case stays
    label_batch = micro_batch_at(labels, [0] * len(labels), weights, micro_batch, True)[0] if padding_free else None
    return replace(
        base,
        tokens_per_sample=shown,
        batch_tokens=tokens,
        batch_longest=top,
        batch_images=pictures,
        batch_label_tokens=label_batch,
    )


def all_dropped_warning(lengths: DataLengths | None) -> str | None:
    """swift's default --truncation_strategy delete drops every row longer than max_length: where every sampled
    row is estimated longer, it is left with none and stops (a bare TypeError once the model has loaded).
    A warning, not a refusal: the lengths are estimated from characters, not swift's tokenizer."""
    if lengths is None or lengths.truncation_strategy != "delete" or lengths.max_length_assumed:
        return None
    if not lengths.rows_sampled or lengths.longer_than_max_length < lengths.rows_sampled:
        return None
    count = f"{lengths.rows_sampled:,} of {lengths.rows_sampled:,}"
    return (
        f"every sampled row ({count}) is estimated longer than max_length {lengths.max_length:,}: swift drops such "
        "rows (--truncation_strategy delete) and, with none left, stops; fix: raise --max_length, or cut them "
        "with --truncation_strategy right (or left)"
    )
