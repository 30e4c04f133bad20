"""The global batch plain `swift sft` would train with is kept when safe-sft runs another number of
processes. Expected values are worked out by hand from swift's rules (swift/cli/main.py starts torchrun
only for NPROC_PER_NODE or NNODES, else one process; swift/trainers/arguments.py: unset accumulation is
max(1, ceil(16 / micro-batch / world size))), written in each row's id."""

from __future__ import annotations

import pytest

from launcher.model import GpuInfo
from launcher.plan.batch import as_ran, keep_global_batch
from launcher.plan.build import LaunchPaths, build_plan
from launcher.plan.settings import initial_settings, plan_swift_args
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.render import render_plan
from tests.conftest import gpus, host

PATHS = LaunchPaths(python="python", worker="w.py", config_dir="/cfg")


def plan_for(argv: list[str], env: dict[str, str], gpu_list: tuple[GpuInfo, ...], request: TopologyRequest):  # type: ignore[no-untyped-def]
    facts = host(gpu_list, ram_gib=256)
    swift = parse_swift_argv(["--model", "m", *argv])
    use_cpu = not gpu_list
    topo = resolve_topology(request, env, facts.gpus.gpus, free_port=1, use_cpu=use_cpu)
    return swift, build_plan(swift, topo, facts, None, env=env, paths=PATHS)


@pytest.mark.parametrize(
    ("argv", "env", "gpu_list", "request_", "accum_arg", "global_batch", "swift_global"),
    [
        pytest.param(["--gradient_accumulation_steps", "16"], {}, gpus(8, 80), TopologyRequest(), "2", 16, 16,
                     id="8-gpus-no-NPROC:swift-1x16=16;ours-8xaccum2=16"),
        pytest.param([], {}, gpus(8, 80), TopologyRequest(), None, 16, 16,
                     id="accum-unset:swift-ceil(16/1/1)=16;ours-swift-default-at-8=2-already"),
        pytest.param(["--per_device_train_batch_size", "3"], {}, gpus(4, 80), TopologyRequest(), None, 24, 18,
                     id="micro3-unset:swift-3x6x1=18;6/4-not-whole->2=swift-default-at-4:24-said"),
        pytest.param(["--gradient_accumulation_steps", "16"], {"NPROC_PER_NODE": "8"}, gpus(8, 80),
                     TopologyRequest(), None, 128, 128, id="NPROC_PER_NODE=8:swift-runs-8-too:untouched"),
        pytest.param(["--gradient_accumulation_steps", "16"], {}, gpus(3, 80), TopologyRequest(), "5", 15, 16,
                     id="3-gpus:16/3-not-whole->5:15-said"),
        pytest.param(["--gradient_accumulation_steps", "14"], {},
                     (*gpus(7, 80), GpuInfo(7, "GPU-busy", "Fake", 80 << 30, 10 << 30, 70 << 30)),
                     TopologyRequest(gpus="auto"), "2", 14, 14, id="auto-leaves-out-busy-gpu:7-procs:14/7=2"),
        pytest.param(["--gradient_accumulation_steps", "16"], {"NNODES": "2", "NODE_RANK": "0",
                     "MASTER_ADDR": "10.0.0.1"}, gpus(4, 80), TopologyRequest(), "4", 32, 32,
                     id="2-nodes-no-NPROC:swift-1x2x16=32;ours-8xaccum4=32"),
        pytest.param(["--use_cpu", "true", "--gradient_accumulation_steps", "4"], {}, (), TopologyRequest(nproc=2),
                     "2", 4, 4, id="cpu---nproc-2:swift-1x4=4;ours-2xaccum2=4"),
    ],
)  # fmt: skip
def test_global_batch_is_swifts(
    argv: list[str], env: dict[str, str], gpu_list: tuple[GpuInfo, ...], request_: TopologyRequest,
    accum_arg: str | None, global_batch: int, swift_global: int,
) -> None:  # fmt: skip
    swift, plan = plan_for(argv, env, gpu_list, request_)
    assert plan.batch is not None
    assert (plan.batch.global_batch, plan.batch.swift_global_batch) == (global_batch, swift_global)
    run_args = plan_swift_args(swift, plan)
    assert run_args.get("gradient_accumulation_steps") == (accum_arg or swift.get("gradient_accumulation_steps"))
    assert plan.swift_argv == plan.command[-len(plan.swift_argv) :]
    assert plan.swift_argv.count("--gradient_accumulation_steps") <= 1  # replaced in place, never doubled
    settings = initial_settings(swift, plan, None, env)
    assert settings.global_batch == global_batch
    said = [w for w in plan.warnings if "NOT" in w]
    assert bool(said) == (global_batch != swift_global)


def test_the_plan_prints_the_global_batch_and_what_plain_swift_would_have_used() -> None:
    _, plan = plan_for(["--gradient_accumulation_steps", "16"], {}, gpus(8, 80), TopologyRequest())
    text = render_plan(plan, None, {}, None)
    assert (
        "global batch 16 = per_device_train_batch_size 1 x gradient_accumulation_steps 2 x 8 process(es): kept as "
        "`swift sft` alone would run 1 process(es) with gradient_accumulation_steps 16" in text
    )
    assert "--gradient_accumulation_steps 2" in text


@pytest.mark.parametrize(
    ("micro", "given", "world", "swift_world", "accum"),
    [(1, 16, 8, 1, 2), (2, None, 2, 1, 4), (2, None, 4, 4, 2), (1, 1, 8, 1, 1), (4, 3, 2, 4, 6)],
    ids=["16*1/8", "ceil(16/2/1)=8;8*1/2", "same-world-default-ceil(16/2/4)", "1/8-rounds-up-to-1", "3*4/2=6"],
)
def test_keep_global_batch_table(micro: int, given: int | None, world: int, swift_world: int, accum: int) -> None:
    assert keep_global_batch(micro, given, world, swift_world).grad_accum == accum


def test_the_batch_as_a_script_ran_it_replaces_the_defaults_its_command_line_implied() -> None:
    # a script set micro-batch 2 in its own code where its argv implied transformers' 8
    planned = keep_global_batch(8, None, 2, 2)  # accumulation 1, 2 processes
    ran = as_ran(planned, 2, 1)
    assert (ran.global_batch, ran.swift_global_batch, ran.kept) == (4, 4, True)
    assert as_ran(planned, 8, planned.grad_accum) is planned
    # where safe-sft changed the accumulation (another world size than the script's alone), the script alone
    # keeps its own: only safe-sft's side takes what ran
    changed = keep_global_batch(2, 4, 4, 2)
    ran = as_ran(changed, 1, changed.grad_accum)
    assert (ran.micro_batch, ran.swift_accum, ran.grad_accum) == (1, 4, changed.grad_accum)
