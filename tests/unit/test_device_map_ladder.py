"""The ladder for a device_map run (one process, the model split over the GPUs): after a CUDA OOM it first
moves layers off the GPU that ran out (a rebalanced --max_memory, from the attempt's per-GPU peaks), then
takes the ordinary rungs without the ZeRO stage; and the report says how even the GPUs' peaks were."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

from launcher.model import Failure, FailureKind
from launcher.plan.build import LaunchPaths, build_plan
from launcher.plan.degrade import GiveUp, Settings, Step, next_step
from launcher.plan.device_map import place, rebalance
from launcher.plan.guided import Memory, guided_step
from launcher.plan.settings import attempt_args, initial_settings, plan_swift_args
from launcher.plan.sizing import device_map_pieces
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.prepare import Prepared
from launcher.run.gpumon import MemoryTimeline
from launcher.run.records import AttemptRecord, RunConfig
from launcher.run.report import attempt_json, report_json
from launcher.run.supervisor import Supervisor
from launcher.show_report import load_report, render_report
from launcher.units import GiB
from tests.conftest import gpus, host
from tests.unit.test_device_map import QWEN3_235B

PATHS = LaunchPaths(python="python", worker="worker.py", config_dir="/cfg")
FACTS = host(gpus(8, 80), ram_gib=1024)
TOPOLOGY = resolve_topology(TopologyRequest(), {}, FACTS.gpus.gpus, free_port=1)


def device_map_plan(tmp_path: Path):  # type: ignore[no-untyped-def]
    swift = parse_swift_argv(
        ["--model", "m", "--tuner_type", "lora", "--max_length", "4096", "--output_dir", str(tmp_path)]
    )
    plan = build_plan(swift, TOPOLOGY, FACTS, QWEN3_235B, env={}, paths=PATHS)
    assert plan.strategy == "device_map" and plan.device_map is not None
    return swift, plan


def test_rebalance_moves_layers_off_the_gpu_that_ran_out(tmp_path: Path) -> None:
    swift, plan = device_map_plan(tmp_path)
    found = device_map_pieces(plan_swift_args(swift, plan), QWEN3_235B, plan.topology)
    assert found is not None and plan.device_map is not None
    shape, pieces = found
    budgets = plan.device_map.max_memory
    capacities = [80 * GiB] * 8
    # the head's GPU ran out (the logits were longer than estimated) while GPU 0 had 20 GiB to spare
    peaks = [60 * GiB, 70 * GiB, 70 * GiB, 70 * GiB, 70 * GiB, 70 * GiB, 70 * GiB, 80 * GiB]
    moved = rebalance(shape, pieces, budgets, peaks, capacities)
    assert moved is not None
    before = plan.device_map.layers
    assert moved.layers[7] < before[7] and sum(moved.layers) == 94
    # onto the GPUs with room; GPU 0 cannot take one: transformers keeps the largest module's room free there
    assert moved.layers[0] == before[0] and sum(moved.layers[1:7]) > sum(before[1:7])
    assert place(pieces, moved.max_memory) == moved  # transformers would place exactly this
    assert rebalance(shape, pieces, budgets, [70 * GiB] * 8, capacities) is None  # even peaks: nothing to move


def test_a_device_map_run_takes_no_zero_rung() -> None:
    s = Settings(micro_batch=1, grad_accum=16, world_size=1, device_map=True, max_memory=(1, 2))
    step = next_step(s, FailureKind.CUDA_OOM)
    assert isinstance(step, GiveUp)  # micro-batch 1, checkpointing on, no images, no max_length: nothing left
    plain = next_step(replace(s, device_map=False, max_memory=()), FailureKind.CUDA_OOM)
    assert isinstance(plain, Step) and plain.settings.deepspeed == "zero2"  # what a process run would take
    # the guided ladder keeps it off ZeRO too
    two = replace(s, micro_batch=2, grad_accum=8)
    memory = Memory(need=lambda x: 50 * GiB * x.micro_batch, capacity_bytes=80 * GiB)
    guided = guided_step(two, memory)
    assert guided is not None and guided.settings.deepspeed is None and guided.settings.micro_batch == 1


def test_rebalance_comes_first_then_the_ordinary_rungs() -> None:
    s = Settings(micro_batch=2, grad_accum=8, world_size=1, device_map=True, max_memory=(1, 2))
    moved = Step(replace(s, max_memory=(2, 1), rebalanced=1), "rebalanced", "why")
    assert next_step(s, FailureKind.CUDA_OOM, rebalance=lambda _: moved) is moved
    after = next_step(s, FailureKind.CUDA_OOM, rebalance=lambda _: None)  # peaks were even: the ordinary rung
    assert isinstance(after, Step) and after.settings.micro_batch == 1
    save = next_step(s, FailureKind.CUDA_OOM_SAVE, rebalance=lambda _: moved)
    assert isinstance(save, Step) and save.settings.save_only_model  # a checkpoint write: save_only_model


def oom_record(plan, settings: Settings, peaks: dict[int, int]) -> AttemptRecord:  # type: ignore[no-untyped-def]
    return AttemptRecord(
        number=1, settings=settings, command=[], env_set={}, log_path="console.log", started="t",
        failure=Failure(FailureKind.CUDA_OOM, ("torch.OutOfMemoryError: CUDA out of memory.",), rank=0),
        memory=MemoryTimeline(gpu_indices=tuple(range(8)), gpu_totals={i: 80 * GiB for i in range(8)}, gpu_peak=peaks),
    )  # fmt: skip


def test_the_supervisor_rebalances_from_the_attempts_peaks_and_passes_it_to_swift(tmp_path: Path) -> None:
    swift, plan = device_map_plan(tmp_path)
    prepared = Prepared(swift=swift, host=FACTS, model=QWEN3_235B, plan=plan)
    sup = Supervisor(prepared, RunConfig(sample_interval=0), {}, run_dir=tmp_path / "r", spawn=lambda *a: None,
                     sleep=lambda _: None)  # fmt: skip
    base = plan_swift_args(swift, plan)
    initial = initial_settings(swift, plan, QWEN3_235B, {})
    assert initial.device_map and initial.deepspeed is None and initial.max_memory == plan.device_map.max_memory
    peaks = {i: 70 * GiB for i in range(8)} | {0: 55 * GiB, 7: 80 * GiB}
    record = oom_record(plan, initial, peaks)
    rung = sup._rebalance(base, initial, record)
    assert rung is not None
    step = next_step(initial, FailureKind.CUDA_OOM, rebalance=rung, memory=sup._memory(base, initial, record, [record]))
    assert isinstance(step, Step) and step.settings.rebalanced == 1
    assert "device_map layers per GPU" in step.change and "GPU 7 peaked at 80.0 GiB" in step.reason
    args = attempt_args(base, initial, step.settings, None, user_deepspeed=None, templates={}, config_dir="/cfg",
                        output_dir=str(tmp_path), fresh_version_dir=False)  # fmt: skip
    argv = args.swift.argv()
    assert argv.count("--max_memory") == 1 and "--deepspeed" not in argv
    given = ast.literal_eval(argv[argv.index("--max_memory") + 1])
    assert tuple(given[i] for i in range(8)) == step.settings.max_memory != initial.max_memory
    # twice at most, then the ordinary rungs
    spent = replace(step.settings, rebalanced=2)
    assert rung(spent) is None
    # the estimate of an attempt of a device_map run is device_map's, with its own budgets
    need = sup._need(base, initial, step.settings)
    assert need is not None and need != sup._need(base, initial, initial)


def test_the_report_says_how_even_the_gpus_peaks_were(tmp_path: Path) -> None:
    swift, plan = device_map_plan(tmp_path)
    initial = initial_settings(swift, plan, QWEN3_235B, {})
    peaks = {i: 70 * GiB for i in range(8)} | {0: 56 * GiB, 7: 80 * GiB}
    data = attempt_json(oom_record(plan, initial, peaks))
    even = data["gpu_evenness"]
    assert even["device_map"] is True and even["highest_gpu"] == 7 and even["lowest_gpu"] == 0
    assert even["max_over_min"] == round(80 / 56, 3)
    processes = attempt_json(oom_record(plan, replace(initial, device_map=False, max_memory=()), peaks))
    assert processes["gpu_evenness"]["device_map"] is False
    # `safe-sft report` prints a device_map attempt's evenness beside its peaks
    record = oom_record(plan, initial, peaks)
    run_dir = tmp_path / "safe-sft" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "report.json").write_text(json.dumps(report_json([record], None, ["safe-sft"])))
    shown = render_report(load_report(run_dir))
    assert "device_map max/min 1.43 (GPU7 highest)" in shown


def test_a_supervised_device_map_attempt_is_one_process_over_every_gpu(tmp_path: Path) -> None:
    from tests.unit.test_supervisor import FakeProcess

    swift, plan = device_map_plan(tmp_path)
    spawned: list[tuple[list[str], dict[str, str]]] = []

    def spawn(command: list[str], env: dict[str, str], log: Path) -> FakeProcess:
        spawned.append((command, env))
        return FakeProcess(0, "")

    prepared = Prepared(swift=swift, host=FACTS, model=QWEN3_235B, plan=plan)
    sup = Supervisor(prepared, RunConfig(sample_interval=0), {}, run_dir=tmp_path / "safe-sft" / "r", spawn=spawn,
                     sleep=lambda _: None)  # fmt: skip
    result = sup.run()
    assert result.outcome == "succeeded"
    command, env = spawned[0]
    assert command[command.index("--nproc_per_node") + 1] == "1" and "--deepspeed" not in command
    assert env["NPROC_PER_NODE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert ast.literal_eval(command[command.index("--max_memory") + 1]) == dict(enumerate(plan.device_map.max_memory))
    est = result.attempts[0].estimate
    assert est is not None and est.strategy.value == "device_map"  # the attempt's own estimate is device_map's
