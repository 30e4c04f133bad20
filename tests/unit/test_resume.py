"""Full resume or weights only: who wrote the checkpoint (by its path, not by a clock) and with what."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.plan.degrade import Settings
from launcher.run.checkpoints import latest_complete
from launcher.run.resume import weights_only_reason
from tests.unit.test_checkpoints import make


def settings(deepspeed: str | None = "zero2", world: int = 2) -> Settings:
    return Settings(micro_batch=1, grad_accum=4, world_size=world, deepspeed=deepspeed)


@pytest.mark.parametrize(
    ("writer", "now", "optimizer", "reason"),
    [
        pytest.param(settings(), settings(), True, "", id="same-settings-full-resume"),
        pytest.param(settings(), settings(), False, "no optimizer state", id="save-only-model"),
        pytest.param(settings("zero2"), settings("zero3"), True, "ZeRO stage changed (zero2 -> zero3)", id="stage"),
        pytest.param(settings(world=2), settings(world=4), True, "world size changed", id="world-size"),
        pytest.param(None, settings("zero2"), True, "", id="earlier-run-same-stage"),
        pytest.param(None, settings("zero3"), True, "another ZeRO stage by an earlier run", id="earlier-run-other"),
    ],
)
def test_weights_only_reason(
    tmp_path: Path, writer: Settings | None, now: Settings, optimizer: bool, reason: str
) -> None:
    run_dir = tmp_path / "v1-20260101-000000"
    make(run_dir / "checkpoint-3", optimizer=optimizer)
    (run_dir / "args.json").write_text(json.dumps({"deepspeed": "zero2"}))
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None
    other = {tmp_path / "v2-20260101-000100" / "checkpoint-6": settings("zero3", world=8)}  # not the writer
    writers = {checkpoint.path: writer, **other} if writer else other
    found = weights_only_reason(checkpoint, now, writers)
    assert (reason in found) if reason else found == ""


@pytest.mark.parametrize(("ranks", "world", "full"), [(2, 2, True), (2, 1, False), (None, 1, True)])
def test_an_earlier_runs_zero_checkpoint_resumes_fully_only_on_as_many_ranks(
    ranks: int | None, world: int, full: bool
) -> None:
    """A requeued job on 1 rank, --resume-latest from a 2-rank ZeRO-2 checkpoint: DeepSpeed refuses its
    optimizer state (`used a DP world size of 2 but the current world size is 1`), and every checkpoint was
    set aside in turn until training restarted from step 0."""
    from launcher.run.checkpoints import Checkpoint

    checkpoint = Checkpoint(Path("/out/v0-x/checkpoint-6"), 6, True, "zero2", ranks)
    found = weights_only_reason(checkpoint, settings("zero2", world=world), {})
    assert (found == "") is full
    if not full:
        assert found.startswith("the checkpoint's ZeRO optimizer state is 2 ranks', this run has 1")


def test_with_add_version_false_the_writer_is_the_attempt_that_wrote_that_checkpoint(tmp_path: Path) -> None:
    """Attempts 1 (zero2) and 2 (zero3) both write into output_dir: checkpoint-3 is attempt 1's."""
    make(tmp_path / "checkpoint-3")
    checkpoint, _ = latest_complete(tmp_path)
    assert checkpoint is not None
    writers = {tmp_path / "checkpoint-3": settings("zero2"), tmp_path / "checkpoint-5": settings("zero3")}
    assert "ZeRO stage changed (zero2 -> zero3)" in weights_only_reason(checkpoint, settings("zero3"), writers)


@pytest.mark.parametrize(
    ("written", "logged", "says"),
    [
        pytest.param(["out/v2-x/checkpoint-6"], [4, 5, 6], None, id="resumed-saved-and-logged-after"),
        pytest.param([], [], None, id="died-before-any-step"),
        pytest.param(["out/v2-x/checkpoint-2"], [1, 2], "it saved out/v2-x/checkpoint-2 (step 2)", id="saved-below"),
        pytest.param(["out/v2-x/checkpoint-3"], [], "it saved out/v2-x/checkpoint-3 (step 3)", id="saved-at"),
        pytest.param([], [2], "it logged step 2", id="logged-below-died-before-saving"),
    ],
)
def test_started_over_is_told_by_a_step_at_or_below_the_resume_point(
    written: list[str], logged: list[int], says: str | None
) -> None:
    from launcher.plan.settings import Resume
    from launcher.run.resume import started_over

    found = started_over(Resume("out/checkpoint-3", 3, False), written, logged)
    assert (found is None) == (says is None)
    if says is not None:
        assert found is not None and found.startswith(says)
        assert found.endswith("not after step 3: it trained from step 0")


def test_no_resume_point_is_never_a_start_over() -> None:
    from launcher.run.resume import started_over

    assert started_over(None, ["out/checkpoint-1"], [1]) is None


def _saved_by(run_dir: Path, **args: object) -> Path:
    checkpoint = make(run_dir / "checkpoint-6")
    (run_dir / "args.json").write_text(json.dumps(args))
    return checkpoint


@pytest.mark.parametrize(
    ("given", "differs"),
    [
        (["--tuner_type", "full"], None),  # the rest as swift's defaults, the same as that run's
        (["--tuner_type", "full", "--learning_rate", "1e-5", "--seed", "42"], None),  # as swift wrote them
        (["--tuner_type", "full", "--per_device_train_batch_size", "8", "--deepspeed", "zero3"], None),  # no identity
        (["--tuner_type", "full", "--learning_rate", "1e-3"], "its run had learning_rate 1e-05, this one 1e-3"),
        (["--tuner_type", "full", "--seed", "7"], "its run had seed 42, this one 7"),
        (["--tuner_type", "full", "--dataset", "other.jsonl"], "its run had dataset {data}, this one other.jsonl"),
        (["--tuner_type", "lora"], "its run had tuner_type full, this one lora"),
        ([], "its run had tuner_type full, this one lora (swift's default)"),
        (
            ["--tuner_type", "full", "--lr_scheduler_type", "constant"],
            "its run had lr_scheduler_type cosine, this one constant",
        ),
        (["--tuner_type", "full", "--lr_scheduler_type", "cosine", "--lora_rank", "8"], None),
    ],
)
def test_another_experiments_checkpoint_is_told_by_its_args(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: list[str], differs: str | None
) -> None:
    """Every experiment on a model shares swift's default output dir: --resume-latest had taken experiment
    A's checkpoint for experiment B, with A's weights and optimizer state."""
    from launcher.backends.swift import swift_options, swift_value_kinds
    from launcher.plan.swift_args import parse_swift_argv
    from launcher.run.checkpoints import saved_args
    from launcher.run.resume import other_experiment

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.jsonl").write_text("{}\n")
    data = str(tmp_path / "data.jsonl")
    saved = {"model": "m", "dataset": [data], "tuner_type": "full", "learning_rate": 1e-05, "seed": 42}
    checkpoint = _saved_by(tmp_path / "v0-a", **saved, lr_scheduler_type="cosine", lora_rank=8)
    argv = ["--model", "m", "--dataset", "data.jsonl", *given]  # relative here, absolute in args.json: the same
    swift = parse_swift_argv(argv, None, swift_options(), swift_value_kinds())
    found = other_experiment(saved_args(checkpoint), swift)
    assert found == (differs.format(data=data) if differs else None)


@pytest.mark.parametrize(
    ("given", "differs"),
    [
        ([], "its run had learning_rate 5e-05, this one 1e-4 (swift's default)"),
        (["--learning_rate", "5e-5"], "its run had seed 7, this one 42 (swift's default)"),
        (["--learning_rate", "5e-5", "--seed", "7"], None),
        (["--tuner_type", "full", "--learning_rate", "5e-5", "--seed", "7"], None),  # lr given: no default
    ],
)
def test_a_field_left_to_swifts_default_is_compared_as_that_default(
    tmp_path: Path, given: list[str], differs: str | None
) -> None:
    """A user who relies on swift's default learning rate or seed was not protected against an experiment
    that had set another one: a field not given was not compared at all."""
    from launcher.backends.swift import swift_options, swift_value_kinds
    from launcher.plan.swift_args import parse_swift_argv
    from launcher.run.checkpoints import saved_args
    from launcher.run.resume import other_experiment

    tuner = "full" if "full" in given else "lora"
    checkpoint = _saved_by(tmp_path / "v0-a", model="m", tuner_type=tuner, learning_rate=5e-05, seed=7, lora_rank=8)
    swift = parse_swift_argv(["--model", "m", *given], None, swift_options(), swift_value_kinds())
    assert other_experiment(saved_args(checkpoint), swift) == differs


def test_resume_only_model_holds_for_a_checkpoint_this_run_did_not_write(tmp_path: Path) -> None:
    """--resume-latest with --resume_only_model true: an earlier run's checkpoint loads its weights only, as
    asked; one this run wrote is resumed whole."""
    from launcher.run.resume import resume_point

    earlier = make(tmp_path / "v0-earlier" / "checkpoint-4")
    found, _ = resume_point([tmp_path], settings(), {}, only_model=True)
    assert found is not None and (found.checkpoint, found.weights_only) == (str(earlier), True)
    assert found.why_weights_only == "--resume_only_model true was given"
    own, _ = resume_point([tmp_path], settings(), {earlier: settings()}, only_model=True)
    assert own is not None and not own.weights_only


def test_a_resume_under_another_global_batch_keeps_it_or_says_what_it_costs(tmp_path: Path) -> None:
    """A requeue on one GPU with NPROC_PER_NODE=1 went on from a 2-process run's checkpoint with half its global
    batch, and nothing said so (hostile42res note); swift's args.json holds what the checkpoint's run used."""
    from launcher.run.resume import batch_change, batch_kept

    checkpoint = make(tmp_path / "v0-a" / "checkpoint-6")
    saved = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "global_world_size": 2}
    (tmp_path / "v0-a" / "args.json").write_text(json.dumps(saved))
    assert batch_kept(checkpoint, Settings(2, 2, 1)) == Settings(2, 4, 1)  # the accumulation that keeps 8
    assert batch_kept(checkpoint, Settings(1, 4, 2)) is None  # the ladder's own change keeps it already
    assert batch_kept(checkpoint, Settings(3, 1, 2)) is None  # 8 is no whole number of 3 x 2
    assert batch_change(checkpoint, Settings(3, 1, 2)) == (
        "the checkpoint's run trained with global batch 8 (per_device_train_batch_size 2 x gradient_accumulation_steps "
        "2 x 2 process(es)); this attempt trains with 6 (3 x 1 x 2), and no whole gradient_accumulation_steps keeps "
        "8: the trainer skips the steps done as batches of 6, so samples of this epoch train twice "
        "(per_device_train_batch_size x gradient_accumulation_steps x 2 process(es) = 8 keeps it)"
    )
    assert batch_change(checkpoint, Settings(1, 4, 2)) is None
    (tmp_path / "v0-a" / "args.json").write_text(json.dumps({**saved, "global_world_size": None}))
    assert batch_kept(checkpoint, Settings(2, 2, 1)) is None and batch_change(checkpoint, Settings(2, 2, 1)) is None
