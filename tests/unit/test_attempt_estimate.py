"""Each attempt records the estimate for its own settings beside its measured peak (issue 11, item 4)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from launcher.model import Failure, FailureKind, Strategy
from launcher.plan.build import LaunchPaths, build_plan
from launcher.plan.degrade import Settings
from launcher.plan.ds_config import SHIPPED_ZERO
from launcher.plan.estimate import corrected, measured_correction
from launcher.plan.sizing import attempt_estimate
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.prepare import Prepared
from launcher.probe.model_size import typical_shape
from launcher.run.gpumon import MemoryTimeline
from launcher.run.records import AttemptRecord, RunConfig
from launcher.run.report import attempt_json
from launcher.run.supervisor import Supervisor
from launcher.units import GiB
from tests.conftest import gpus, host
from tests.unit.test_supervisor import OOM_SUMMARY, FakeProcess, write_checkpoint

FACTS = host(gpus(2, 80), ram_gib=512)
TOPOLOGY = resolve_topology(TopologyRequest(), {}, FACTS.gpus.gpus, free_port=1)
MODEL = typical_shape("m", int(7e9))


def swift(*extra: str):  # type: ignore[no-untyped-def]
    return parse_swift_argv(["--model", "m", "--tuner_type", "full", "--max_length", "4096", *extra])


def test_the_estimate_follows_the_attempts_settings_and_config() -> None:
    four = attempt_estimate(swift("--per_device_train_batch_size", "4"), MODEL, TOPOLOGY, FACTS, SHIPPED_ZERO["zero3"])
    two = attempt_estimate(swift("--per_device_train_batch_size", "2"), MODEL, TOPOLOGY, FACTS, SHIPPED_ZERO["zero3"])
    assert four is not None and two is not None
    assert four.strategy is Strategy.ZERO3 and two.gpu_need_bytes < four.gpu_need_bytes
    offload = attempt_estimate(swift(), MODEL, TOPOLOGY, FACTS, SHIPPED_ZERO["zero3_offload"])
    plain = attempt_estimate(swift(), MODEL, TOPOLOGY, FACTS, None)
    assert offload is not None and offload.strategy is Strategy.ZERO3_OFFLOAD
    assert plain is not None and plain.strategy is Strategy.DDP
    assert attempt_estimate(swift(), None, TOPOLOGY, FACTS, None) is None


def test_report_puts_the_estimate_beside_the_peak_the_attempt_died_at() -> None:
    est = attempt_estimate(swift(), MODEL, TOPOLOGY, FACTS, SHIPPED_ZERO["zero2"])
    assert est is not None
    memory = MemoryTimeline(gpu_indices=(0, 1), gpu_peak={0: 70 * GiB, 1: 79 * GiB})
    record = AttemptRecord(
        number=1,
        settings=Settings(micro_batch=4, grad_accum=1, world_size=2, deepspeed="zero2"),
        command=[],
        env_set={},
        log_path="console.log",
        started="t",
        failure=Failure(FailureKind.CUDA_OOM, ("CUDA out of memory",)),
        memory=memory,
        estimate=est,
    )
    data = attempt_json(record)["estimate"]
    assert data["strategy"] == "zero2" and data["gpu_need_bytes"] == est.gpu_need_bytes
    assert data["measured_peak_bytes"] == 79 * GiB
    assert data["measured_over_estimate"] == round(79 * GiB / est.gpu_need_bytes, 3)
    assert data["oom"] is True
    assert sum(data["parts"].values()) == est.gpu_need_bytes


def test_the_supervisor_records_each_attempts_estimate(tmp_path: Path) -> None:
    argv = ["--model", "m", "--tuner_type", "full", "--output_dir", str(tmp_path)]
    argv += ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", "--max_length", "4096"]
    args = parse_swift_argv(argv)
    plan = build_plan(args, TOPOLOGY, FACTS, MODEL, env={}, paths=LaunchPaths("python", "worker.py", "/cfg"))
    prepared = Prepared(swift=args, host=FACTS, model=MODEL, plan=plan)
    script = [FakeProcess(1, OOM_SUMMARY), FakeProcess(0, "")]
    spawned: list[list[str]] = []

    def spawn(command: list[str], env: dict[str, str], log: Path) -> FakeProcess:
        spawned.append(command)
        if len(spawned) == 1:
            write_checkpoint(tmp_path, "v0-x", 3)
        return script[len(spawned) - 1]

    config = RunConfig(sample_interval=0)
    sup = Supervisor(prepared, config, {}, run_dir=tmp_path / "safe-sft" / "run", spawn=spawn, sleep=lambda _: None)
    result = sup.run()
    first, second = result.attempts
    assert first.estimate is not None and second.estimate is not None
    assert first.estimate.strategy.value == plan.strategy
    assert second.settings.micro_batch == 2
    assert second.estimate.gpu_need_bytes < first.estimate.gpu_need_bytes  # the halved micro-batch's estimate


def test_a_runs_own_measurement_corrects_its_estimates() -> None:
    assert measured_correction([]) == 1.0
    assert measured_correction([(None, 50, False)]) == 1.0  # nothing measured
    assert measured_correction([(60, 50, False)]) == 1.2
    assert measured_correction([(70, 80, True)]) == 1.0  # an OOM's peak is a lower bound: only raises
    assert measured_correction([(90, 60, True)]) == 1.5
    assert measured_correction([(300, 100, False)]) == 2.0  # bounded
    assert measured_correction([(60, 50, False), (40, 50, False)]) == 0.8  # the latest decides
    est = attempt_estimate(swift(), MODEL, TOPOLOGY, FACTS, SHIPPED_ZERO["zero3"])
    assert est is not None
    up = corrected(est, 1.25)
    assert up.gpu_need_bytes == est.gpu_need_bytes + int(est.gpu_need_bytes * 0.25)
    assert sum(v for k, v in up.parts.items() if k.startswith("gpu_")) == up.gpu_need_bytes
    assert corrected(est, 1.0) is est


def test_the_ladder_sees_zero3_through_the_measured_correction(tmp_path: Path) -> None:
    args = parse_swift_argv(["--model", "m", "--tuner_type", "full", "--output_dir", str(tmp_path)])
    plan = build_plan(args, TOPOLOGY, FACTS, MODEL, env={}, paths=LaunchPaths("python", "worker.py", "/cfg"))
    zero3 = next(e for e in plan.estimates if e.strategy is Strategy.ZERO3)
    assert zero3.gpu_fits and 2 * zero3.gpu_need_bytes > 80 * GiB
    sup = Supervisor(Prepared(swift=args, host=FACTS, model=MODEL, plan=plan), RunConfig(), {},
                     run_dir=tmp_path / "run", spawn=lambda *a: None, sleep=lambda _: None)  # fmt: skip
    measured = AttemptRecord(
        number=1,
        settings=Settings(micro_batch=1, grad_accum=1, world_size=2, deepspeed="zero2"),
        command=[],
        env_set={},
        log_path="console.log",
        started="t",
        memory=MemoryTimeline(gpu_indices=(0,), gpu_peak={0: 2 * zero3.gpu_need_bytes}),
        estimate=zero3,
    )
    assert sup._zero3_fits([])
    assert not sup._zero3_fits([measured])  # the run measured twice its estimate: zero3 would not fit


def test_an_unset_max_length_is_estimated_on_the_run_as_it_was_planned(tmp_path: Path) -> None:
    """The plan assumes the longest sampled row for an unset --max_length (launcher.plan.unset_length); each
    attempt's estimate reads the same length from Plan.assumed_length, not the 2048 default."""
    zero3 = SHIPPED_ZERO["zero3"]
    unset = parse_swift_argv(["--model", "m", "--tuner_type", "full", "--output_dir", str(tmp_path)])
    given = parse_swift_argv(["--model", "m", "--tuner_type", "full", "--max_length", "9000"])
    at_9000 = attempt_estimate(given, MODEL, TOPOLOGY, FACTS, zero3)
    at_default = attempt_estimate(unset, MODEL, TOPOLOGY, FACTS, zero3)
    assumed = attempt_estimate(unset, MODEL, TOPOLOGY, FACTS, zero3, assumed_length=9000)
    assert at_9000 is not None and at_default is not None and assumed is not None
    assert assumed.gpu_need_bytes == at_9000.gpu_need_bytes > at_default.gpu_need_bytes
    at_4096 = attempt_estimate(swift(), MODEL, TOPOLOGY, FACTS, zero3, assumed_length=9000)
    assert at_4096 is not None and at_4096.gpu_need_bytes < at_9000.gpu_need_bytes  # a given length wins

    plan = build_plan(unset, TOPOLOGY, FACTS, MODEL, env={}, paths=LaunchPaths("python", "worker.py", "/cfg"))
    plan = replace(plan, assumed_length=9000, strategy="zero3", deepspeed_arg="/cfg/zero3.json")
    sup = Supervisor(Prepared(swift=unset, host=FACTS, model=MODEL, plan=plan), RunConfig(sample_interval=0), {},
                     run_dir=tmp_path / "safe-sft" / "run", spawn=lambda *a: FakeProcess(0, ""),
                     sleep=lambda _: None)  # fmt: skip
    (attempt,) = sup.run().attempts
    assert attempt.estimate is not None and attempt.estimate.gpu_need_bytes == at_9000.gpu_need_bytes
