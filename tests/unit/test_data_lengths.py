"""Tokens from characters, swift's truncation, and one micro-batch at the 99th percentile; the plan's use of it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from launcher.model import DataFacts, DatasetSample, ModelFacts, RowText, SampleStatus, Strategy
from launcher.plan.build import LaunchPaths, build_plan
from launcher.plan.data_lengths import (
    SYSTEM_IN_ROW,
    TOKENS_PER_ROW,
    TOKENS_PER_TURN,
    data_lengths,
    longest_row,
    micro_batch_at,
    row_tokens,
    system_tokens,
    trained_lengths,
    weighted_percentile,
)
from launcher.plan.estimate import TrainShape, activation_parts
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from tests.conftest import gpus, host

OVERHEAD = 2 * TOKENS_PER_TURN + TOKENS_PER_ROW  # one user and one assistant turn


def text_row(tokens: int, images: int = 0) -> RowText:
    """A two-turn row of `tokens` text tokens (4 Latin characters a token)."""
    return RowText(latin=4 * (tokens - OVERHEAD), wide=0, digits=0, other=0, messages=2, images=images)


def facts(*rows: RowText, take: int | None = None, extra: tuple[DatasetSample, ...] = ()) -> DataFacts:
    sample = DatasetSample("d.jsonl", SampleStatus.SAMPLED, "d.jsonl", take, rows=rows, rows_in_file=len(rows))
    return DataFacts(datasets=(sample, *extra))


def test_tokens_by_script_plus_the_template() -> None:
    assert row_tokens(RowText(400, 0, 0, 0, 2), 0) == 100 + OVERHEAD
    assert row_tokens(RowText(0, 100, 0, 0, 2), 0) == 100 + OVERHEAD
    assert row_tokens(RowText(0, 0, 10, 20, 2), 0) == 10 + 10 + OVERHEAD
    assert row_tokens(RowText(0, 0, 0, 0, 2, images=3), 256) == 3 * 256 + OVERHEAD
    assert row_tokens(RowText(0, 0, 0, 0, 2, other_media=True), 0) is None


def test_a_long_default_system_prompt_adds_to_rows_without_their_own() -> None:
    """swift writes the template's default system prompt (or --system) into every row without its own:
    TOKENS_PER_ROW holds SYSTEM_IN_ROW tokens of it, a longer one adds the rest (Llama-2's `llama` template:
    507 characters)."""
    assert system_tokens(None) == 0
    assert system_tokens((28, 0, 0, 0)) == 0  # swift's `qwen`: "You are a helpful assistant."
    llama = system_tokens((507, 0, 0, 0))
    assert llama == math.ceil(507 / 4) - SYSTEM_IN_ROW
    assert system_tokens((0, 100, 0, 0), wide=1.5) == 150 - SYSTEM_IN_ROW
    own = RowText(400, 0, 0, 0, 3, system=True)
    assert row_tokens(RowText(400, 0, 0, 0, 2), 0, default_system=llama) == 100 + OVERHEAD + llama
    assert row_tokens(own, 0, default_system=llama) == row_tokens(own, 0)
    with_default = replace(facts(text_row(300), own), default_system=(507, 0, 0, 0))
    assert longest_row(with_default, 0) == 300 + llama
    lengths = data_lengths(with_default, max_length=4096, truncation_strategy="delete", micro_batch=1,
                           padding_free=False, packing=False, image_tokens=0)  # fmt: skip
    assert dict(lengths.tokens_per_sample)[100] == 300 + llama


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("delete", []), ("left", [1000]), ("right", [1000]), ("split", [1000, 1000, 500])],
)
def test_swift_truncation_strategies(strategy: str, expected: list[int]) -> None:
    assert trained_lengths(2500, 1000, strategy) == expected
    assert trained_lengths(900, 1000, strategy) == [900]
    assert trained_lengths(None, 1000, strategy) == [1000]  # videos: counted as the worst case


def test_weighted_percentile() -> None:
    assert weighted_percentile([1, 2, 3, 4], [1, 1, 1, 1], 50) == 2
    assert weighted_percentile([1, 100], [99, 1], 99) == 1
    assert weighted_percentile([1, 100], [98, 2], 99) == 100


# 99.5 % of rows are 100 tokens, 0.5 % are 4000: in 16 samples at least one long row comes in 7.7 % of
# micro-batches (1 - 0.995^16), two or more in 0.27 %. So at the 99th percentile a padded micro-batch is
# 16 x 4000 tokens and a padding-free one is 15 x 100 + 4000.
LONG_TAIL = [100] * 995 + [4000] * 5


def test_padded_micro_batch_is_sixteen_times_its_longest_sample() -> None:
    tokens, longest, _ = micro_batch_at(LONG_TAIL, [0] * 1000, [1.0] * 1000, 16, padding_free=False)
    assert (tokens, longest) == (16 * 4000, 4000)


def test_padding_free_micro_batch_is_the_sum_of_its_samples() -> None:
    tokens, longest, _ = micro_batch_at(LONG_TAIL, [0] * 1000, [1.0] * 1000, 16, padding_free=True)
    assert (tokens, longest) == (15 * 100 + 4000, 4000)


def test_one_sample_per_micro_batch_is_the_samples_own_percentile() -> None:
    lengths = list(range(1, 1001))
    tokens, _, _ = micro_batch_at(lengths, [0] * 1000, [1.0] * 1000, 1, padding_free=False)
    assert abs(tokens - 990) <= 10


def test_packing_is_the_worst_case() -> None:
    lengths = data_lengths(
        facts(*[text_row(100)] * 50), max_length=4096, truncation_strategy="delete", micro_batch=8,
        padding_free=True, packing=True, image_tokens=0,
    )  # fmt: skip
    assert lengths.batch_tokens == lengths.worst_case_tokens == 8 * 4096
    assert lengths.mode == "packing"


def test_delete_drops_long_rows_and_counts_them() -> None:
    rows = [text_row(200)] * 90 + [text_row(5000)] * 10
    lengths = data_lengths(
        facts(*rows), max_length=4096, truncation_strategy="delete", micro_batch=1,
        padding_free=False, packing=False, image_tokens=0,
    )  # fmt: skip
    assert lengths.longer_than_max_length == 10
    assert dict(lengths.tokens_per_sample)[100] == 200  # the long rows are gone
    right = data_lengths(
        facts(*rows), max_length=4096, truncation_strategy="right", micro_batch=1,
        padding_free=False, packing=False, image_tokens=0,
    )  # fmt: skip
    assert dict(right.tokens_per_sample)[100] == 4096


def test_images_take_the_image_budget_and_are_counted_per_micro_batch() -> None:
    rows = [text_row(100, images=1)] * 50 + [text_row(100)] * 50
    lengths = data_lengths(
        facts(*rows), max_length=4096, truncation_strategy="delete", micro_batch=4,
        padding_free=True, packing=False, image_tokens=1000,
    )  # fmt: skip
    assert dict(lengths.tokens_per_sample)[100] == 1100
    assert lengths.batch_images == 4 and lengths.batch_tokens == 4 * 1100


def test_datasets_weigh_by_the_rows_swift_trains_on() -> None:
    short = DatasetSample("a.jsonl", SampleStatus.SAMPLED, rows=(text_row(100),) * 100, rows_in_file=100_000)
    long = DatasetSample("b.jsonl#500", SampleStatus.SAMPLED, take=500, rows=(text_row(3000),) * 100)
    lengths = data_lengths(
        DataFacts((short, long)), max_length=4096, truncation_strategy="delete", micro_batch=1,
        padding_free=False, packing=False, image_tokens=0,
    )  # fmt: skip
    # 500 long rows among 100,500: 0.5 % of samples, above the 99th percentile's reach
    assert dict(lengths.tokens_per_sample)[99] == 100 and dict(lengths.tokens_per_sample)[100] == 3000


def test_a_hub_dataset_leaves_the_figures_incomplete() -> None:
    hub = DatasetSample("org/name", SampleStatus.NOT_LOCAL, note="not sampled, not a local file")
    lengths = data_lengths(
        facts(text_row(100), extra=(hub,)), max_length=4096, truncation_strategy="delete", micro_batch=1,
        padding_free=False, packing=False, image_tokens=0,
    )  # fmt: skip
    assert not lengths.complete and lengths.batch_tokens == 100


def shape(**changes: object) -> TrainShape:
    base = TrainShape(
        total_params=1_500_000_000, trainable_params=10_000_000, largest_layer_params=233_000_000,
        hidden_size=1536, num_layers=28, vocab_size=151936, micro_batch=16, seq_len=4096,
        gradient_checkpointing=True, gpus_per_node=1, nnodes=1, intermediate_size=8960, num_heads=12,
    )  # fmt: skip
    return base.__class__(**{**base.__dict__, **changes})


def test_the_data_dependent_parts_read_the_micro_batch_at_the_data() -> None:
    worst = activation_parts(shape())
    data = activation_parts(shape(batch_tokens=16 * 4096 // 8))
    assert data["gpu_logits"] * 8 == worst["gpu_logits"]
    assert math.isclose(data["gpu_activations"] * 8, worst["gpu_activations"], rel_tol=1e-6)


def test_eager_scores_use_the_longest_sample_and_vision_the_images() -> None:
    worst = activation_parts(shape(eager_attention=True))
    data = activation_parts(shape(eager_attention=True, batch_tokens=16 * 1024, batch_longest=1024))
    assert data["gpu_attention_scores"] * 16 == worst["gpu_attention_scores"]  # (4096 / 1024)^2
    vision = dict(image_pixels=1003520, vision_hidden_size=1280, vision_layers=32)
    assert activation_parts(shape(**vision, batch_images=0))["gpu_vision"] == 0
    four = activation_parts(shape(**vision, batch_images=4))["gpu_vision"]
    assert four * 4 == activation_parts(shape(**vision))["gpu_vision"]  # 16 images at the worst case


# Qwen2-VL-2B-Instruct as its config.json gives it (huggingface.co/Qwen/Qwen2-VL-2B-Instruct): hidden 1536,
# 28 layers, intermediate 8960, vocab 151936, 12 heads, tied embeddings; a 32-layer vision tower of width
# 1280, about 675M of the 2.2B parameters.
QWEN2_VL_2B = ModelFacts(
    name="Qwen2-VL-2B-Instruct", total_params=2_208_985_600, source="config", largest_layer_params=233_373_696,
    hidden_size=1536, num_layers=28, intermediate_size=8960, vocab_size=151936, num_attention_heads=12,
    is_multimodal=True, model_type="qwen2_vl", tie_word_embeddings=True, vision_params=675_000_000,
    vision_hidden_size=1280, vision_layers=32,
)  # fmt: skip
ISSUE_RUN = [
    "--model", "Qwen/Qwen2-VL-2B-Instruct", "--tuner_type", "lora", "--per_device_train_batch_size", "16",
    "--max_length", "4096", "--padding_free", "true", "--attn_impl", "flash_attn", "--dataset", "d.jsonl",
]  # fmt: skip


def plan_with(data: DataFacts | None, gpu_gib: float = 40, argv: list[str] = ISSUE_RUN, model=QWEN2_VL_2B):  # type: ignore[no-untyped-def]
    facts_ = host(gpus(1, gpu_gib), ram_gib=256)
    topo = resolve_topology(TopologyRequest(), {}, facts_.gpus.gpus, free_port=1)
    paths = LaunchPaths(python="python", worker="worker.py", config_dir="/cfg")
    env = {"MAX_PIXELS": "200704"}  # 256 image tokens
    return build_plan(parse_swift_argv(argv), topo, facts_, model, env=env, paths=paths, data=data)


# Short captioning rows, one image each: about 60 text tokens and 256 image tokens.
CAPTIONS = facts(*[text_row(60, images=1)] * 900, *[text_row(300, images=1)] * 100)


def test_the_issue_run_is_planned_at_its_data_and_keeps_the_worst_case_beside() -> None:
    worst = next(e for e in plan_with(None).estimates if e.strategy is Strategy.ZERO2)
    assert not worst.fits  # the max_length worst case: 16 x 4096 tokens of fp32 logits
    plan = plan_with(CAPTIONS)
    assert plan.fits and plan.strategy == "zero2" and "at the data's lengths" in plan.strategy_reason
    zero2 = next(e for e in plan.estimates if e.strategy is Strategy.ZERO2)
    assert zero2.gpu_need_bytes == worst.gpu_need_bytes and zero2.fits_at_data and not zero2.fits
    assert zero2.gpu_need_at_data_bytes is not None and zero2.gpu_need_at_data_bytes < zero2.gpu_need_bytes / 3
    assert zero2.parts_at_data is not None
    assert zero2.parts_at_data["gpu_weights"] == zero2.parts["gpu_weights"]
    assert zero2.parts_at_data["gpu_logits"] < zero2.parts["gpu_logits"] / 5
    assert any("not at the max_length worst case" in w for w in plan.warnings)
    assert plan.data_lengths is not None and plan.data_lengths.batch_images == 16


def test_without_every_dataset_sampled_the_plan_keeps_the_worst_case() -> None:
    hub = DatasetSample("org/name", SampleStatus.NOT_LOCAL, note="not sampled, not a local file")
    plan = plan_with(DataFacts((*CAPTIONS.datasets, hub)))
    assert all(e.gpu_need_at_data_bytes is None for e in plan.estimates)
    assert "at the data's lengths" not in plan.strategy_reason
    assert not any("not at the max_length worst case" in w for w in plan.warnings)


def test_packing_plans_at_max_length_whatever_the_data() -> None:
    argv = [*ISSUE_RUN, "--packing", "true"]
    plan = plan_with(CAPTIONS, argv=argv)
    assert all(e.gpu_need_at_data_bytes == e.gpu_need_bytes for e in plan.estimates)


def test_an_unset_max_length_plans_for_the_longest_sampled_row_up_to_the_models_limit() -> None:
    """swift trains up to the model's max_model_len when --max_length is unset: a sampled 9000-token row is
    trained whole, so the plan assumes 9000 (the command keeps the user's argv); capped at the model's
    limit; and 2048 where no sampled row is longer."""
    rows = [text_row(1000)] * 90 + [text_row(9000)] * 10
    argv = ["--model", "m", "--per_device_train_batch_size", "1", "--dataset", "d.jsonl"]
    plan = plan_with(facts(*rows), argv=argv)
    lengths = plan.data_lengths
    assert lengths is not None and lengths.max_length_assumed and lengths.max_length == 9000
    assert lengths.longer_than_max_length == 0 and dict(lengths.tokens_per_sample)[100] == 9000
    assert "--max_length" not in plan.swift_argv
    assert any(
        "activations are estimated for 9,000 tokens per sample, the longest sampled row" in n for n in plan.notes
    )
    capped = plan_with(facts(*rows), argv=argv, model=replace(QWEN2_VL_2B, max_model_len=4096)).data_lengths
    assert capped is not None and capped.max_length == 4096 and capped.longer_than_max_length == 10
    assert dict(capped.tokens_per_sample)[100] == 4096  # counted at the limit (swift would drop them)
    short = plan_with(facts(*[text_row(1000)] * 10), argv=argv)
    assert short.data_lengths is not None and short.data_lengths.max_length == 2048
    assert any("activations estimated for 2048 tokens per sample (swift trains up to" in n for n in short.notes)


def test_a_trainers_own_max_length_default_is_its_limit() -> None:
    """A backend whose trainer has its own default (LLaMA-Factory's cutoff_len 2048) cuts there: the longest
    sampled row does not raise it."""
    from launcher.plan.unset_length import assumed_length

    data = facts(*[text_row(9000)] * 3)
    unset = parse_swift_argv(["--model", "m", "--dataset", "d.jsonl"])
    assert assumed_length(unset, QWEN2_VL_2B, data, {}) == 9000
    assert assumed_length(unset.with_defaults({"max_length": "2048"}), QWEN2_VL_2B, data, {}) is None


def test_dataset_values_as_swift_reads_them_from_the_cli_and_a_config_file() -> None:
    cli = parse_swift_argv(["--dataset", "a.jsonl", "b.jsonl#500", "--max_length", "10"])
    assert cli.get_values("dataset") == ("a.jsonl", "b.jsonl#500")
    config = parse_swift_argv(["train.yaml"], {"dataset": ["my data.jsonl", "org/x#5"], "max_length": 10})
    assert config.get_values("dataset") == ("my data.jsonl", "org/x#5")
    assert config.get_values("val_dataset") == ()


def test_label_tokens_of_a_padding_free_micro_batch() -> None:
    # a 300-token row whose answer is 40 tokens of text plus its turn's end marker
    row = RowText(latin=4 * (300 - OVERHEAD), wide=0, digits=0, other=0, messages=2, labels=RowText(160, 0, 0, 0, 1))
    common = dict(max_length=4096, truncation_strategy="delete", micro_batch=4, packing=False, image_tokens=0)
    free = data_lengths(facts(*[row] * 20), padding_free=True, **common)  # type: ignore[arg-type]
    assert (free.batch_tokens, free.batch_label_tokens) == (4 * 300, 4 * (40 + TOKENS_PER_TURN))
    padded = data_lengths(facts(*[row] * 20), padding_free=False, **common)  # type: ignore[arg-type]
    assert padded.batch_label_tokens is None  # logits from the batch's earliest first label on: not modelled
    cut = data_lengths(
        facts(row), max_length=150, truncation_strategy="right", micro_batch=1, padding_free=True,
        packing=False, image_tokens=0,
    )  # fmt: skip
    assert cut.batch_label_tokens == 45 * 150 // 300  # a cut row keeps its share of labels


def test_a_row_with_tools_adds_the_agent_templates_preamble() -> None:
    from launcher.plan.data_lengths import TOKENS_FOR_TOOLS

    plain = RowText(400, 0, 0, 0, 2)
    assert row_tokens(replace(plain, tools=True), 0) == row_tokens(plain, 0) + TOKENS_FOR_TOOLS  # type: ignore[operator]


@pytest.mark.parametrize(
    ("model_type", "vocab", "wide"),
    [
        ("llama", 32_000, 1.5),  # Llama-2
        ("mistral", 32_768, 1.5),  # Mistral v0.3
        ("llama", 64_000, 1.0),  # Yi: a Llama-shaped vocabulary rich in CJK
        ("llama", 128_256, 1.0),  # Llama-3
        ("falcon", 65_024, 1.5),
        ("qwen2", 151_936, 1.0),
        ("chatglm", 65_024, 1.0),
        (None, None, 1.0),
    ],
)
def test_a_wide_character_is_more_tokens_in_a_vocabulary_poor_in_cjk(model_type, vocab, wide) -> None:  # type: ignore[no-untyped-def]
    from launcher.plan.data_lengths import wide_char_tokens

    assert wide_char_tokens(model_type, vocab) == wide
    chinese = RowText(0, 1000, 0, 0, 2)
    assert row_tokens(chinese, 0, wide) == math.ceil(1000 * wide) + OVERHEAD


@pytest.mark.parametrize(
    ("lengths", "strategy", "assumed", "warned"),
    [
        pytest.param((300, 400), "delete", False, True, id="every-row-dropped"),
        pytest.param((100, 400), "delete", False, False, id="one-row-left"),
        pytest.param((300, 400), "right", False, False, id="cut-not-dropped"),
        pytest.param((300, 400), "delete", True, False, id="max-length-assumed"),
    ],
)
def test_every_sampled_row_dropped_by_max_length_is_warned_of(
    lengths: tuple[int, ...], strategy: str, assumed: bool, warned: bool
) -> None:
    """With --truncation_strategy delete (swift's default) a --max_length below every row leaves swift nothing,
    and the run died on a bare TypeError after loading, the plan silent (hostile47data F1)."""
    from launcher.plan.data_lengths import all_dropped_warning

    found = data_lengths(
        facts(*(text_row(n) for n in lengths)), max_length=200, truncation_strategy=strategy, micro_batch=1,
        padding_free=False, packing=False, image_tokens=0, max_length_assumed=assumed,
    )  # fmt: skip
    warning = all_dropped_warning(found)
    assert (warning is not None) is warned, warning
    if warned:
        assert warning is not None and warning.startswith(
            "every sampled row (2 of 2) is estimated longer than max_length 200: swift drops such rows"
        )
