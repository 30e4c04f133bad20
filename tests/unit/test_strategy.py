"""The strategy choice for a real model's shape, against expected values computed independently:
DeepSpeed's own estimator functions for the model states, the activation terms by hand."""

import pytest

from launcher.model import ModelFacts
from launcher.plan.build import LaunchPaths, PlanOptions, build_plan
from launcher.plan.estimate import CUDA_CONTEXT_BYTES, FRAGMENTATION_MARGIN
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.probe.model_size import typical_shape
from launcher.units import GiB
from tests.conftest import gpus, host

PATHS = LaunchPaths(python="python", worker="worker.py", config_dir="/cfg")


def choose(params: float, tuner: str, n_gpus: int, gpu_gib: int, ram_gib: int, nodes: int = 1, extra=()):  # type: ignore[no-untyped-def]
    facts = host(gpus(n_gpus, gpu_gib), ram_gib=ram_gib)
    swift = parse_swift_argv(["--model", "m", "--tuner_type", tuner, "--max_length", "2048", *extra])
    topo = resolve_topology(TopologyRequest(nnodes=nodes, allow_loopback_master=True), {}, facts.gpus.gpus, free_port=1)
    return build_plan(swift, topo, facts, typical_shape("m", int(params)), env={}, paths=PATHS)


# Qwen2.5-7B as its config.json and safetensors headers give it (huggingface.co/Qwen/Qwen2.5-7B-Instruct):
# 7,615,616,512 parameters, hidden 3584, 28 layers, intermediate 18944, vocab 152064; the largest layer is
# the embedding, 152064 x 3584 = 544,997,376.
QWEN7B = ModelFacts(
    name="Qwen2.5-7B", total_params=7_615_616_512, source="config", largest_layer_params=544_997_376,
    hidden_size=3584, num_layers=28, intermediate_size=18944, vocab_size=152064,
)  # fmt: skip
SEQ = 2048
# Activations per GPU, by hand (docs/design.md, launcher/plan/estimate.py's constants): each layer's
# 2-byte checkpoint, 2*2048*3584*28 = 411,041,792; one layer recomputed, 2048*(20*3584 + 4*3584 + 8*18944)
# = 486,539,264 (no k/v head count given: k/v as wide as h); logits, the loss's fp32 backward,
# 12*2048*152064 = 3,737,124,864.
ACTIVATIONS = 411_041_792 + 486_539_264 + 3_737_124_864
# zero2.json: reduce_bucket_size "auto" = hidden^2 = 12,845,056 and allgather_bucket_size 200,000,000
# elements of 2 bytes, overlap_comm off (one reduce bucket).
ZERO2_BUCKETS = 2 * (3584 * 3584 + 200_000_000)
CUDA_CONTEXT = CUDA_CONTEXT_BYTES  # 2 GiB, fitted (scripts/fit_memory.py)
# LoRA rank 8 on every linear: 8 * (4*(3584+3584) + 3*(3584+18944)) * 28 = 21,561,344 trainable parameters.
LORA_TRAINABLE = 21_561_344


def expected_gpu_need(states: float, step_fp32: int, buckets: int) -> int:
    """Model states + buckets + activations + CUDA context, plus the fitted fragmentation margin (14 %). The
    optimizer step's fp32 gradients (`step_fp32`, in DeepSpeed's `states`) come after the backward freed the
    activations: the larger of the two counts."""
    subtotal = int(states) - step_fp32 + buckets + max(ACTIVATIONS, step_fp32) + CUDA_CONTEXT
    return subtotal + int(subtotal * FRAGMENTATION_MARGIN)


def plan_7b(tuner: str, n_gpus: int, gpu_gib: float, ram_gib: float):  # type: ignore[no-untyped-def]
    facts = host(gpus(n_gpus, gpu_gib), ram_gib=ram_gib)
    swift = parse_swift_argv(["--model", "m", "--tuner_type", tuner, "--max_length", str(SEQ)])
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    # one process per GPU, as NPROC_PER_NODE would ask: these are ZeRO's boundaries (device_map: test_device_map.py)
    return build_plan(swift, topo, facts, QWEN7B, env={}, paths=PATHS, options=PlanOptions(layout="processes"))


@pytest.mark.parametrize("n_gpus", [4, 8])
def test_the_estimates_are_deepspeeds_model_states_plus_hand_computed_terms(n_gpus: int) -> None:
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as ds_zero3
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as ds_zero2

    p, largest = QWEN7B.total_params, QWEN7B.largest_layer_params
    assert p is not None and largest is not None
    cpu2, gpu2 = ds_zero2(p, n_gpus, 1, cpu_offload=False)
    cpu3, gpu3, _ = ds_zero3(p, largest, n_gpus, 1, cpu_offload=False)
    cpu3o, _, _ = ds_zero3(p, largest, n_gpus, 1, cpu_offload=True, cpu_offload_params=True, zero_init=True)
    host_processes = 3 * GiB * n_gpus  # python, torch, tokenizer, dataloader per process
    needs = {
        e.strategy.value: (e.gpu_need_bytes, e.cpu_need_bytes) for e in plan_7b("full", n_gpus, 80, 1024).estimates
    }
    fp32_partition = 4 * (p // n_gpus)
    assert needs["zero2"] == (expected_gpu_need(gpu2, fp32_partition, ZERO2_BUCKETS), int(cpu2) + host_processes)
    # ZeRO-3 keeps more resident than DeepSpeed's estimator counts (live and prefetched parameters, the
    # fp32 gradient of a sub-group): its figure is a floor here, with the same buckets-free terms on top.
    assert needs["zero3"][0] > expected_gpu_need(gpu3, fp32_partition, 0)
    assert needs["zero3"][1] == int(cpu3) + host_processes
    assert abs(needs["zero3_offload"][1] - (cpu3o + host_processes)) <= 1  # float evaluation order


# The boundaries, from the numbers above (8 GPUs, full): zero2 needs 37.97 GiB per GPU and 364.4 GiB of
# host RAM (DeepSpeed's 4 bytes x parameters x GPUs per node x 1.5); zero3 26.71 GiB and 48.4 GiB;
# zero3_offload 10.53 GiB and 215.5 GiB, of it 5.61 GiB fixed (no activations or logits). 4 GPUs: zero2
# 55.29 GiB, zero3 42.88 GiB. LoRA, 8 GPUs: zero2 23.60 GiB, zero3 11.60 GiB (its frozen base's layer and
# the adapters' own activations). Below 10.53 GiB only the data-dependent parts are over: zero3_offload is
# launched with a warning; below 5.61 GiB nothing fits whatever the data. (Moved by the refits on the joined
# calibration table: context 0.75 -> 1.75 -> 2 GiB, margin 16 -> 14 -> 16 -> 14 %; and by the optimizer
# step's fp32 gradients counted beside the parts it coexists with, not the activations.)
@pytest.mark.parametrize(
    ("tuner", "n_gpus", "gpu_gib", "ram_gib", "expected"),
    [
        pytest.param("full", 8, 38.0, 512, "zero2", id="8x38.0GiB-512GiB:zero2-37.97<=38.0"),
        pytest.param("full", 8, 37.9, 512, "zero3", id="8x37.9GiB:zero2-37.97>37.9-zero3"),
        pytest.param("full", 8, 38.0, 256, "zero3", id="8x38.0GiB-256GiB:zero2-host-364>256-zero3"),
        pytest.param("full", 8, 26.8, 512, "zero3", id="8x26.8GiB:zero3-26.71<=26.8"),
        pytest.param("full", 8, 26.6, 512, "zero3_offload", id="8x26.6GiB:zero3-26.71>26.6-offload"),
        pytest.param("full", 8, 16, 128, None, id="8x16GiB-128GiB:offload-host-215.5>128-nothing"),
        pytest.param("full", 8, 10.5, 512, "zero3_offload", id="8x10.5GiB:offload-10.53>10.5-fixed-5.61-fits"),
        pytest.param("full", 8, 5.6, 512, None, id="8x5.6GiB:offload-fixed-5.61>5.6-nothing"),
        pytest.param("full", 4, 48, 256, "zero3", id="4x48GiB:zero2-55.29>48-zero3-42.88"),
        pytest.param("lora", 8, 23.7, 512, "zero2", id="lora-8x23.7GiB:zero2-23.60<=23.7"),
        pytest.param("lora", 8, 23.5, 512, "zero3", id="lora-8x23.5GiB:zero2-23.60>23.5-zero3"),
    ],
)
def test_choice_at_the_hand_computed_boundaries(
    tuner: str, n_gpus: int, gpu_gib: float, ram_gib: float, expected: str | None
) -> None:
    plan = plan_7b(tuner, n_gpus, gpu_gib, ram_gib)
    if expected is None:
        assert not plan.fits
        assert "nothing fits whatever the data" in plan.strategy_reason and "GiB" in plan.strategy_reason
    else:
        assert plan.fits and plan.strategy == expected
        assert plan.deepspeed_arg == f"/cfg/{expected}.json"
        assert ("--deepspeed", f"/cfg/{expected}.json") == plan.swift_argv[-2:]


def test_full_7b_on_4x24_says_why() -> None:
    plan = choose(7e9, "full", 4, 24, 256)
    assert "zero2 does not fit" in plan.strategy_reason
    assert "zero3 does not fit" in plan.strategy_reason


def test_nothing_fits_suggests_lora_only_for_full() -> None:
    assert "LoRA" in choose(72e9, "full", 8, 80, 1024).strategy_reason
    assert "LoRA" not in choose(32e9, "lora", 1, 24, 64).strategy_reason


def test_activations_alone_over_the_card_launch_with_a_warning_not_a_refusal() -> None:
    big_batch = (
        "--per_device_train_batch_size",
        "64",
        "--max_length",
        "4096",
        "--gradient_checkpointing",
        "false",
    )
    plan = choose(0.5e9, "full", 1, 24, 64, extra=big_batch)
    assert plan.fits, plan.strategy_reason
    [warning] = [w for w in plan.warnings if "worst case" in w]
    assert "do not depend on the data and fit" in warning and "micro-batch 64 -> 32 (saves" in warning


def test_user_deepspeed_kept_with_warning() -> None:
    plan = choose(7e9, "full", 4, 24, 256, extra=("--deepspeed", "zero2"))
    assert plan.strategy == "zero2"
    assert plan.deepspeed_arg is None
    assert plan.swift_argv.count("--deepspeed") == 1
    assert any("may not fit" in w and "zero3_offload would fit" in w for w in plan.warnings)


def test_low_memlock_uses_offload_without_pinning() -> None:
    facts = host(gpus(4, 24), ram_gib=256, memlock_hard=8 * 1024 * 1024)
    swift = parse_swift_argv(["--model", "m", "--tuner_type", "full", "--output_dir", "/runs/x"])
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    options = PlanOptions(layout="processes")  # device_map would fit without offload (test_device_map.py)
    plan = build_plan(swift, topo, facts, typical_shape("m", int(7e9)), env={}, paths=PATHS, options=options)
    assert plan.strategy == "zero3_offload"
    assert plan.write_no_pin_config
    assert plan.deepspeed_arg == "/runs/x/safe-sft/zero3_offload_nopin.json"


def test_cpu_training_keeps_users_deepspeed() -> None:
    facts = host((), ram_gib=24)
    swift = parse_swift_argv(["--model", "m", "--use_cpu", "true", "--deepspeed", "zero2"])
    topo = resolve_topology(TopologyRequest(), {"NPROC_PER_NODE": "2"}, (), free_port=1, use_cpu=True)
    plan = build_plan(swift, topo, facts, typical_shape("m", int(GiB)), env={}, paths=PATHS)
    assert plan.strategy == "zero2"
    assert "CPU training" in plan.strategy_reason
    assert plan.topology.nproc_per_node.value == 2
    assert plan.command[:4] == ("python", "-m", "torch.distributed.run", "--nproc_per_node")
    assert plan.command[4] == "2"


def test_users_own_config_is_checked_at_its_zero_rung() -> None:
    facts = host(gpus(4, 24), ram_gib=256)
    swift = parse_swift_argv(["--model", "m", "--tuner_type", "full", "--deepspeed", "my_ds.json"])
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    options = PlanOptions(user_deepspeed_rung="zero2")
    plan = build_plan(swift, topo, facts, typical_shape("m", int(7e9)), env={}, paths=PATHS, options=options)
    assert plan.strategy == "my_ds.json" and plan.deepspeed_arg is None
    assert plan.strategy_reason == "you chose --deepspeed my_ds.json (zero2)"
    assert any("my_ds.json (zero2) may not fit" in w and "zero3_offload would fit" in w for w in plan.warnings)


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_a_users_config_below_zero3_with_optimizer_offload_is_estimated_from_its_own_sections(stage: int) -> None:
    """zero2_offload (and a stage 0 or 1 config that offloads) had no estimate at all: no row, no warning, and a
    70B full fine-tune on 8 x 24 GiB, whose 16-bit weights alone are 131 GiB on every GPU, planned as fitting."""
    config = {
        "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu"}},
        "train_micro_batch_size_per_gpu": "auto",
    }
    facts = host(gpus(8, 24), ram_gib=256)
    swift = parse_swift_argv(["--model", "m", "--tuner_type", "full", "--deepspeed", "z_off.json"])
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    options = PlanOptions(user_deepspeed_rung="zero2_offload", user_deepspeed_config=config, layout="processes")
    model = typical_shape("m", int(70e9))
    plan = build_plan(swift, topo, facts, model, env={}, paths=PATHS, options=options)
    assert plan.strategy == "z_off.json" and plan.estimated_as == "zero2"
    [own] = [e for e in plan.estimates if e.strategy.value == "zero2"]
    assert own.parts["gpu_weights"] == model.total_params * 2  # every 16-bit weight on every GPU
    assert own.parts["gpu_optimizer"] == 0  # the fp32 master and Adam's moments are on the host
    sixteen_bit_grads = model.total_params * 2 if stage < 2 else model.total_params * 2 // 8
    assert abs(own.parts["gpu_gradients"] - sixteen_bit_grads) <= 8  # stage 2 partitions them, 0 and 1 do not
    assert not own.fits
    assert any("z_off.json (zero2_offload) may not fit: zero2_offload needs" in w for w in plan.warnings)


def test_stage_0_partitions_no_optimizer_state() -> None:
    """ZeRO stage 0 is data parallelism: each GPU holds the whole fp32 master and both moments."""
    facts = host(gpus(8, 80), ram_gib=512)
    swift = parse_swift_argv(["--model", "m", "--tuner_type", "full", "--deepspeed", "z0.json"])
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    config = {"zero_optimization": {"stage": 0}, "train_micro_batch_size_per_gpu": "auto"}
    options = PlanOptions(user_deepspeed_rung="zero0", user_deepspeed_config=config, layout="processes")
    model = typical_shape("m", int(1e9))
    plan = build_plan(swift, topo, facts, model, env={}, paths=PATHS, options=options)
    [own] = [e for e in plan.estimates if e.strategy.value == "zero2"]
    assert own.parts["gpu_optimizer"] == model.total_params * (4 + 8)  # fp32 master + two fp32 moments, whole


@pytest.mark.parametrize(
    ("tuner", "extra", "free_gib", "warned"),
    [
        ("full", (), 40, True),  # 7.6e9 x 2 bytes x 3 = 42.6 GiB: the weights and Adam's two moments
        ("full", (), 50, False),
        ("full", ("--save_only_model", "true"), 20, False),  # the weights alone: 14.2 GiB
        ("full", ("--save_only_model", "true"), 10, True),
        ("lora", (), 1, False),  # adapters: no floor worth stating
    ],
)
def test_a_disk_that_cannot_hold_one_checkpoint_is_warned_of_before_the_run(
    tuner: str, extra: tuple[str, ...], free_gib: int, warned: bool
) -> None:
    """doctor failed the disk, the run path said nothing, and a full fine-tune trained until its first save."""
    from dataclasses import replace

    facts = replace(host(gpus(2, 80), ram_gib=512), disk_free_bytes=free_gib * GiB)
    swift = parse_swift_argv(["--model", "m", "--tuner_type", tuner, "--output_dir", "/out", *extra])
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    plan = build_plan(swift, topo, facts, QWEN7B, env={}, paths=PATHS)
    found = [w for w in plan.warnings if "one checkpoint of this fine-tune takes at least" in w]
    assert bool(found) is warned
    if warned:
        assert found[0].startswith(f"output dir /out: {free_gib}.0 GiB free")
        counted = "(its weights)" if extra else "(its weights and Adam's two moments)"
        assert counted in found[0]
