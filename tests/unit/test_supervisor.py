"""The restart loop without processes: a fake spawn plays scripted attempts, as torchrun's agent tests do."""

from __future__ import annotations

import itertools
import json
import signal
from pathlib import Path

import pytest

from launcher.backends.swift import swift_options, swift_value_kinds
from launcher.configs import read_user_deepspeed
from launcher.model import FailureKind
from launcher.plan.build import LaunchPaths, PlanOptions, build_plan
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.prepare import Prepared
from launcher.run.lost_work import lost_work
from launcher.run.records import AttemptRecord, RunConfig
from launcher.run.supervisor import Supervisor
from tests.conftest import host
from tests.unit.test_checkpoints import make

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
        self.muted = False

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

    def mute_terminal(self) -> None:
        self.muted = True

    def alive_descendants(self) -> list[object]:
        return []

    def finish(self) -> tuple[int, str]:
        return (-self.signals[-1] if self.signals else self.code), self.tail


def write_checkpoint(out: Path, version: str, step: int) -> None:
    make(out / version / f"checkpoint-{step}")
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
        ],
        None,
        swift_options(),
        swift_value_kinds(),
    )
    topo = resolve_topology(TopologyRequest(), {"NPROC_PER_NODE": "2"}, (), free_port=1, use_cpu=True)
    plan = build_plan(swift, topo, facts, None, env={}, paths=LaunchPaths("python", "worker.py", "/cfg"))
    return Prepared(swift=swift, host=facts, model=None, plan=plan)


def report_resolved(env: dict[str, str], run_dir: Path) -> None:
    """What launcher/worker.py does inside swift once it has parsed its arguments: a versioned run dir
    (v<N>-...) lies under swift's output_dir; with --add_version false the run dir is the output dir."""
    versioned = run_dir.name[:1] == "v" and run_dir.name[1:].split("-", 1)[0].isdigit()
    output_dir = run_dir.parent if versioned else run_dir
    data = {"output_dir": str(output_dir), "run_dir": str(run_dir), "add_version": versioned}
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
    assert process.muted  # the ranks' tracebacks of the signal go to console.log, not the terminal


KILLED_SUMMARY = """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  time      : 2026-11-28_22:02:16
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 3595)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 3595
============================================================
"""


def test_a_signal_after_the_attempt_ended_by_itself_keeps_its_failure(tmp_path: Path) -> None:
    """A Ctrl-C 0.2 s after a rank was killed, once torchrun had given up, had been reported as the
    attempt's cause (interrupted), the rank's death nowhere (hostile42sig F6). The failure stays the
    attempt's; the run stops before another attempt starts, exit 130."""
    spawned: list[list[str]] = []
    process = FakeProcess(1, KILLED_SUMMARY, polls_before_exit=2)
    sup = supervisor(tmp_path, [process, FakeProcess(0, "")], spawned, grace_seconds=0.0)
    original_poll = process.poll

    def exit_then_signal() -> int | None:
        code = original_poll()
        if code is not None:  # the Ctrl-C lands just after torchrun has ended
            sup.received = signal.SIGINT
        return code

    process.poll = exit_then_signal  # type: ignore[method-assign]
    result = sup.run()
    assert (result.outcome, result.exit_code, len(spawned)) == ("interrupted", 130, 1)
    failure = result.attempts[0].failure
    assert failure is not None and (failure.kind, failure.rank) == (FailureKind.KILLED, 1)
    assert result.give_up_reason == "SIGINT received after attempt 1 failed: no attempt follows"
    assert not process.signals  # nothing was left to stop


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
        swift, topo, facts, typical_shape("m", int(7e9)), env={}, paths=LaunchPaths("python", "w", "/cfg"),
        options=PlanOptions(layout="processes"),  # the offload path: device_map would fit (test_device_map.py)
    )  # fmt: skip
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


LOAD_FAILURE_SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_10:00:01
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 10)
  traceback : Traceback (most recent call last):
    File "transformers/trainer.py", line 2300, in _load_from_checkpoint
    json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)
============================================================
"""


def scripted(out: Path, script: list[tuple[FakeProcess, list[Path]]], spawned: list[list[str]]):  # type: ignore[no-untyped-def]
    """A spawn that plays each attempt's process and writes that attempt's checkpoints (and log line)."""

    def spawn(argv: list[str], env: dict[str, str], log: Path) -> FakeProcess:
        spawned.append(argv)
        process, checkpoints = script[len(spawned) - 1]
        report_resolved(env, checkpoints[0].parent if checkpoints else out)  # where swift says it writes
        for path in checkpoints:
            make(path)
            with (path.parent / "logging.jsonl").open("a") as handle:
                handle.write(json.dumps({"global_step/max_steps": f"{path.name.split('-')[1]}/8"}) + "\n")
        return process

    return spawn


def run_scripted(out: Path, prep: Prepared, script: list[tuple[FakeProcess, list[Path]]]) -> tuple[object, list]:  # type: ignore[type-arg]
    spawned: list[list[str]] = []
    sup = Supervisor(prep, RunConfig(), {}, run_dir=out / "safe-sft" / "run", spawn=scripted(out, script, spawned),
                     sleep=lambda _: None)  # fmt: skip
    return sup.run(), spawned


def value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_a_checkpoint_that_fails_to_load_is_set_aside_and_the_one_before_it_used(tmp_path: Path) -> None:
    """Readable bytes, yet the resume dies loading it: the same settings again, from the checkpoint before."""
    v0 = tmp_path / "v0-x"
    result, spawned = run_scripted(
        tmp_path,
        prepared(tmp_path),
        [
            (FakeProcess(1, OOM_SUMMARY), [v0 / "checkpoint-3", v0 / "checkpoint-6"]),
            (FakeProcess(1, LOAD_FAILURE_SUMMARY), []),
            (FakeProcess(0, ""), []),
        ],
    )
    assert (result.outcome, len(spawned)) == ("succeeded", 3)  # type: ignore[attr-defined]
    _, second, third = result.attempts  # type: ignore[attr-defined]
    assert value(spawned[1], "--resume_from_checkpoint") == str(v0 / "checkpoint-6")
    assert second.failure.kind is FailureKind.USER_ERROR
    assert second.set_aside["path"] == str(v0 / "checkpoint-6")
    assert "JSONDecodeError: Expecting value" in second.set_aside["why"]  # the error the load ended in
    assert value(spawned[2], "--resume_from_checkpoint") == str(v0 / "checkpoint-3")
    assert value(spawned[2], "--per_device_train_batch_size") == value(spawned[1], "--per_device_train_batch_size")
    assert third.change == "no change" and "checkpoint-6 failed to load" in third.change_reason
    from launcher.run.report import summary

    named = f"  attempt 2 set aside {v0 / 'checkpoint-6'} (left where it is): attempt 2 failed loading it: "
    assert named in summary(result, tmp_path / "report.json")  # type: ignore[arg-type]
    assert (v0 / "checkpoint-6" / "trainer_state.json").is_file()  # set aside, never deleted or renamed


def _earlier_run(out: Path, *steps: int) -> list[Path]:
    """An earlier run's complete checkpoints in out/v0-earlier, there before this run starts."""
    return [make(out / "v0-earlier" / f"checkpoint-{step}") for step in steps]


def test_a_later_attempt_never_resumes_from_another_runs_checkpoint_beside_the_users_own(tmp_path: Path) -> None:
    """--resume_from_checkpoint X/checkpoint-2, and another run's checkpoint-4 beside it: attempt 1 saved
    nothing, so attempt 2 goes on from X/checkpoint-2 again (it took checkpoint-4, skipping steps 3-4)."""
    given, _ = _earlier_run(tmp_path / "X", 2, 4)
    out = tmp_path / "out"
    result, spawned = run_scripted(
        out,
        prepared(out, "--resume_from_checkpoint", str(given)),
        [(FakeProcess(1, OOM_SUMMARY), []), (FakeProcess(0, ""), [])],
    )
    assert result.outcome == "succeeded"  # type: ignore[attr-defined]
    assert value(spawned[1], "--resume_from_checkpoint") == str(given)


def test_a_relative_resume_path_names_the_same_checkpoint_for_later_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--resume_from_checkpoint out/v0-earlier/checkpoint-2` typed relative: attempt 2 took the earlier run's
    checkpoint-6 beside it, since the path as typed never matched the snapshot of the output dir."""
    out = tmp_path / "out"
    _earlier_run(out, 2, 6)
    monkeypatch.chdir(tmp_path)
    typed = "out/v0-earlier/../v0-earlier/checkpoint-2"
    result, spawned = run_scripted(
        out,
        prepared(out, "--resume_from_checkpoint", typed),
        [(FakeProcess(1, OOM_SUMMARY), []), (FakeProcess(0, ""), [])],
    )
    assert result.outcome == "succeeded"  # type: ignore[attr-defined]
    assert Path(value(spawned[1], "--resume_from_checkpoint") or "").resolve() == (out / "v0-earlier" / "checkpoint-2")


def test_resume_latest_goes_back_to_the_checkpoint_before_one_that_failed_to_load(tmp_path: Path) -> None:
    """--resume-latest took an earlier run's checkpoint-6, which failed to load: attempt 2 goes on from that
    run's checkpoint-4, as the change says, not from step 0."""
    four, six = _earlier_run(tmp_path, 4, 6)
    spawned: list[list[str]] = []
    script = [(FakeProcess(1, LOAD_FAILURE_SUMMARY), []), (FakeProcess(0, ""), [])]
    sup = Supervisor(prepared(tmp_path), RunConfig(resume_latest=True), {}, run_dir=tmp_path / "safe-sft" / "run",
                     spawn=scripted(tmp_path, script, spawned), sleep=lambda _: None)  # fmt: skip
    result = sup.run()
    assert value(spawned[0], "--resume_from_checkpoint") == str(six)
    assert value(spawned[1], "--resume_from_checkpoint") == str(four)
    second = result.attempts[1]
    assert second.resumed_from is not None and second.resumed_from.step == 4
    assert (
        second.change_reason == f"{six} failed to load; resume from {four} (step 4), the newest complete one before it"
    )


def test_after_a_set_aside_another_experiments_checkpoint_is_never_the_one_before_it(tmp_path: Path) -> None:
    """Experiment B (learning rate 1e-3) resumed with --resume-latest from its checkpoint-2, which failed to
    load; attempt 2 took experiment A's checkpoint-6 (1e-5) as "the newest complete one before it"."""
    (a,) = _earlier_run(tmp_path, 6)
    (a.parent / "args.json").write_text(json.dumps({"learning_rate": 1e-05}))
    b = make(tmp_path / "v1-b" / "checkpoint-2")
    (b.parent / "args.json").write_text(json.dumps({"learning_rate": 1e-03}))
    spawned: list[list[str]] = []
    script = [(FakeProcess(1, LOAD_FAILURE_SUMMARY), []), (FakeProcess(0, ""), [])]
    sup = Supervisor(prepared(tmp_path, "--learning_rate", "1e-3"), RunConfig(resume_latest=True), {},
                     run_dir=tmp_path / "safe-sft" / "run", spawn=scripted(tmp_path, script, spawned),
                     sleep=lambda _: None)  # fmt: skip
    result = sup.run()
    assert value(spawned[0], "--resume_from_checkpoint") == str(b)
    assert value(spawned[1], "--resume_from_checkpoint") is None and result.attempts[1].resumed_from is None
    assert result.attempts[1].change_reason == f"{b} failed to load; no complete checkpoint is before it: from step 0"


def test_the_users_own_checkpoint_that_fails_to_load_ends_the_run(tmp_path: Path) -> None:
    """Nothing of this run's to go on from: no other run's checkpoint, and no step 0, in place of the user's;
    attempt 2 had run from step 0 with the user's argument still in its command, loading it again."""
    _, six = _earlier_run(tmp_path, 4, 6)
    result, spawned = run_scripted(
        tmp_path,
        prepared(tmp_path, "--resume_from_checkpoint", str(six)),
        [(FakeProcess(1, LOAD_FAILURE_SUMMARY), []), (FakeProcess(0, ""), [])],
    )
    assert (result.outcome, len(spawned)) == ("failed", 1)  # type: ignore[attr-defined]
    assert result.give_up_reason.startswith(  # type: ignore[attr-defined]
        f"the checkpoint you gave (--resume_from_checkpoint {six}) failed to load, and this run saved none"
    )
    assert (six / "trainer_state.json").is_file()


def test_the_users_resume_only_model_holds_for_their_checkpoint_on_every_attempt(tmp_path: Path) -> None:
    """--resume_only_model true with the user's checkpoint: attempt 2 (an OOM, nothing saved) loads its
    weights only again, as the user asked; it had loaded the optimizer state the user left out. This run's
    own checkpoint, saved in attempt 2, is resumed whole in attempt 3."""
    (own,) = _earlier_run(tmp_path, 4)
    v1 = tmp_path / "v1-x"
    result, spawned = run_scripted(
        tmp_path,
        prepared(tmp_path, "--resume_from_checkpoint", str(own), "--resume_only_model", "true"),
        [(FakeProcess(1, OOM_SUMMARY), []), (FakeProcess(1, OOM_SUMMARY), [v1 / "checkpoint-6"]),
         (FakeProcess(0, ""), [])],
    )  # fmt: skip
    assert (result.outcome, len(spawned)) == ("succeeded", 3)  # type: ignore[attr-defined]
    assert [value(argv, "--resume_from_checkpoint") for argv in spawned] == [
        str(own),
        str(own),
        str(v1 / "checkpoint-6"),
    ]
    assert [value(argv, "--resume_only_model") for argv in spawned] == ["true", "true", None]
    second = result.attempts[1]  # type: ignore[attr-defined]
    assert second.resumed_from.why_weights_only == "--resume_only_model true was given"


def test_a_fresh_start_from_the_users_weights_goes_on_from_this_runs_own_checkpoint(tmp_path: Path) -> None:
    """--resume_from_checkpoint X --resume_only_model true --ignore_data_skip true: swift trains from step 0 on
    X's weights. After an OOM, the retry goes on from this run's checkpoint-3 (X, named checkpoint-8, had been
    ranked above it: resumed whole at max_steps, nothing trained), continuing its data."""
    (theirs,) = _earlier_run(tmp_path, 8)
    v1 = tmp_path / "v1-x"
    result, spawned = run_scripted(
        tmp_path,
        prepared(tmp_path, "--resume_from_checkpoint", str(theirs), "--resume_only_model", "true",
                 "--ignore_data_skip", "true"),
        [(FakeProcess(1, OOM_SUMMARY), [v1 / "checkpoint-3"]), (FakeProcess(0, ""), [])],
    )  # fmt: skip
    assert (result.outcome, len(spawned)) == ("succeeded", 2)  # type: ignore[attr-defined]
    first = result.attempts[0]  # type: ignore[attr-defined]
    assert (first.resumed_from.step, first.resumed_from.start) == (0, True)
    assert value(spawned[1], "--resume_from_checkpoint") == str(v1 / "checkpoint-3")
    assert (value(spawned[1], "--resume_only_model"), value(spawned[1], "--ignore_data_skip")) == (None, "false")


def test_a_zero_stage_change_says_what_it_costs_load_best_model_at_end(tmp_path: Path) -> None:
    """transformers loads the best checkpoint at the end under the final ZeRO stage: an earlier attempt's,
    saved under another, does not load (swift warns and keeps the last model)."""
    one = ("--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1")

    def script(out: Path) -> list[tuple[FakeProcess, list[Path]]]:
        saving = [(FakeProcess(1, OOM_SUMMARY), [out / f"v{n}-x" / f"checkpoint-{3 + n}"]) for n in range(4)]
        return [*saving, (FakeProcess(0, ""), [])]

    result, _ = run_scripted(tmp_path, prepared(tmp_path, *one, "--load_best_model_at_end", "true"), script(tmp_path))
    staged = [a for a in result.attempts if a.change and "deepspeed" in a.change]  # type: ignore[attr-defined]
    assert staged and "with --load_best_model_at_end, a best checkpoint saved so far" in staged[0].change_reason
    (tmp_path / "plain").mkdir()
    plain, _ = run_scripted(tmp_path / "plain", prepared(tmp_path / "plain", *one), script(tmp_path / "plain"))
    assert not any("load_best_model_at_end" in (a.change_reason or "") for a in plain.attempts)  # type: ignore[attr-defined]


class OneNodeChannel:
    """The nodes' channel as node 0 of a one-node "multi-node" run sees it: node 0's decision path, with
    its own report as the only one."""

    run_id, node, nnodes = "test", 0, 1

    def __init__(self) -> None:
        self.silent: set[int] = set()
        self.signals = None
        self.report_timeouts: list[float | None] = []

    def request_stop(self, attempt: int) -> None: ...
    def stop_requested(self, attempt: int) -> bool:
        return False

    def acknowledge(self, attempt: int) -> None: ...
    def exchange(self, attempt: int, report: object, decide, report_timeout=None):  # type: ignore[no-untyped-def]
        self.report_timeouts.append(report_timeout)
        return decide([report])


def test_node_0s_decision_also_says_what_a_zero_stage_change_costs_load_best_model_at_end(tmp_path: Path) -> None:
    """The note was on one-node ladders only: node 0's decision of a ZeRO rung left it out."""
    one = ("--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1")
    script = [(FakeProcess(1, OOM_SUMMARY), [tmp_path / f"v{n}-x" / f"checkpoint-{3 + n}"]) for n in range(4)]
    spawned: list[list[str]] = []
    sup = Supervisor(
        prepared(tmp_path, *one, "--load_best_model_at_end", "true"), RunConfig(), {},
        run_dir=tmp_path / "safe-sft" / "run", spawn=scripted(tmp_path, [*script, (FakeProcess(0, ""), [])], spawned),
        sleep=lambda _: None, coordinator=OneNodeChannel(),  # type: ignore[arg-type]
    )  # fmt: skip
    result = sup.run()
    assert result.attempts[0].decision["action"] == "retry"  # node 0 decided each step
    staged = [a for a in result.attempts if a.change and "deepspeed" in a.change]
    assert staged and "with --load_best_model_at_end, a best checkpoint saved so far" in staged[0].change_reason


def test_a_user_error_without_a_load_failure_still_gives_up(tmp_path: Path) -> None:
    v0 = tmp_path / "v0-x"
    tail = "[rank0]: ValueError: remaining_argv: ['--bogus']"
    result, spawned = run_scripted(
        tmp_path,
        prepared(tmp_path),
        [(FakeProcess(1, OOM_SUMMARY), [v0 / "checkpoint-3"]), (FakeProcess(1, tail), []), (FakeProcess(0, ""), [])],
    )
    assert (result.outcome, len(spawned)) == ("failed", 2)  # type: ignore[attr-defined]
    # the ladder's own change came before the error: the give-up says so, not only "fix this line" (a ZeRO-3
    # rung's DeepSpeed assertion had been read as the user's mistake: hostile45report)
    change = result.attempts[1].change  # type: ignore[attr-defined]
    assert change and f"attempt 2 ran with safe-sft's change ({change})" in result.give_up_reason  # type: ignore[attr-defined]
    first = run_scripted(tmp_path / "first", prepared(tmp_path / "first"), [(FakeProcess(1, tail), [])])[0]
    assert "safe-sft's change" not in first.give_up_reason  # type: ignore[attr-defined]


def test_add_version_false_resumes_in_place_like_plain_swift(tmp_path: Path) -> None:
    result, spawned = run_scripted(
        tmp_path,
        prepared(tmp_path, "--add_version", "false"),
        [(FakeProcess(1, OOM_SUMMARY), [tmp_path / "checkpoint-3"]), (FakeProcess(0, ""), [tmp_path / "checkpoint-6"])],
    )
    assert result.outcome == "succeeded"  # type: ignore[attr-defined]
    assert value(spawned[1], "--add_version") == "false"  # the user's layout: output_dir itself
    assert value(spawned[1], "--resume_from_checkpoint") == str(tmp_path / "checkpoint-3")
    first, second = result.attempts  # type: ignore[attr-defined]
    assert first.run_dir == second.run_dir == str(tmp_path)
    assert (first.last_step, second.last_step) == (3, 6)  # each attempt's own lines of the shared logging.jsonl
    assert second.checkpoints_written == [str(tmp_path / "checkpoint-6")]


def test_a_file_named_like_a_checkpoint_gets_a_versioned_dir_too(tmp_path: Path) -> None:
    """`echo notes > out/checkpoint-2`: the trainer's save at step 2 stopped on FileExistsError, twice."""
    (tmp_path / "checkpoint-2").write_text("my notes")
    result, spawned = run_scripted(tmp_path, prepared(tmp_path, "--add_version", "false"), [(FakeProcess(0, ""), [])])
    assert result.attempts[0].versioned_because == f"it would save over {tmp_path / 'checkpoint-2'}"  # type: ignore[attr-defined]
    assert value(spawned[0], "--add_version") == "true"
    assert (tmp_path / "checkpoint-2").read_text() == "my notes"


@pytest.mark.parametrize("off", [("--add_version", "false"), ("--no_add_version",)], ids=["false", "no-twin"])
def test_add_version_false_never_saves_over_a_later_checkpoint_dir(tmp_path: Path, off: tuple[str, ...]) -> None:
    """A half-written checkpoint-6 (a killed run's) in output_dir: attempt 1, from step 0, and attempt 2,
    resuming from 3, would each save over it, so each gets a versioned dir (attempt 1 wrote over it before:
    `--resume-latest` that finds only incomplete checkpoints starts from step 0 too). swift's
    `--no_add_version` is the same setting."""

    def half_written(path: Path) -> None:
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")

    half_written(tmp_path / "checkpoint-6")
    before = sorted(p.name for p in (tmp_path / "checkpoint-6").iterdir())
    result, spawned = run_scripted(
        tmp_path,
        prepared(tmp_path, *off),
        [(FakeProcess(1, OOM_SUMMARY), [tmp_path / "checkpoint-3"]), (FakeProcess(0, ""), [])],
    )
    assert result.outcome == "succeeded"  # type: ignore[attr-defined]
    for attempt, argv in zip(result.attempts, spawned, strict=True):  # type: ignore[attr-defined]
        assert value(argv, "--add_version") == "true" and "--no_add_version" not in argv
        assert attempt.versioned_because == f"it would save over {tmp_path / 'checkpoint-6'}"
    assert sorted(p.name for p in (tmp_path / "checkpoint-6").iterdir()) == before


def test_a_users_script_that_may_ignore_its_resume_point_never_retries_into_its_checkpoints(tmp_path: Path) -> None:
    """`safe-sft torchrun`: a script with a plain trainer.train() trained attempt 2 from step 1 in the same
    dir and saved checkpoint-3 over attempt 1's. Its resume point guards nothing: attempt 2 gets a fresh dir."""
    from dataclasses import replace

    from launcher.backends.hf_trainer import HF_TRAINER

    result, spawned = run_scripted(
        tmp_path,
        replace(prepared(tmp_path, "--add_version", "false"), backend=HF_TRAINER),
        [(FakeProcess(1, OOM_SUMMARY), [tmp_path / "checkpoint-3"]), (FakeProcess(0, ""), [])],
    )
    assert result.outcome == "succeeded"  # type: ignore[attr-defined]
    first, second = result.attempts  # type: ignore[attr-defined]
    assert value(spawned[0], "--output_dir") == str(tmp_path) and first.versioned_because is None
    assert second.versioned_because == f"it would save over {tmp_path / 'checkpoint-3'}"
    assert spawned[1] == spawned[0]  # the script's command line as typed: its TrainingArguments get the rest
    chosen = script_chosen(second)
    assert chosen["output_dir"] != str(tmp_path)
    assert chosen["resume_from_checkpoint"] == str(tmp_path / "checkpoint-3")
    assert (chosen["per_device_train_batch_size"], chosen["gradient_accumulation_steps"]) == (2, 4)


def script_chosen(record: AttemptRecord) -> dict[str, object]:
    """What safe-sft set in a script's TrainingArguments for this attempt (launcher/plan/script_args.py)."""
    from launcher.plan.script_args import SCRIPT_ARGS_ENV

    return json.loads(record.env_set[SCRIPT_ARGS_ENV])  # type: ignore[no-any-return]


def test_the_dir_guarded_against_overwriting_is_where_the_trainer_said_it_writes(tmp_path: Path) -> None:
    """A script whose own argument named another output dir than safe-sft read: its checkpoints are guarded
    where the script reported writing them, and attempt 2 gets a fresh dir there."""
    from dataclasses import replace

    from launcher.backends.hf_trainer import HF_TRAINER

    real = tmp_path / "real"
    result, spawned = run_scripted(
        tmp_path,
        replace(prepared(tmp_path, "--add_version", "false"), backend=HF_TRAINER),
        [(FakeProcess(1, OOM_SUMMARY), [real / "checkpoint-3"]), (FakeProcess(0, ""), [])],
    )
    second = result.attempts[1]  # type: ignore[attr-defined]
    assert second.versioned_because == f"it would save over {real / 'checkpoint-3'}"
    assert spawned[1] == spawned[0]
    assert script_chosen(second)["output_dir"] == str(real / "v2-run")


def test_a_script_that_trained_from_step_0_when_told_to_resume_is_reported_so(tmp_path: Path) -> None:
    """Attempt 2 was told to resume at step 3 and saved checkpoint-3 in its fresh dir: it started over. The
    report says so, and attempt 1's steps count as lost back to step 0, not to the resume point."""
    from dataclasses import replace

    from launcher.backends.hf_trainer import HF_TRAINER
    from launcher.run.report import attempt_json

    fresh = tmp_path / "v2-run"
    result, _ = run_scripted(
        tmp_path,
        replace(prepared(tmp_path, "--add_version", "false"), backend=HF_TRAINER),
        [(FakeProcess(1, OOM_SUMMARY), [tmp_path / "checkpoint-3"]), (FakeProcess(0, ""), [fresh / "checkpoint-3"])],
    )
    first, second = result.attempts  # type: ignore[attr-defined]
    assert second.resumed_from.step == 3 and first.started_over is None
    assert second.started_over == (
        f"it saved {fresh / 'checkpoint-3'} (step 3), not after step 3: it trained from step 0"
    )
    assert second.went_on_from() == 0
    lost = lost_work(result.attempts)  # type: ignore[attr-defined]
    assert (lost[0].steps, lost[0].kept_step) == (3, 0)
    assert attempt_json(second, None)["resumed_from"]["started_over"] == second.started_over


def test_add_version_false_writes_where_swift_would_when_no_checkpoint_is_in_the_way(tmp_path: Path) -> None:
    result, spawned = run_scripted(tmp_path, prepared(tmp_path, "--add_version", "false"), [(FakeProcess(0, ""), [])])
    assert result.outcome == "succeeded"  # type: ignore[attr-defined]
    assert value(spawned[0], "--add_version") == "false"
    assert result.attempts[0].versioned_because is None  # type: ignore[attr-defined]


def test_the_report_callback_sees_each_attempt_start_and_end(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    seen: list[list[tuple[int, int | None]]] = []
    sup = supervisor(tmp_path, [FakeProcess(1, OOM_SUMMARY), FakeProcess(0, "")], spawned)
    sup.on_attempt = lambda attempts: seen.append([(a.number, a.exit_code) for a in attempts])
    assert sup.run().outcome == "succeeded"
    assert seen == [[(1, None)], [(1, 1)], [(1, 1), (2, None)], [(1, 1), (2, 0)]]


ABORT_AT_EXIT = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_11:14:48
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 30274)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 30274
============================================================
"""


def abort_after(marked_ranks: tuple[int, ...], tmp_path: Path):  # type: ignore[no-untyped-def]
    """A run whose rank 1 aborts after the ranks in `marked_ranks` marked their training as returned."""
    from launcher.run.report import summary

    spawned: list[list[str]] = []
    sup = supervisor(tmp_path, [FakeProcess(-6, ABORT_AT_EXIT)], spawned)
    spawn = sup.runner.spawn

    def marking_spawn(argv: list[str], env: dict[str, str], log: Path) -> FakeProcess:
        for rank in marked_ranks:  # what launcher/worker.py training_returned writes
            (Path(env["SAFE_SFT_NOTICE_DIR"]) / f"finished-rank-{rank}").touch()
        return spawn(argv, env, log)  # type: ignore[no-any-return]

    sup.runner.spawn = marking_spawn
    result = sup.run()
    return result, summary(result, tmp_path / "report.json")


def test_a_rank_that_dies_at_exit_after_every_ranks_training_returned_is_a_finished_run(tmp_path: Path) -> None:
    result, text = abort_after((0, 1), tmp_path)
    assert (result.outcome, result.exit_code, len(result.attempts)) == ("succeeded", 0, 1)
    attempt = result.attempts[0]
    assert attempt.failure is None and attempt.exit_code == -6
    assert attempt.failed_at_exit is not None and attempt.failed_at_exit.kind is FailureKind.CRASH
    assert "attempt 1: training returned on every rank, then crash" in text and "counts as finished" in text


def test_a_rank_that_dies_before_every_rank_returned_is_still_a_failure(tmp_path: Path) -> None:
    result, _ = abort_after((0,), tmp_path)  # rank 1 never got there: its training may be what died
    assert (result.outcome, result.exit_code) == ("failed", 1)
    attempt = result.attempts[0]
    assert attempt.failure is not None and attempt.failure.kind is FailureKind.CRASH
    assert attempt.failed_at_exit is None


def lf_supervisor(out: Path, spawned: list[list[str]], *extra: str) -> Supervisor:
    """A trainer that resumes from the newest checkpoint in its output dir by itself (LLaMA-Factory)."""
    from dataclasses import replace

    from launcher.backends.llamafactory import LLAMAFACTORY

    def spawn(argv: list[str], env: dict[str, str], log: Path) -> FakeProcess:
        spawned.append(argv)
        return FakeProcess(0, "")

    prep = replace(prepared(out, "--add_version", "false", *extra), backend=LLAMAFACTORY)
    return Supervisor(prep, RunConfig(), {}, run_dir=out / "safe-sft" / "run", spawn=spawn, sleep=lambda _: None)


def test_a_trainer_that_resumes_by_itself_is_given_the_newest_complete_checkpoint_not_the_newest(
    tmp_path: Path,
) -> None:
    make(tmp_path / "checkpoint-3")  # an earlier run's, complete
    make(tmp_path / "checkpoint-6", state=False)  # an earlier run's, half-written: LLaMA-Factory would take it
    spawned: list[list[str]] = []
    result = lf_supervisor(tmp_path, spawned).run()
    first = result.attempts[0]
    assert first.resumed_from is not None and first.resumed_from.checkpoint == str(tmp_path / "checkpoint-3")
    assert str(tmp_path / "checkpoint-6") in first.skipped_incomplete
    assert first.versioned_because == f"it would save over {tmp_path / 'checkpoint-6'}"  # and never over it
    assert (tmp_path / "checkpoint-6").is_dir()


def test_only_incomplete_names_the_newest_when_no_complete_checkpoint_is_there(tmp_path: Path) -> None:
    from launcher.run.resume import only_incomplete

    make(tmp_path / "checkpoint-9", state=False)
    make(tmp_path / "checkpoint-10", state=False)  # newest by step, not by name
    assert only_incomplete(tmp_path) == (tmp_path / "checkpoint-10", "trainer_state.json is missing")
    make(tmp_path / "checkpoint-3")
    assert only_incomplete(tmp_path) is None  # a complete one: the supervisor resumes from it


def test_overwrite_output_dir_starts_afresh_as_the_trainer_does(tmp_path: Path) -> None:
    make(tmp_path / "checkpoint-6", state=False)
    spawned: list[list[str]] = []
    result = lf_supervisor(tmp_path, spawned, "--overwrite_output_dir", "true").run()
    assert result.attempts[0].resumed_from is None and len(spawned) == 1


DOWNLOAD_TAIL = (
    "[rank0]: requests.exceptions.ConnectionError: HTTPSConnectionPool(host='www.modelscope.cn', port=443): "
    "Max retries exceeded with url: /api/v1/models/Qwen/Qwen2.5-7B/revisions (Caused by NewConnectionError("
    "'<urllib3.connection.HTTPSConnection object>: Failed to establish a new connection: [Errno -3] Temporary "
    "failure in name resolution'))"
)


class FakeTime:
    """A clock that only a sleep moves: the waits a test sees are the waits the supervisor asked for."""

    def __init__(self) -> None:
        self.now = 0.0
        self.on_sleep: list[object] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for hook in self.on_sleep:
            hook()  # type: ignore[operator]


def timed_supervisor(  # type: ignore[no-untyped-def]
    out: Path, script: list[FakeProcess], spawned: list[list[str]], fake: FakeTime, **config
) -> Supervisor:
    sup = supervisor(out, script, spawned, **config)
    sup.clock = sup.runner.clock = fake.clock
    sup.sleep = sup.runner.sleep = fake.sleep
    return sup


def test_a_failed_download_is_retried_with_the_same_settings_after_growing_waits(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    fake = FakeTime()
    script = [FakeProcess(1, DOWNLOAD_TAIL), FakeProcess(1, DOWNLOAD_TAIL), FakeProcess(0, "")]
    starts: list[float] = []
    sup = timed_supervisor(tmp_path, script, spawned, fake)
    sup.on_attempt = lambda attempts: starts.append(fake.now) if attempts[-1].ended is None else None
    result = sup.run()
    assert (result.outcome, len(spawned)) == ("succeeded", 3)
    assert [a.failure.kind for a in result.attempts[:2] if a.failure] == [FailureKind.DOWNLOAD] * 2
    assert [round(b - a) for a, b in itertools.pairwise(starts)] == [30, 120]
    batch = [argv[argv.index("--per_device_train_batch_size") + 1] for argv in spawned]
    assert batch == ["4", "4", "4"]  # nothing in the settings is to blame


def test_no_wait_follows_the_last_attempt_max_attempts_allows(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    fake = FakeTime()
    script = [FakeProcess(1, DOWNLOAD_TAIL), FakeProcess(1, DOWNLOAD_TAIL)]
    result = timed_supervisor(tmp_path, script, spawned, fake, max_attempts=2).run()
    assert (result.outcome, len(spawned), result.give_up_reason) == ("failed", 2, "--max-attempts 2 reached")
    assert fake.now == 30  # the wait before attempt 2, and none after it


def test_downloads_that_keep_failing_end_with_what_to_do(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    script = [FakeProcess(1, DOWNLOAD_TAIL) for _ in range(4)]
    result = timed_supervisor(tmp_path, script, spawned, FakeTime()).run()
    assert (result.outcome, result.exit_code, len(spawned)) == ("failed", 1, 3)
    assert "a download failed in 3 attempts" in (result.give_up_reason or "")
    assert "HF_ENDPOINT" in (result.give_up_reason or "")


def test_a_signal_during_the_wait_before_a_retry_ends_the_run_without_another_attempt(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    fake = FakeTime()
    sup = timed_supervisor(tmp_path, [FakeProcess(1, DOWNLOAD_TAIL), FakeProcess(0, "")], spawned, fake)

    def ctrl_c_after_five_seconds() -> None:
        if fake.now >= 5:
            sup.received = signal.SIGINT

    fake.on_sleep.append(ctrl_c_after_five_seconds)
    result = sup.run()
    assert (result.outcome, result.exit_code, len(spawned)) == ("interrupted", 130, 1)
    assert fake.now < 10
    # the report says why (it was null): the line the terminal showed
    assert (result.give_up_reason or "").startswith("SIGINT received while waiting for attempt 2")


@pytest.mark.parametrize(("incomplete", "found"), [(False, "no checkpoint"), (True, "no complete checkpoint")])
def test_resume_latest_that_finds_nothing_says_it_trains_from_step_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], incomplete: bool, found: str
) -> None:
    """A mistyped output dir, or only half-written checkpoints: the run started from step 0 without a word."""
    if incomplete:
        (tmp_path / "v0-earlier" / "checkpoint-6").mkdir(parents=True)
    spawned: list[list[str]] = []
    assert supervisor(tmp_path, [FakeProcess(0, "")], spawned, resume_latest=True).run().outcome == "succeeded"
    assert "--resume_from_checkpoint" not in spawned[0]
    assert f"safe-sft:   --resume-latest: {found} under {tmp_path}: training from step 0" in capsys.readouterr().err


@pytest.mark.parametrize("half_written_8", [False, True], ids=["in-place", "a-half-written-checkpoint-above"])
def test_the_users_own_resume_is_recorded_and_is_the_floor_of_what_it_would_save_over(
    tmp_path: Path, half_written_8: bool
) -> None:
    """`--add_version false --resume_from_checkpoint out/checkpoint-6`: resuming in place writes only steps
    after 6, so checkpoint-3 and checkpoint-6 are not in its way; a half-written checkpoint-8 is. The
    resume was not recorded at all (report.json: resumed_from null)."""
    make(tmp_path / "checkpoint-3")
    make(tmp_path / "checkpoint-6")
    if half_written_8:
        (tmp_path / "checkpoint-8").mkdir()
    own = str(tmp_path / "checkpoint-6")
    result, spawned = run_scripted(
        tmp_path,
        prepared(tmp_path, "--add_version", "false", "--resume_from_checkpoint", own),
        [(FakeProcess(0, ""), [])],
    )
    assert result.outcome == "succeeded"  # type: ignore[attr-defined]
    first = result.attempts[0]  # type: ignore[attr-defined]
    assert (first.resumed_from.checkpoint, first.resumed_from.step, first.resumed_from.weights_only) == (own, 6, False)
    assert spawned[0].count("--resume_from_checkpoint") == 1 and value(spawned[0], "--resume_from_checkpoint") == own
    assert "--resume_only_model" not in spawned[0]  # nothing added to the user's own resume
    if half_written_8:
        assert first.versioned_because == f"it would save over {tmp_path / 'checkpoint-8'}"
    else:
        assert first.versioned_because is None and value(spawned[0], "--add_version") == "false"


def test_a_users_resume_outside_checkpoint_n_takes_its_step_from_its_state(tmp_path: Path) -> None:
    from launcher.plan.settings import Resume
    from launcher.run.resume import given_resume

    saved = tmp_path / "best-model"
    make(saved)
    (saved / "trainer_state.json").write_text(json.dumps({"global_step": 42}))
    assert given_resume(saved, True) == Resume(str(saved), 42, True, "--resume_only_model true was given", start=True)
    assert given_resume(tmp_path / "checkpoint-9", False).step == 9
    # --resume_only_model with --ignore_data_skip: swift starts a new training from its weights, at step 0
    assert given_resume(tmp_path / "checkpoint-9", True, fresh=True).step == 0


DISK_FULL_TAIL = "[rank0]: OSError: [Errno 28] No space left on device: '/out/checkpoint-2/model.safetensors'"


@pytest.mark.parametrize("saved", [False, True])
def test_a_full_disk_says_where_a_rerun_goes_on_from(tmp_path: Path, saved: bool) -> None:
    """The give-up line told the user to rerun with --resume-latest from the newest complete checkpoint,
    where none had been saved: such a rerun starts from step 0, and now it says so."""
    written = [tmp_path / "v0-x" / "checkpoint-2"] if saved else []
    result, spawned = run_scripted(tmp_path, prepared(tmp_path), [(FakeProcess(1, DISK_FULL_TAIL), written)])
    assert (result.outcome, len(spawned)) == ("failed", 1)  # type: ignore[attr-defined]
    reason = result.give_up_reason  # type: ignore[attr-defined]
    assert reason.startswith("the disk is full") and f"({tmp_path} has " in reason
    assert reason.endswith("a rerun starts from step 0") is not saved
    from launcher.run.report import summary

    # said once in the terminal's summary: its give-up line says it, and no line of its own repeats it
    text = summary(result, tmp_path / "report.json")  # type: ignore[arg-type]
    assert text.count("no complete checkpoint was saved") == (0 if saved else 1), text


def test_free_words_name_the_files_where_a_filesystem_runs_out_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tmpfs with nr_inodes=45 full of files: `the disk is full ... (47.0 MiB free)` contradicted itself."""
    import os
    from types import SimpleNamespace

    from launcher.probe import disk

    real = os.statvfs(tmp_path)

    def with_files(favail: int) -> SimpleNamespace:  # the space as it is (shutil.disk_usage reads it too)
        space = {name: getattr(real, name) for name in ("f_frsize", "f_blocks", "f_bfree", "f_bavail")}
        return SimpleNamespace(**space, f_files=45, f_favail=favail)

    monkeypatch.setattr(disk.os, "statvfs", lambda _path: with_files(0))
    assert disk.free_words(tmp_path).endswith("free, but no free files (inodes)")
    monkeypatch.setattr(disk.os, "statvfs", lambda _path: with_files(12))
    assert disk.free_words(tmp_path).endswith("free, 12 free files (inodes)")
    monkeypatch.setattr(disk.os, "statvfs", lambda _path: with_files(10_000))
    assert disk.free_words(tmp_path).endswith(" free") and "inodes" not in disk.free_words(tmp_path)


def test_a_versioned_run_names_the_earlier_model_left_at_the_output_dirs_root(tmp_path: Path) -> None:
    """LLaMA-Factory saves its final model at the output dir's root; a run that had to go to a versioned dir
    (it would have saved over a checkpoint) leaves an earlier run's model there, which from_pretrained(out) or
    an export would load without a word."""
    from launcher.run.report import summary

    make(tmp_path / "checkpoint-3")
    make(tmp_path / "checkpoint-6", state=False)  # half-written: the run resumes from 3 and would save over 6
    (tmp_path / "model.safetensors").write_bytes(b"an earlier run's weights")
    spawned: list[list[str]] = []
    result = lf_supervisor(tmp_path, spawned).run()
    attempt = result.attempts[0]
    assert attempt.versioned_because is not None
    attempt.run_dir = value(spawned[0], "--output_dir")  # what the worker reports of the trainer's arguments
    text = summary(result, tmp_path / "report.json")
    assert f"note: {tmp_path / 'model.safetensors'} is an earlier run's model, not this run's" in text
    (tmp_path / "model.safetensors").unlink()
    assert "earlier run's model" not in summary(result, tmp_path / "report.json")


@pytest.mark.parametrize(
    ("extra", "versioned"),
    [
        (("--max_steps", "3", "--save_steps", "3"), False),  # saves checkpoint-3 alone: 2 is never touched
        (("--max_steps", "4", "--save_steps", "2"), True),  # saves 2 and 4: over the earlier run's 2
        (("--max_steps", "5", "--save_steps", "3"), False),  # 3, and 5 at the end
        (("--save_strategy", "no"), False),  # saves nothing
        (("--max_steps", "3", "--save_steps", "3", "--save_total_limit", "1"), True),  # rotation would delete 2
        (("--save_steps", "3"), True),  # epochs: the steps it saves are the data's to say
        (("--max_steps", "3", "--save_strategy", "epoch"), True),
    ],
)
def test_an_add_version_false_rerun_is_versioned_only_where_it_would_save_over_a_checkpoint(
    tmp_path: Path, extra: tuple[str, ...], versioned: bool
) -> None:
    """A rerun into a dir holding an earlier run's checkpoint-2 had always gone to a versioned dir, "it would
    save over checkpoint-2", where it saved only checkpoint-3 (or nothing): plain swift writes beside it."""
    make(tmp_path / "checkpoint-2")
    spawned: list[list[str]] = []
    result = supervisor(
        tmp_path, [FakeProcess(0, "")], spawned, prep=prepared(tmp_path, "--add_version", "false", *extra)
    ).run()
    first = result.attempts[0]
    assert (first.versioned_because is not None) is versioned
    assert value(spawned[0], "--add_version") == ("true" if versioned else "false")  # swift's own v<N>- dir
    assert (tmp_path / "checkpoint-2").is_dir()


def test_a_resume_under_another_global_batch_is_said_at_the_first_attempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--resume-latest from a checkpoint whose run trained 3 x 3 x 4 = 36 a step, on 2 processes of 4 x 2: no
    whole accumulation keeps 36, and the trainer's data skip is off: said, with its cost."""
    write_checkpoint(tmp_path, "v0-earlier", 6)
    saved = {"per_device_train_batch_size": 3, "gradient_accumulation_steps": 3, "global_world_size": 4}
    (tmp_path / "v0-earlier" / "args.json").write_text(json.dumps({"model": "m", **saved}))
    spawned: list[list[str]] = []
    assert supervisor(tmp_path, [FakeProcess(0, "")], spawned, resume_latest=True).run().outcome == "succeeded"
    err = capsys.readouterr().err
    assert "safe-sft:   note: the checkpoint's run trained with global batch 36 (" in err
    assert "this attempt trains with 16 (4 x 2 x 2), and no whole gradient_accumulation_steps keeps 36" in err
    assert "samples of this epoch train twice" in err


def test_a_resume_on_another_world_size_keeps_the_checkpoints_global_batch_on_every_attempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 4-process run's checkpoint resumed on 2 processes with the same argv (the accumulation 2) trained at
    half its global batch: the trainer skipped the steps' data at 16 a step where they had trained 32, and the
    resumed run trained samples twice (hostile46mn F1). The accumulation that keeps 32 is passed, and stays."""
    write_checkpoint(tmp_path, "v0-earlier", 6)
    saved = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "global_world_size": 4}
    (tmp_path / "v0-earlier" / "args.json").write_text(json.dumps({"model": "m", **saved}))
    spawned: list[list[str]] = []
    processes = [FakeProcess(1, "[rank0]: something went wrong"), FakeProcess(1, OOM_SUMMARY), FakeProcess(0, "")]
    result = supervisor(tmp_path, processes, spawned, resume_latest=True).run()
    assert result.outcome == "succeeded"
    err = capsys.readouterr().err
    assert "change: gradient_accumulation_steps 2 -> 4 (keep the checkpoint's global batch 32 on 2 process(es)" in err
    assert "note: the checkpoint's run trained with global batch" not in err
    assert [a.settings.global_batch for a in result.attempts] == [32, 32, 32]

    def batch(argv: list[str]) -> tuple[str, str]:
        flags = ("--per_device_train_batch_size", "--gradient_accumulation_steps")
        return argv[argv.index(flags[0]) + 1], argv[argv.index(flags[1]) + 1]

    # an unknown failure's retry with the same settings (it had fallen back to the argv's accumulation), then
    # the ladder's smaller micro-batch from the kept batch
    assert [batch(argv) for argv in spawned] == [("4", "4"), ("4", "4"), ("2", "8")]


def test_resume_latest_names_a_later_run_at_a_higher_step_whose_files_are_older(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a copy that did not keep times, --resume-latest goes by them (the rule it documents) and took v0's
    checkpoint-6 over v1's checkpoint-8 without a word (hostile45disk F4): it now names the later one."""
    import os

    write_checkpoint(tmp_path, "v0-20261129-083815", 6)
    write_checkpoint(tmp_path, "v1-20261129-084410", 8)
    later = tmp_path / "v1-20261129-084410" / "checkpoint-8"
    os.utime(later / "trainer_state.json", (1_000_000, 1_000_000))
    for run in ("v0-20261129-083815", "v1-20261129-084410"):
        (tmp_path / run / "args.json").write_text(json.dumps({"model": "m"}))
    spawned: list[list[str]] = []
    assert supervisor(tmp_path, [FakeProcess(0, "")], spawned, resume_latest=True).run().outcome == "succeeded"
    said = capsys.readouterr().err
    assert f"note: {later} is at a higher step, in a run swift numbered later" in said
    assert f"--resume_from_checkpoint {later} in place of --resume-latest" in said


def test_a_checkpoint_missing_a_ranks_random_state_is_said_when_resumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """rank 1's rng_state_1.pth lost in a copy: the trainer resumes it with a fresh random state and says so only
    at info level (hostile42sig F9); safe-sft names it, and resumes (skipping the checkpoint would lose steps)."""
    write_checkpoint(tmp_path, "v0-earlier", 6)
    checkpoint = tmp_path / "v0-earlier" / "checkpoint-6"
    (checkpoint / "rng_state_0.pth").write_bytes(b"x")
    saved = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "global_world_size": 2}
    (tmp_path / "v0-earlier" / "args.json").write_text(json.dumps({"model": "m", **saved}))
    spawned: list[list[str]] = []
    assert supervisor(tmp_path, [FakeProcess(0, "")], spawned, resume_latest=True).run().outcome == "succeeded"
    assert spawned[0][spawned[0].index("--resume_from_checkpoint") + 1] == str(checkpoint)
    said = capsys.readouterr().err
    assert "safe-sft:   note: the checkpoint has no rng_state_1.pth: rank(s) 1 go on with a fresh random state" in said
    # the data order is the sampler's, drawn from its own seed: a weights-only resume saw the same samples as
    # an unbroken run, and the note had said it differs (hostile45report F11)
    assert "the data order, drawn from the sampler's seed, does not" in said
    (checkpoint / "rng_state_1.pth").write_bytes(b"x")
    from launcher.run.checkpoints import missing_rng_states

    assert missing_rng_states(checkpoint) == []
    (checkpoint / "rng_state_0.pth").unlink()
    (checkpoint / "rng_state_2.pth").write_bytes(b"x")  # a gap below the highest, whatever args.json says
    (tmp_path / "v0-earlier" / "args.json").write_text("{}")
    assert missing_rng_states(checkpoint) == [0]


def test_node_0_interrupted_waits_for_the_other_reports_only_as_long_as_a_peer_takes_to_stop(tmp_path: Path) -> None:
    """Interrupted, node 0 stops every node whatever they report: it had waited --node-timeout (300 s) for the
    report of a node that was gone (hostile43mn F3); now its grace period and some slack."""
    from launcher.run.supervisor import INTERRUPTED_REPORT_SLACK

    channel = OneNodeChannel()
    process = FakeProcess(0, "", polls_before_exit=1000)
    spawned: list[list[str]] = []

    def spawn(argv: list[str], env: dict[str, str], log: Path) -> FakeProcess:
        spawned.append(argv)
        return process

    sup = Supervisor(
        prepared(tmp_path), RunConfig(grace_seconds=2.0), {}, run_dir=tmp_path / "safe-sft" / "run", spawn=spawn,
        sleep=lambda _: None, coordinator=channel,  # type: ignore[arg-type]
    )  # fmt: skip
    original_poll = process.poll

    def poll_then_signal() -> int | None:
        sup.received = signal.SIGTERM
        return original_poll()

    process.poll = poll_then_signal  # type: ignore[method-assign]
    assert sup.run().outcome == "interrupted"
    assert channel.report_timeouts == [2.0 + INTERRUPTED_REPORT_SLACK]


def test_a_peers_interrupt_ends_this_node_interrupted_not_failed(tmp_path: Path) -> None:
    """Node 0 decided stop because node 1 got Ctrl-C: this node's ranks lost their peers (comm_error), but
    the run was interrupted, and it exits as node 1 did (hostile43mn F5)."""
    from launcher.plan.consensus import Decision

    class PeerInterrupted(OneNodeChannel):
        def exchange(self, attempt: int, report: object, decide, report_timeout=None):  # type: ignore[no-untyped-def]
            why = "node 1 was interrupted (safe-sft received SIGINT)"
            return Decision("test", attempt, "stop", why, 1, "interrupted")

    sup = Supervisor(
        prepared(tmp_path), RunConfig(), {}, run_dir=tmp_path / "safe-sft" / "run",
        spawn=lambda argv, env, log: FakeProcess(1, "RuntimeError: Connection reset by peer"),
        sleep=lambda _: None, coordinator=PeerInterrupted(),  # type: ignore[arg-type]
    )  # fmt: skip
    result = sup.run()
    assert (result.outcome, result.exit_code) == ("interrupted", 130)
    assert result.give_up_reason == "stopped: node 1 was interrupted (safe-sft received SIGINT)"


def test_a_scripts_own_checkpointing_is_the_one_the_ladder_turns(tmp_path: Path) -> None:
    """trl's SFTConfig checkpoints by default: the ladder had read transformers' default (off) and spent an
    attempt turning on what was on (hostile44tr F6). The worker's report of what the script ran is the start."""
    from dataclasses import replace

    from launcher.backends.hf_trainer import HF_TRAINER

    spawned: list[list[str]] = []

    def spawn(argv: list[str], env: dict[str, str], log: Path) -> FakeProcess:
        spawned.append(argv)
        ran = {"output_dir": str(tmp_path), "run_dir": str(tmp_path), "add_version": False,
               "per_device_train_batch_size": 1, "gradient_checkpointing": True}  # fmt: skip
        Path(env["SAFE_SFT_RESOLVED_ARGS"]).write_text(json.dumps(ran))
        return FakeProcess(1, OOM_SUMMARY)

    from launcher.backends.hf_trainer import DEFAULTS

    one = prepared(tmp_path, "--add_version", "false", "--per_device_train_batch_size", "1")
    prep = replace(one, backend=HF_TRAINER, swift=one.swift.with_defaults(DEFAULTS))  # transformers' defaults
    sup = Supervisor(prep, RunConfig(max_attempts=3), {}, run_dir=tmp_path / "safe-sft" / "run", spawn=spawn,
                     sleep=lambda _: None)  # fmt: skip
    result = sup.run()
    assert all("gradient_checkpointing" not in (a.change or "") for a in result.attempts)
    # transformers' default (off) was read before the script ran; each attempt holds the script's own
    # checkpointing as it ran, which no rung turns again
    assert [a.settings.gradient_checkpointing for a in result.attempts] == [True, True, True]


@pytest.mark.parametrize("edited", [False, True])
def test_a_config_the_trainer_reads_again_edited_mid_run_stops_the_retry(tmp_path: Path, edited: bool) -> None:
    """LLaMA-Factory reads its config again as each attempt starts: an edit made while the run trained (lora to
    full, another learning rate) made the retry train another experiment from this one's checkpoint, and the
    report said "no change" (hostile47lf F13). The retry does not start; the run says why and how to go on."""
    from dataclasses import replace as replaced

    from launcher.prepare import file_digest

    config = tmp_path / "train.yaml"
    config.write_text("finetuning_type: lora\nlearning_rate: 1.0e-4\n")
    prep = replaced(prepared(tmp_path), reread=((str(config), file_digest(str(config))),))
    if edited:
        config.write_text("finetuning_type: full\nlearning_rate: 0.5\n")
    script = [(FakeProcess(1, OOM_SUMMARY), [tmp_path / "v0-x" / "checkpoint-3"]), (FakeProcess(0, ""), [])]
    result, spawned = run_scripted(tmp_path, prep, script)
    if not edited:
        assert (result.outcome, len(spawned)) == ("succeeded", 2)  # type: ignore[attr-defined]
        return
    assert (result.outcome, len(spawned)) == ("failed", 1)  # type: ignore[attr-defined]
    assert result.give_up_reason.startswith(f"{config} changed since this run started")  # type: ignore[attr-defined]
