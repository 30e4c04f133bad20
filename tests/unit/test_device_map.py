"""device_map: one process, the model split over the GPUs (launcher/plan/device_map.py), and the choice
between it and ZeRO's processes (launcher/plan/strategy.py choose_layout, launcher/plan/build.py).

The split is checked against hand-computed figures; the placement against transformers' own rule is checked
with the real transformers in tests/stack/test_device_map_real.py."""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.errors import SafeSftError
from launcher.model import DeviceMapLayout, Estimate, ModelFacts, Strategy
from launcher.plan.build import LaunchPaths, PlanOptions, build_plan
from launcher.plan.device_map import (
    Piece,
    Pieces,
    balance,
    balanced_cap,
    budgets_for,
    estimate_device_map,
    gpu_parts,
    layout_needs,
    max_memory_arg,
    parse_max_memory,
    pieces_of,
    place,
)
from launcher.plan.estimate import CUDA_CONTEXT_BYTES, FRAGMENTATION_MARGIN, TrainShape
from launcher.plan.strategy import Choice, choose_layout
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.units import GiB
from tests.conftest import gpus, host

PATHS = LaunchPaths(python="python", worker="worker.py", config_dir="/cfg")

# A small decoder by hand: hidden 1024, 8 layers of 4h^2 + 3hi = 16,777,216 parameters (intermediate 4096),
# untied embeddings and head of 32000 x 1024 = 32,768,000 each; 199,753,728 parameters in all, bf16.
# LoRA rank 8 on every linear: 8 x (4 x 2048 + 3 x (1024 + 4096)) x 8 layers = 1,507,328 trainable.
H, VOCAB, LAYERS, INTER = 1024, 32000, 8, 4096
EMBED = VOCAB * H
LAYER_PARAMS = 4 * H * H + 3 * H * INTER
TOTAL = 2 * EMBED + LAYERS * LAYER_PARAMS
LORA = 1_507_328
SMALL = TrainShape(
    total_params=TOTAL, trainable_params=LORA, largest_layer_params=EMBED, hidden_size=H, num_layers=LAYERS,
    vocab_size=VOCAB, micro_batch=1, seq_len=1024, gradient_checkpointing=True, gpus_per_node=1, nnodes=1,
    intermediate_size=INTER, num_heads=16,
)  # fmt: skip
CONTEXT = CUDA_CONTEXT_BYTES  # the fitted CUDA context per GPU the process touches (0.75 GiB)


def test_pieces_by_hand() -> None:
    pieces = pieces_of(SMALL)
    assert pieces is not None
    assert pieces.first.weights == pieces.head.weights == 2 * EMBED == 65_536_000
    assert pieces.layer.weights == 2 * LAYER_PARAMS == 33_554_432
    # LoRA: the adapters (and their gradients and AdamW moments, 2 + 4 bytes each) live with their layer
    assert (pieces.layer.gradients, pieces.layer.optimizer) == (2 * LORA // LAYERS, 4 * LORA // LAYERS)
    assert pieces.first.gradients == pieces.head.gradients == 0
    assert pieces.largest_module == 2 * EMBED  # the embedding is larger than a layer here
    tied = pieces_of(SMALL, tied=True)
    assert tied is not None and tied.head.weights == 0


def test_each_gpus_parts_by_hand() -> None:
    pieces = pieces_of(SMALL)
    assert pieces is not None
    layout = DeviceMapLayout(layers=(4, 4), first_gpu=0, head_gpu=1, max_memory=())
    first, last = gpu_parts(SMALL, pieces, layout, 0), gpu_parts(SMALL, pieces, layout, 1)
    # each GPU: 4 layers' 2-byte checkpoints, 1024 x 1024 x 2 x 4, and one layer recomputed,
    # 1024 x (20h + 4kv + 8i), k/v as wide as h (no k/v head count given)
    activations = 1024 * H * 2 * 4 + 1024 * (20 * H + 4 * H + 8 * INTER)
    assert first["gpu_activations"] == last["gpu_activations"] == activations == 67_108_864
    assert first["gpu_weights"] == last["gpu_weights"] == 65_536_000 + 4 * 33_554_432
    assert first["gpu_logits"] == 0 and last["gpu_logits"] == 1024 * VOCAB * 12  # the loss's fp32 backward
    assert first["gpu_cuda_context"] == last["gpu_cuda_context"] == CONTEXT
    subtotal = sum(v for k, v in last.items() if k != "gpu_fragmentation_margin")
    assert last["gpu_fragmentation_margin"] == int(subtotal * FRAGMENTATION_MARGIN)


def test_placement_follows_transformers_rule() -> None:
    pieces = pieces_of(SMALL)
    assert pieces is not None
    # get_balanced_memory: model bytes / GPUs + 1.25 x the largest module, for every GPU but the last
    assert balanced_cap(pieces, 4) == pieces.total_weights // 4 + int(1.25 * 2 * EMBED)
    for layers in [(0, 3, 3, 2), (1, 2, 2, 3), (1, 3, 3, 1), (1, 3, 4, 0)]:
        budgets = budgets_for(pieces, layers, [80 * GiB] * 4)
        layout = place(pieces, budgets)
        assert layout is not None and layout.layers == layers
    # GPU 0 holds the embeddings and the room for the largest module within the cap: two layers do not fit
    two = place(pieces, budgets_for(pieces, (2, 2, 2, 2), [80 * GiB] * 4))
    assert two is not None and two.layers == (1, 2, 2, 3)
    # a budget above transformers' cap buys nothing: it caps every GPU but the last
    # cap 399,507,456 // 4 + 1.25 x 65,536,000 = 181,796,864: GPU 0 keeps 65,536,000 free, holds the embeddings
    # and 1 layer; GPU 1 5 layers; GPU 2 the last 2 and the head; GPU 3 nothing
    capped = place(pieces, [80 * GiB] * 4)
    assert capped is not None and capped.layers == (1, 5, 2, 0) and capped.head_gpu == 2
    assert place(pieces, [10 * 2**20] * 4) is None  # the weights do not fit: transformers would go to disk
    # bitsandbytes (at load, or a checkpoint saved so): transformers takes 90 % of every budget, and the
    # budgets allow for it; GPTQ's quantizer keeps them as given
    bnb = pieces_of(replace(SMALL, quant_bits=8, quant_method="bnb"))
    gptq = pieces_of(replace(SMALL, quant_bits=8, quant_method="gptq"))
    assert bnb is not None and gptq is not None and (bnb.load_factor, gptq.load_factor) == (0.9, 1.0)
    for layers in [(0, 3, 3, 2), (0, 2, 2, 4)]:
        budgets = budgets_for(bnb, layers, [80 * GiB] * 4)
        assert budgets[1] > budgets_for(gptq, layers, [80 * GiB] * 4)[1]
        placed = place(bnb, budgets)
        assert placed is not None and placed.layers == layers


@pytest.mark.parametrize("method", ["bnb", "gptq"])
def test_a_quantized_decoder_whose_embeddings_outgrow_gpu_0s_cap_is_spread_from_the_gpu_that_takes_them(
    method: str,
) -> None:
    """4-bit layers beside 16-bit embeddings on 8 GPUs: transformers' cap on GPU 0, less the room it keeps for
    the largest module (the embeddings), is below the embeddings, so it leaves GPU 0 empty. The budgets had
    assumed them on GPU 0, and every layer, the embeddings and the head landed on the last GPU: QLoRA planned
    at twice LoRA's need."""
    qwen3 = replace(
        SMALL, total_params=8_190_735_360, trainable_params=43_646_976, largest_layer_params=155_582_464,
        hidden_size=4096, num_layers=36, vocab_size=151_936, intermediate_size=12_288, num_heads=32, num_kv_heads=8,
    )  # fmt: skip
    decoder_linears = 36 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 12_288)  # what the quantizer takes
    quantized = replace(qwen3, quant_bits=4, quant_method=method, quantized_params=decoder_linears)
    pieces = pieces_of(quantized)
    assert pieces is not None
    layout = balance(quantized, pieces, [80 * GiB] * 8)
    assert layout is not None and layout.first_gpu >= 1 and sum(layout.layers) == 36
    assert max(layout.layers) < 36 and layout.layers[: layout.first_gpu] == (0,) * layout.first_gpu
    assert place(pieces, layout.max_memory) == layout  # the budgets give the split they were written for
    plain = pieces_of(qwen3)
    assert plain is not None
    plain_layout = balance(qwen3, plain, [80 * GiB] * 8)
    assert plain_layout is not None
    worst = max(layout_needs(quantized, pieces, layout))
    assert worst <= max(layout_needs(qwen3, plain, plain_layout))  # a 4-bit base never needs more


def _place_layer_by_layer(pieces: Pieces, budgets: list[int]) -> tuple[int, ...] | None:
    """transformers' rule one layer at a time, as infer_auto_device_map walks the modules."""
    n, cap = len(budgets), balanced_cap(pieces, len(budgets))
    caps = [int((min(b, cap) if i < n - 1 else b) * pieces.load_factor) for i, b in enumerate(budgets)]
    caps[0] -= pieces.largest_module
    used, layers, gpu = [0] * n, [0] * n, 0
    sizes = [pieces.first.weights] + [pieces.layer.weights] * pieces.num_layers + [pieces.head.weights]
    for index, size in enumerate(sizes):
        while gpu < n and used[gpu] + size > caps[gpu]:
            gpu += 1
        if gpu == n:
            return None
        used[gpu] += size
        layers[gpu] += 0 < index < len(sizes) - 1  # the first piece is the embeddings, the last the head
    return tuple(layers)


@pytest.mark.parametrize("seed", range(40))
def test_placement_a_gpus_share_at_a_time_is_layer_by_layer(seed: int) -> None:
    """place() fills a GPU with all the layers that fit at once (a layer count read from a corrupt config.json,
    10^9, must not walk them one by one); the layouts are transformers' layer-by-layer ones."""
    rng = random.Random(seed)
    pieces = Pieces(
        first=Piece(rng.randrange(1, 10**6)), layer=Piece(rng.randrange(1, 10**5)), head=Piece(rng.randrange(1, 10**6)),
        num_layers=rng.randrange(1, 200), largest_module=rng.randrange(0, 10**6), tied=False,
    )  # fmt: skip
    budgets = [rng.randrange(10**5, 10**7) for _ in range(rng.randrange(2, 9))]
    placed = place(pieces, budgets)
    assert (placed.layers if placed else None) == _place_layer_by_layer(pieces, budgets)
    huge = replace(pieces, num_layers=10**12, layer=Piece(0))
    at_once = place(huge, budgets)
    assert at_once is None or sum(at_once.layers) == 10**12


# Qwen3-VL-235B-A22B as its config.json gives it: hidden 4096, 94 layers, 128 experts (8 per token) of
# intermediate 1536, vocab 151936, untied; 236e9 parameters, bf16; swift's default LoRA rank 8 on all linears.
QWEN3_235B = ModelFacts(
    name="Qwen3-VL-235B-A22B", total_params=236_000_000_000, source="config", largest_layer_params=2_483_552_256,
    hidden_size=4096, num_layers=94, intermediate_size=12288, vocab_size=151936, dtype="bfloat16",
    is_multimodal=True, model_type="qwen3_vl_moe", num_attention_heads=64, num_experts=128, experts_per_token=8,
    moe_intermediate_size=1536, vision_hidden_size=1152, vision_layers=27, vision_params=400_000_000,
    vision_intermediate_size=4304, vision_patch_size=16,
)  # fmt: skip


def plan(model: ModelFacts, argv: list[str], n: int, gib: float, env=None, options=None, ram_gib=1024):  # type: ignore[no-untyped-def]
    facts = host(gpus(n, gib), ram_gib=ram_gib)
    swift = parse_swift_argv(["--model", "m", *argv])
    topo = resolve_topology(TopologyRequest(), env or {}, facts.gpus.gpus, free_port=1)
    return build_plan(swift, topo, facts, model, env=env or {}, paths=PATHS, options=options)


def test_the_235b_moe_on_8x80gib_is_device_map_as_swift_runs_it() -> None:
    """The issue's case: 8 visible GPUs, no NPROC_PER_NODE, 256 GiB of host RAM. At 4096 tokens ZeRO without
    offload does not fit and zero3_offload needs 700 GiB of host RAM: before device_map this was refused; plain
    swift runs it. (At 2048 tokens ZeRO-3 fits: LoRA adapts no routed expert, see the test below.)"""
    p = plan(QWEN3_235B, ["--tuner_type", "lora", "--max_length", "4096"], 8, 80, ram_gib=256)
    assert p.fits and p.strategy == "device_map"
    assert "plain swift sft runs one process with the model split over the 8 GPUs" in p.strategy_reason
    assert "zero3 does not fit" in p.strategy_reason
    env = p.env_dict()
    assert env["NPROC_PER_NODE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert p.command[p.command.index("--nproc_per_node") + 1] == "1"
    assert "--deepspeed" not in p.swift_argv and p.deepspeed_arg is None
    assert p.batch is not None and p.batch.world_size == p.batch.swift_world_size == 1  # swift's global batch
    given = ast.literal_eval(p.swift_argv[p.swift_argv.index("--max_memory") + 1])  # as swift parses it
    assert sorted(given) == list(range(8)) and p.device_map is not None
    layers = p.device_map.layers
    assert sum(layers) == 94
    # the GPUs holding the embeddings (and vision tower) and the head with the logits get fewer layers
    assert layers[0] < max(layers[1:7]) and layers[7] < max(layers[1:7])
    assert p.device_map.first_gpu == 0 and p.device_map.head_gpu == 7
    needs = p.device_map.need_bytes
    # even within 11 %: GPU 0 holds the vision tower and keeps the room transformers reserves there for the
    # largest module, so it cannot take the last GPU's extra layer (a layer is 7 % of a GPU's need)
    assert max(needs) <= 80 * GiB and max(needs) / min(needs) < 1.11
    dm = next(e for e in p.estimates if e.strategy is Strategy.DEVICE_MAP)
    assert dm.gpu_need_bytes == max(needs) and sum(v for k, v in dm.parts.items() if k.startswith("gpu_")) == max(needs)
    # its levers rebalance each change: shorter sequences save on every GPU, 4-bit base weights the most
    assert dm.levers[0][0] == "4-bit base weights (--quant_method bnb --quant_bits 4)" and all(
        saved > 0 for _, saved in dm.levers
    )
    assert any(text.startswith("max_length 4096 -> 2048") for text, _ in dm.levers)
    # the budgets swift gets are lower on the first and last GPU in weights (GPU 0's value also holds the room
    # transformers keeps there for the largest module; the last GPU's is its whole memory: it takes the rest)
    pieces = pieces_of(p_shape(p), vision_params=QWEN3_235B.vision_params)
    assert pieces is not None
    weights = [k * pieces.layer.weights for k in layers]
    assert weights[0] < weights[3] and weights[7] < weights[3]


def p_shape(p) -> TrainShape:  # type: ignore[no-untyped-def]
    """The 235B run's shape in one process."""
    from launcher.plan.sizing import train_shape

    topology = resolve_topology(TopologyRequest(), {"NPROC_PER_NODE": "1"}, gpus(1, 80), free_port=1)
    swift = parse_swift_argv(["--model", "m", "--tuner_type", "lora", "--max_length", "4096"])
    return train_shape(swift, QWEN3_235B, topology)


def test_balanced_budgets_even_out_what_plain_auto_leaves_uneven() -> None:
    """Seed 001: with device_map='auto' and no max_memory, transformers fills GPUs 0-6 up to its cap (model / GPUs
    + 1.25 layers) and the last GPU gets what is left; the balanced budgets even the GPUs' needs out."""
    shape = replace(p_shape(None), micro_batch=1)
    pieces = pieces_of(shape, vision_params=QWEN3_235B.vision_params)
    assert pieces is not None
    free = [80 * GiB] * 8
    plain = estimate_device_map(shape, pieces, free, None, budgets=free)  # what swift does without max_memory
    even = estimate_device_map(shape, pieces, free, None)
    assert plain is not None and even is not None
    assert plain[1].layers == (11, 13, 13, 13, 13, 13, 13, 5)  # transformers' cap: 13 layers of 5 GB
    spread = [max(lay.need_bytes) / min(lay.need_bytes) for _, lay in (plain, even)]
    assert spread[1] < 1.11 < spread[0]  # within 11 %: see the test above
    assert even[0].gpu_need_bytes < plain[0].gpu_need_bytes
    # transformers' cap bounds how far layers can move: a split it cannot give is not proposed
    assert all(k * pieces.layer.weights <= balanced_cap(pieces, 8) for k in even[1].layers[:-1])


def test_balance_needs_two_gpus_and_parts_add_up() -> None:
    pieces = pieces_of(SMALL)
    assert pieces is not None
    assert balance(SMALL, pieces, [80 * GiB]) is None
    found = estimate_device_map(SMALL, pieces, [80 * GiB, 40 * GiB], 64 * GiB)
    assert found is not None
    est, layout = found
    assert est.strategy is Strategy.DEVICE_MAP
    assert sum(v for k, v in est.parts.items() if k.startswith("gpu_")) == est.gpu_need_bytes
    assert est.gpu_free_bytes in (80 * GiB, 40 * GiB) and layout.free_bytes == (80 * GiB, 40 * GiB)
    assert layout.layers[1] <= layout.layers[0] + 1  # the smaller GPU gets no more than its share


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{0: 1024, 1: 2048}", (1024, 2048)),
        ("{0: '1GiB', 1: '2GiB'}", (GiB, 2 * GiB)),
        ('{"0": "1GiB", "1": 5}', (GiB, 5)),
        ("{0: 1024}", None),  # GPU 1 not named
        ("auto", None),
        ("{0: 'lots', 1: 1}", None),
        (None, None),
    ],
    ids=["ints", "strings", "json", "short", "not-a-dict", "bad-size", "absent"],
)
def test_parse_max_memory(text: str | None, expected: tuple[int, ...] | None) -> None:
    assert parse_max_memory(text, 2) == expected


def test_max_memory_arg_round_trips_as_swift_reads_it() -> None:
    arg = max_memory_arg((5, 6, 7))
    assert ast.literal_eval(arg) == {0: 5, 1: 6, 2: 7} and parse_max_memory(arg, 3) == (5, 6, 7)


# ---- the choice -------------------------------------------------------------------------------------------


def est(name: str, need_gib: float, free_gib: float = 80) -> Estimate:
    return Estimate(Strategy(name), int(need_gib * GiB), 0, int(free_gib * GiB), None)


ZERO2, ZERO3, OFFLOAD = "zero2", "zero3", "zero3_offload"


@pytest.mark.parametrize(
    ("needs", "dm_need", "layout", "zero_choice", "expected"),
    [
        ((70, 60, 20), 50, "auto", ZERO2, ZERO2),  # ZeRO fits without offload: faster than one GPU at a time
        ((90, 70, 20), 50, "auto", ZERO3, ZERO3),
        ((90, 85, 20), 50, "auto", OFFLOAD, "device_map"),  # only offload fits among ZeRO: device_map first
        ((90, 85, 20), 85, "auto", OFFLOAD, OFFLOAD),  # device_map does not fit either
        ((90, 85, 20), 50, "processes", OFFLOAD, OFFLOAD),  # NPROC_PER_NODE / --layout processes kept
        ((70, 60, 20), 50, "device_map", ZERO2, "device_map"),  # --device_map / --layout device_map kept
    ],
    ids=["zero2-fits", "zero3-fits", "device-map-over-offload", "offload", "processes-asked", "device-map-asked"],
)
def test_the_choice(
    needs: tuple[float, float, float], dm_need: float, layout: str, zero_choice: str, expected: str
) -> None:
    estimates = tuple(est(n, g) for n, g in zip((ZERO2, ZERO3, OFFLOAD), needs, strict=True))
    dm = est("device_map", dm_need)
    fits = next(e for e in estimates if e.strategy.value == zero_choice).fits
    zero = Choice(zero_choice, f"{zero_choice} chosen", fits)
    choice = choose_layout(zero, (*estimates, dm), dm, layout, "asked", gpus=8)
    assert choice.strategy == expected
    if layout == "auto":
        assert "plain swift sft runs one process" in choice.reason or "device_map" in choice.reason


def test_the_users_deepspeed_is_kept() -> None:
    zero = Choice("my.json", "you chose --deepspeed my.json", True, (), True)
    dm = est("device_map", 10)
    assert choose_layout(zero, (dm,), dm, "processes", "--deepspeed my.json", gpus=8) == zero


@pytest.mark.parametrize(
    ("env", "argv", "options", "strategy"),
    [
        ({"NPROC_PER_NODE": "8"}, [], None, "zero3_offload"),
        ({}, ["--deepspeed", "zero3"], None, "zero3"),
        ({}, ["--device_map", "auto"], None, "device_map"),
        ({}, [], PlanOptions(layout="processes"), "zero3_offload"),
        ({}, [], PlanOptions(nproc_given=True), "zero3_offload"),
        ({}, ["--sequence_parallel_size", "2"], None, "zero3"),  # half the tokens per GPU: zero3 fits, just
        ({}, [], None, "device_map"),
    ],
    ids=["NPROC_PER_NODE", "deepspeed", "swift-device_map", "layout-processes", "nproc-flag", "sp", "auto"],
)
def test_explicit_choices_are_kept(env: dict[str, str], argv: list[str], options, strategy: str) -> None:  # type: ignore[no-untyped-def]
    p = plan(QWEN3_235B, ["--tuner_type", "lora", "--max_length", "4096", *argv], 8, 80, env=env, options=options)
    assert p.strategy == strategy
    assert (p.env_dict()["NPROC_PER_NODE"] == "1") == (strategy == "device_map")
    if argv[:1] == ["--device_map"]:
        assert "you chose device_map (--device_map auto)" in p.strategy_reason


def test_the_235b_moe_at_2048_tokens_fits_zero3_its_lora_adapts_no_routed_expert() -> None:
    """transformers 5 keeps the 128 routed experts of each layer as fused parameters, which all-linear LoRA
    passes over (tests/stack/test_lora_params_real.py): the adapters are attention's, their optimizer state a
    few hundred MiB, and 8 ZeRO-3 processes fit where one device_map process is slower. LoRA on the experts
    too (--target_parameters) gives each of the 128 x 94 experts an adapter: ZeRO-3 no longer fits."""
    p = plan(QWEN3_235B, ["--tuner_type", "lora", "--max_length", "2048"], 8, 80, ram_gib=256)
    assert p.fits and p.strategy == "zero3" and p.env_dict()["NPROC_PER_NODE"] == "8"
    experts = ["--target_parameters", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    adapted = plan(QWEN3_235B, ["--tuner_type", "lora", "--max_length", "2048", *experts], 8, 80, ram_gib=256)
    assert adapted.strategy == "device_map" and "zero3 does not fit" in adapted.strategy_reason


def test_layout_device_map_needs_several_gpus() -> None:
    with pytest.raises(SafeSftError, match="--layout device_map needs several GPUs"):
        plan(QWEN3_235B, ["--tuner_type", "lora"], 1, 80, options=PlanOptions(layout="device_map"))


def test_a_users_max_memory_is_kept() -> None:
    p = plan(QWEN3_235B, ["--tuner_type", "lora", "--max_length", "4096", "--max_memory", "{0: '70GiB'}"], 8, 80)
    assert p.strategy == "device_map" and p.max_memory_arg is None
    assert p.swift_argv.count("--max_memory") == 1


# ---- the real CLI --------------------------------------------------------------------------------------


def test_plan_json_shows_device_map(tmp_path: Path) -> None:
    model = tmp_path / "Qwen3-VL-235B-A22B-Instruct"
    model.mkdir()
    text = {"hidden_size": 4096, "num_hidden_layers": 94, "intermediate_size": 12288, "moe_intermediate_size": 1536,
            "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "num_attention_heads": 64,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16"}  # fmt: skip
    config = {"model_type": "qwen3_vl_moe", "text_config": text, "vision_config": {"depth": 27, "hidden_size": 1152}}
    (model / "config.json").write_text(json.dumps(config))
    argv = ["plan", "--json", "--model-params", "236e9", "--assume-gpus", "8x80GiB", "--assume-ram", "1TiB"]
    argv += ["--model", str(model), "--tuner_type", "lora", "--max_length", "4096", "--output_dir", str(tmp_path / "o")]
    out = subprocess.run([sys.executable, "-m", "launcher", *argv], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["strategy"] == "device_map" and data["fits"] and data["deepspeed_arg"] is None
    assert data["env"]["NPROC_PER_NODE"] == "1" and data["topology"]["nproc_per_node"]["value"] == 1
    assert data["estimates"]["device_map"]["fits"] and not data["estimates"]["zero3"]["fits"]
    assert sum(data["device_map"]["layers"]) == 94 and data["device_map"]["head_gpu"] == 7
    assert ast.literal_eval(data["max_memory_arg"]) == dict(enumerate(data["device_map"]["max_memory"]))
    assert "--max_memory" in data["command"] and "--deepspeed" not in data["command"]


def test_nproc_per_node_1_with_several_gpus_is_swifts_device_map() -> None:
    """swift runs NPROC_PER_NODE=1 with several visible GPUs as one process over them: so does safe-sft."""
    env = {"NPROC_PER_NODE": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    p = plan(QWEN3_235B, ["--tuner_type", "lora", "--max_length", "4096"], 8, 80, env=env)
    assert p.strategy == "device_map" and "NPROC_PER_NODE=1 with 4 visible GPUs" in p.strategy_reason
    assert p.env_dict()["NPROC_PER_NODE"] == "1" and p.env_dict()["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert len(p.topology.gpus) == 4 and p.device_map is not None and len(p.device_map.layers) == 4
    # with --deepspeed too, swift would refuse it: the plan says so before anything starts
    with_ds = plan(QWEN3_235B, ["--tuner_type", "lora", "--deepspeed", "zero3"], 8, 80, env=env)
    assert any("swift refuses it" in w for w in with_ds.warnings)
    # without CUDA_VISIBLE_DEVICES too: every visible GPU, as swift
    every = plan(QWEN3_235B, ["--tuner_type", "lora", "--max_length", "4096"], 8, 80, env={"NPROC_PER_NODE": "1"})
    assert every.strategy == "device_map" and len(every.topology.gpus) == 8
    # any other count is a count of GPUs, one process each, as before
    two = plan(QWEN3_235B, ["--tuner_type", "lora", "--max_length", "4096"], 8, 80, env={"NPROC_PER_NODE": "2"})
    assert len(two.topology.gpus) == 2 and two.env_dict()["NPROC_PER_NODE"] == "2" and two.strategy != "device_map"


def test_several_nodes_keep_one_gpu_per_process() -> None:
    """NPROC_PER_NODE=1 on several nodes stays one GPU per process (swift's MP + DDP is not planned)."""
    facts = host(gpus(4, 80), ram_gib=1024)
    env = {"NPROC_PER_NODE": "1", "NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "10.0.0.1"}
    topo = resolve_topology(TopologyRequest(), env, facts.gpus.gpus, free_port=1)
    assert topo.nproc_per_node.value == 1 and len(topo.gpus) == 1


def test_sequence_parallelism_does_not_shrink_the_one_process_device_map_estimate() -> None:
    """--sequence_parallel_size is for processes: one device_map process holds every token of its samples. Its
    column had been divided like the ZeRO ones (68 GiB at 1, 11 GiB at 8) for a run that cannot happen."""

    def device_map_need(sp: str) -> int:
        argv = ["--tuner_type", "lora", "--max_length", "32768", "--padding_free", "true", "--attn_impl", "flash_attn"]
        p = plan(QWEN3_235B, [*argv, "--sequence_parallel_size", sp], 8, 80)
        [found] = [e for e in p.estimates if e.strategy is Strategy.DEVICE_MAP]
        return found.gpu_need_bytes

    assert device_map_need("8") == device_map_need("1")
