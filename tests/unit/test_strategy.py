"""The strategy choice across model sizes, tuning types, GPU counts and RAM, as one table."""

import pytest

from launcher.plan.build import LaunchPaths, PlanOptions, build_plan
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


@pytest.mark.parametrize(
    ("params", "tuner", "n_gpus", "gpu_gib", "ram_gib", "nodes", "expected"),
    [
        pytest.param(0.5e9, "full", 1, 24, 64, 1, "zero2", id="0.5B-full-1x24"),
        pytest.param(1.5e9, "full", 8, 40, 256, 1, "zero2", id="1.5B-full-8x40"),
        pytest.param(7e9, "lora", 1, 24, 64, 1, "zero2", id="7B-lora-1x24"),
        pytest.param(7e9, "lora", 4, 24, 256, 1, "zero2", id="7B-lora-4x24"),
        pytest.param(7e9, "full", 4, 24, 256, 1, "zero3_offload", id="7B-full-4x24"),
        pytest.param(7e9, "full", 8, 80, 1024, 1, "zero2", id="7B-full-8x80"),
        pytest.param(7e9, "full", 1, 80, 256, 1, "zero3_offload", id="7B-full-1x80"),
        pytest.param(14e9, "full", 8, 80, 1024, 1, "zero2", id="14B-full-8x80-1TiB"),
        pytest.param(14e9, "full", 8, 80, 512, 1, "zero3", id="14B-full-8x80-512GiB-ram-rules-out-zero2"),
        pytest.param(14e9, "full", 8, 40, 512, 1, "zero3_offload", id="14B-full-8x40"),
        pytest.param(32e9, "full", 8, 80, 1024, 1, "zero3_offload", id="32B-full-8x80"),
        pytest.param(32e9, "full", 8, 80, 1024, 2, "zero3", id="32B-full-2nodes-8x80"),
        pytest.param(72e9, "lora", 8, 80, 1024, 1, "zero3", id="72B-lora-8x80"),
        pytest.param(72e9, "full", 8, 80, 1024, 4, "zero3", id="72B-full-4nodes-8x80"),
        pytest.param(72e9, "full", 8, 80, 1024, 1, None, id="72B-full-8x80-nothing-fits"),
        pytest.param(7e9, "full", 4, 24, 128, 1, None, id="7B-full-4x24-64GiB-ram-nothing-fits"),
        pytest.param(32e9, "lora", 1, 24, 64, 1, None, id="32B-lora-1x24-nothing-fits"),
    ],
)
def test_choice(params, tuner, n_gpus, gpu_gib, ram_gib, nodes, expected) -> None:  # type: ignore[no-untyped-def]
    plan = choose(params, tuner, n_gpus, gpu_gib, ram_gib, nodes)
    if expected is None:
        assert not plan.fits
        assert "nothing fits" in plan.strategy_reason
        assert "GiB" in plan.strategy_reason  # the numbers are shown
    else:
        assert plan.fits
        assert plan.strategy == expected
        assert plan.deepspeed_arg == f"/cfg/{expected}.json"
        assert ("--deepspeed", f"/cfg/{expected}.json") == plan.swift_argv[-2:]


def test_full_7b_on_4x24_says_why() -> None:
    plan = choose(7e9, "full", 4, 24, 256)
    assert "zero2 does not fit" in plan.strategy_reason
    assert "zero3 does not fit" in plan.strategy_reason


def test_nothing_fits_suggests_lora_only_for_full() -> None:
    assert "LoRA" in choose(72e9, "full", 8, 80, 1024).strategy_reason
    assert "LoRA" not in choose(32e9, "lora", 1, 24, 64).strategy_reason


def test_activations_can_make_a_small_model_not_fit() -> None:
    big_batch = (
        "--per_device_train_batch_size",
        "64",
        "--max_length",
        "4096",
        "--gradient_checkpointing",
        "false",
    )
    assert not choose(0.5e9, "full", 1, 24, 64, extra=big_batch).fits


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
    plan = build_plan(swift, topo, facts, typical_shape("m", int(7e9)), env={}, paths=PATHS)
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
