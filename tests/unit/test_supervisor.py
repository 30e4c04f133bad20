"""The restart loop without processes: a fake spawn plays scripted attempts, as torchrun's agent tests do."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from launcher.configs import read_user_deepspeed
from launcher.model import FailureKind
from launcher.plan.build import LaunchPaths, build_plan
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.prepare import Prepared
from launcher.run.records import RunConfig
from launcher.run.supervisor import Supervisor
from tests.conftest import host

OOM_SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_10:00:01
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 11)
  traceback : Traceback (most recent call last):
    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
============================================================
"""


class FakeProcess:
    def __init__(self, code: int, tail: str, polls_before_exit: int = 0) -> None:
        self.code, self.tail, self.polls = code, tail, polls_before_exit
        self.signals: list[int] = []

    @property
    def pid(self) -> int:
        return 4242

    def poll(self) -> int | None:
        if self.signals:
            return -self.signals[-1]
        if self.polls > 0:
            self.polls -= 1
            return None
        return self.code

    def signal_all(self, signum: int) -> None:
        self.signals.append(signum)

    def alive_descendants(self) -> list[object]:
        return []

    def finish(self) -> tuple[int, str]:
        return (-self.signals[-1] if self.signals else self.code), self.tail


def write_checkpoint(out: Path, version: str, step: int) -> None:
    path = out / version / f"checkpoint-{step}"
    path.mkdir(parents=True)
    for name in ("trainer_state.json", "model.safetensors", "optimizer.pt"):
        (path / name).write_text("{}")
    (out / version / "logging.jsonl").write_text(json.dumps({"global_step/max_steps": f"{step}/8"}) + "\n")


def prepared(out: Path, *extra: str) -> Prepared:
    facts = host((), ram_gib=24)
    swift = parse_swift_argv(
        [
            "--model",
            "m",
            "--use_cpu",
            "true",
            "--output_dir",
            str(out),
            "--per_device_train_batch_size",
            "4",
            "--gradient_accumulation_steps",
            "2",
            *extra,
        ]
    )
    topo = resolve_topology(TopologyRequest(), {"NPROC_PER_NODE": "2"}, (), free_port=1, use_cpu=True)
    plan = build_plan(swift, topo, facts, None, env={}, paths=LaunchPaths("python", "worker.py", "/cfg"))
    return Prepared(swift=swift, host=facts, model=None, plan=plan)


def report_resolved(env: dict[str, str], run_dir: Path) -> None:
    """What launcher/worker.py does inside swift once it has parsed its arguments."""
    data = {"output_dir": str(run_dir.parent), "run_dir": str(run_dir), "add_version": True}
    Path(env["SAFE_SFT_RESOLVED_ARGS"]).write_text(json.dumps(data))


def supervisor(
    out: Path,
    script: list[FakeProcess],
    spawned: list[list[str]],
    prep: Prepared | None = None,
    swift_out: Path | None = None,  # where swift writes, when its naming differs from the argv's
    **config,
) -> Supervisor:  # type: ignore[no-untyped-def]
    def spawn(argv: list[str], env: dict[str, str], log: Path) -> FakeProcess:
        spawned.append(argv)
        process = script[len(spawned) - 1]
        run_dir = (swift_out or out) / f"v{len(spawned) - 1}-x"
        report_resolved(env, run_dir)
        if process.code == 1:  # the attempt got as far as a checkpoint before failing
            write_checkpoint(run_dir.parent, run_dir.name, 3 * len(spawned))
        return process

    return Supervisor(
        prep or prepared(out), RunConfig(**config), {}, run_dir=out / "safe-sft" / "run", spawn=spawn,
        sleep=lambda _: None,
    )  # fmt: skip


def test_oom_then_success_halves_batch_and_resumes(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    sup = supervisor(tmp_path, [FakeProcess(1, OOM_SUMMARY), FakeProcess(0, "")], spawned)
    result = sup.run()
    assert (result.outcome, result.exit_code, len(result.attempts)) == ("succeeded", 0, 2)
    assert result.attempts[0].failure is not None and result.attempts[0].failure.kind is FailureKind.CUDA_OOM
    second = spawned[1]
    assert second[second.index("--per_device_train_batch_size") + 1] == "2"
    assert second[second.index("--gradient_accumulation_steps") + 1] == "4"
    assert second[second.index("--resume_from_checkpoint") + 1].endswith("v0-x/checkpoint-3")
    assert "--resume_only_model" not in second
    assert spawned[0][:3] == ["python", "-m", "torch.distributed.run"]


def test_an_earlier_runs_later_checkpoint_in_the_same_output_dir_is_not_resumed(tmp_path: Path) -> None:
    """Rerunning into the same --output_dir: attempt 2 resumes from this run's checkpoint, not the last run's."""
    write_checkpoint(tmp_path, "v9-earlier-run", 8)
    spawned: list[list[str]] = []
    result = supervisor(tmp_path, [FakeProcess(1, OOM_SUMMARY), FakeProcess(0, "")], spawned).run()
    assert result.outcome == "succeeded"
    assert spawned[1][spawned[1].index("--resume_from_checkpoint") + 1] == str(tmp_path / "v0-x" / "checkpoint-3")


def test_resume_follows_the_run_dir_swift_reported_not_the_argv(tmp_path: Path) -> None:
    """swift names output/Name from a Hugging Face cache path, not the last path component of --model."""
    predicted, swift_out = tmp_path / "predicted", tmp_path / "output" / "Name"
    spawned: list[list[str]] = []
    script = [FakeProcess(1, OOM_SUMMARY), FakeProcess(0, "")]
    result = supervisor(predicted, script, spawned, swift_out=swift_out).run()
    assert result.outcome == "succeeded"
    assert spawned[1][spawned[1].index("--resume_from_checkpoint") + 1] == str(swift_out / "v0-x" / "checkpoint-3")
    assert [a.run_dir for a in result.attempts] == [str(swift_out / "v0-x"), str(swift_out / "v1-x")]


def test_users_own_deepspeed_config_is_copied_with_auto_batch_sizes_when_the_micro_batch_halves(
    tmp_path: Path,
) -> None:
    user_file = tmp_path / "my_ds.json"
    user_text = json.dumps({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 4}) + "\n"
    user_file.write_text(user_text)
    prep = prepared(tmp_path, "--deepspeed", str(user_file))
    prep = Prepared(prep.swift, prep.host, prep.model, prep.plan, read_user_deepspeed(str(user_file)))
    spawned: list[list[str]] = []
    result = supervisor(tmp_path, [FakeProcess(1, OOM_SUMMARY), FakeProcess(0, "")], spawned, prep).run()
    assert result.outcome == "succeeded"
    assert spawned[0][spawned[0].index("--deepspeed") + 1] == str(user_file)
    copy = Path(spawned[1][spawned[1].index("--deepspeed") + 1])
    assert copy.parent == tmp_path / "safe-sft" and copy.name.startswith("my_ds-zero2-")
    assert json.loads(copy.read_text()) == {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}
    assert user_file.read_text() == user_text  # the user's file is never rewritten


def test_max_attempts_bounds_the_ladder(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    script = [FakeProcess(1, OOM_SUMMARY) for _ in range(3)]
    result = supervisor(tmp_path, script, spawned, max_attempts=3).run()
    assert (result.outcome, len(spawned)) == ("failed", 3)
    assert result.give_up_reason == "--max-attempts 3 reached"


def test_user_error_is_not_retried(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    tail = "[rank0]: ValueError: remaining_argv: ['--bogus']"
    result = supervisor(tmp_path, [FakeProcess(2, tail)], spawned).run()
    assert (result.outcome, result.exit_code, len(spawned)) == ("failed", 1, 1)


def test_signal_is_forwarded_and_never_restarted(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    process = FakeProcess(0, "", polls_before_exit=1000)
    sup = supervisor(tmp_path, [process], spawned, grace_seconds=0.0)
    original_poll = process.poll

    def poll_then_signal() -> int | None:
        sup.received = signal.SIGTERM  # what the handler does when scancel's SIGTERM arrives
        return original_poll()

    process.poll = poll_then_signal  # type: ignore[method-assign]
    result = sup.run()
    assert (result.outcome, result.exit_code, len(spawned)) == ("interrupted", 143, 1)
    assert process.signals[0] == signal.SIGTERM


def test_report_masks_secret_looking_env_values(tmp_path: Path) -> None:
    from launcher.run.report import report_json

    spawned: list[list[str]] = []
    sup = supervisor(tmp_path, [FakeProcess(0, "")], spawned)
    result = sup.run()
    result.attempts[0].env_set.update({"HF_TOKEN": "hf_abc", "WANDB_API_KEY": "k", "NCCL_DEBUG": "WARN"})
    data = report_json(result.attempts, result, ["safe-sft"])
    env = data["attempts"][0]["env_set"]
    assert (env["HF_TOKEN"], env["WANDB_API_KEY"], env["NCCL_DEBUG"]) == ("****", "****", "WARN")
    assert data["schema"] == 1 and data["outcome"] == "succeeded"


def test_resume_latest_resumes_the_first_attempt(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, "v0-earlier", 6)
    spawned: list[list[str]] = []
    result = supervisor(tmp_path, [FakeProcess(0, "")], spawned, resume_latest=True).run()
    assert result.outcome == "succeeded"
    assert spawned[0][spawned[0].index("--resume_from_checkpoint") + 1].endswith("v0-earlier/checkpoint-6")
    assert "--resume_only_model" not in spawned[0]  # same (no) ZeRO stage: a full resume
    plain: list[list[str]] = []
    supervisor(tmp_path / "other", [FakeProcess(0, "")], plain).run()
    assert "--resume_from_checkpoint" not in plain[0]


def test_low_memlock_offload_config_is_written_once_where_the_plan_points(tmp_path: Path) -> None:
    from launcher.probe.model_size import typical_shape
    from tests.conftest import gpus

    facts = host(gpus(4, 24), ram_gib=256, memlock_hard=8 * 2**20)
    swift = parse_swift_argv(["--model", "m", "--tuner_type", "full", "--output_dir", str(tmp_path)])
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    plan = build_plan(
        swift, topo, facts, typical_shape("m", int(7e9)), env={}, paths=LaunchPaths("python", "w", "/cfg")
    )
    spawned: list[list[str]] = []

    def spawn(argv: list[str], env: dict[str, str], log: Path) -> FakeProcess:
        spawned.append(argv)
        return FakeProcess(0, "")

    sup = Supervisor(Prepared(swift, facts, None, plan), RunConfig(), {}, run_dir=tmp_path / "safe-sft" / "r",
                     spawn=spawn, sleep=lambda _: None)  # fmt: skip
    assert sup.run().outcome == "succeeded"
    written = tmp_path / "safe-sft" / "zero3_offload_nopin.json"
    assert spawned[0][spawned[0].index("--deepspeed") + 1] == str(written) == plan.deepspeed_arg
    config = json.loads(written.read_text())["zero_optimization"]
    assert config["offload_param"]["pin_memory"] is False and config["offload_optimizer"]["pin_memory"] is False
