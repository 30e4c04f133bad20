"""Checkpoint on notice: the pure decisions, and the supervisor's side with a fake training process."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from launcher.errors import SafeSftError
from launcher.model import FailureKind
from launcher.plan.notice import (
    EXIT_PREEMPTED,
    NoticeMark,
    SlurmJob,
    job_allows_requeue,
    requeue_wanted,
    requeued_resume,
    sigterm_is_notice,
    slurm_job,
    why_slurm_stopped,
)
from launcher.run.notice import read_mark, write_mark
from launcher.run.report import report_json
from launcher.show_report import render_report
from tests.unit.test_supervisor import FakeProcess, supervisor, write_checkpoint


@pytest.mark.parametrize(
    ("save_s", "step_s", "grace_s", "notice"),
    [
        pytest.param(None, None, 600.0, False, id="no save measured yet: stop at once"),
        pytest.param(10.0, 2.0, 30.0, True, id="1.5 x (10 + 2) + 5 = 23 s fits 30 s"),
        pytest.param(10.0, 6.0, 28.0, False, id="1.5 x (10 + 6) + 5 = 29 s does not fit 28 s"),
        pytest.param(20.0, 2.0, 30.0, False, id="1.5 x 22 + 5 = 38 s does not fit 30 s"),
        pytest.param(60.0, None, 120.0, True, id="no plain step measured: the save alone"),
    ],
)
def test_a_plain_sigterm_checkpoints_only_when_the_last_save_fits_the_grace_period(
    save_s: float | None, step_s: float | None, grace_s: float, notice: bool
) -> None:
    assert sigterm_is_notice(save_s, step_s, grace_s) is notice


@pytest.mark.parametrize(
    ("flag", "job", "allows", "wanted"),
    [
        pytest.param(None, "77", True, True, id="default: in a job that allows requeue"),
        pytest.param(None, "77", False, False, id="default: the job says Requeue=0"),
        pytest.param(None, "77", None, False, id="default: scontrol could not tell"),
        pytest.param(None, None, True, False, id="default: not in a Slurm job"),
        pytest.param(True, None, None, True, id="--requeue"),
        pytest.param(False, "77", True, False, id="--no-requeue"),
    ],
)
def test_requeue_default(flag: bool | None, job: str | None, allows: bool | None, wanted: bool) -> None:
    assert requeue_wanted(flag, job, allows) is wanted


def test_job_allows_requeue_reads_scontrols_field() -> None:
    assert job_allows_requeue("JobId=7 JobName=x Requeue=1 Restarts=0 BatchFlag=1") is True
    assert job_allows_requeue("JobId=7 Requeue=0 Restarts=0") is False
    assert job_allows_requeue("") is None


def test_restart_count_and_the_requeued_jobs_mark(tmp_path: Path) -> None:
    mark = NoticeMark("77", 0, str(tmp_path / "v0-x" / "checkpoint-5"), 5)
    (tmp_path / "safe-sft").mkdir()
    write_mark(tmp_path, mark)
    assert read_mark(tmp_path, "77") == mark and read_mark(tmp_path, "78") is None
    assert requeued_resume(mark, SlurmJob("77", 1)) == mark
    assert requeued_resume(mark, SlurmJob("77", 0)) is None  # the job's own first run, not a requeued one
    assert requeued_resume(mark, SlurmJob("78", 1)) is None  # another job's mark
    # job ids begin again on a new controller and differ per cluster: a mark is its cluster's (hostile44slurm F6)
    ours = NoticeMark("77", 0, mark.checkpoint, 5, cluster="a")
    assert requeued_resume(ours, SlurmJob("77", 1, "a")) == ours
    assert requeued_resume(ours, SlurmJob("77", 1, "b")) is None
    assert NoticeMark.from_json(ours.to_json()) == ours and NoticeMark.from_json(mark.to_json()) == mark
    assert NoticeMark.from_json({"job_id": "77", "step": "five"}) is None


class NoticedProcess(FakeProcess):
    """Trains until safe-sft writes the notice, then does what the ranks' callback does: agree on the next
    step, save a complete checkpoint there (or not, with `saves=False`), exit."""

    def __init__(self, attempt_dir: Path, out: Path, step: int, saves: bool = True) -> None:
        super().__init__(0 if saves else 1, "", polls_before_exit=10_000)
        self.attempt_dir, self.out, self.step, self.saves = attempt_dir, out, step, saves
        self.on_poll = lambda: None
        self.exited: int | None = None

    def poll(self) -> int | None:
        self.on_poll()
        if self.exited is not None:  # a signal after the exit finds nothing to stop
            return self.exited
        if self.signals:
            return -self.signals[-1]
        if not (self.attempt_dir / "notice").exists():
            return None
        if self.saves and not (self.attempt_dir / "stopping.json").exists():
            (self.attempt_dir / "stopping.json").write_text(json.dumps({"step": self.step}))
            write_checkpoint(self.out, "v0-x", self.step)
            trainer_state = self.out / "v0-x" / f"checkpoint-{self.step}" / "trainer_state.json"
            trainer_state.write_text(json.dumps({"global_step": self.step, "max_steps": 8, "train_batch_size": 2}))
        self.exited = self.code
        return self.code

    def finish(self) -> tuple[int, str]:
        return (self.exited, self.tail) if self.exited is not None else super().finish()


def sigterm_once_measured(sup, attempt_dir: Path, save_s: float):  # type: ignore[no-untyped-def]
    """A poll callback: the ranks' timing measured (a save of `save_s`, a step of 2 s), then one SIGTERM to
    safe-sft (a second one would stop at once)."""

    def poll() -> None:
        if not (attempt_dir / "timing.json").exists():
            (attempt_dir / "timing.json").write_text(json.dumps({"save_s": save_s, "step_s": 2.0, "step": 3}))
            sup._on_signal(signal.SIGTERM, None)

    return poll


def test_sigusr1_is_not_forwarded_the_ranks_save_and_safe_sft_exits_preempted(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    process = NoticedProcess(tmp_path / "safe-sft" / "run" / "attempt-1", tmp_path, step=4)
    sup = supervisor(tmp_path, [process], spawned)
    process.on_poll = lambda: sup._on_signal(signal.SIGUSR1, None)
    result = sup.run()
    assert (result.outcome, result.exit_code, len(spawned)) == ("preempted", EXIT_PREEMPTED, 1)
    assert process.signals == []  # nothing killed: the ranks stop by themselves
    assert (tmp_path / "safe-sft" / "run" / "attempt-1" / "notice").read_text() == "SIGUSR1\n"
    assert result.attempts[0].preempted == {"step": 4, "checkpoint": str(tmp_path / "v0-x" / "checkpoint-4")}
    data = report_json(result.attempts, result, ["safe-sft"])
    assert (data["outcome"], data["exit_code"], data["attempts"][0]["preempted"]["step"]) == ("preempted", 75, 4)
    shown = render_report({**data, "_path": "report.json"})
    assert f"attempt 1 preempted: checkpoint at step 4: {tmp_path / 'v0-x' / 'checkpoint-4'}" in shown


def test_a_sigterm_after_the_ranks_saved_on_the_notice_is_no_failure_of_the_attempt(tmp_path: Path) -> None:
    """Another node's `scontrol requeue` cancels the step: its SIGTERM reaches this node's safe-sft after the
    ranks saved the notice's checkpoint and exited 0. The attempt was recorded as `interrupted` beside
    `preempted`, and the summary named an interruption as its root cause."""
    attempt_dir = tmp_path / "safe-sft" / "run" / "attempt-1"
    process = NoticedProcess(attempt_dir, tmp_path, step=4)
    sup = supervisor(tmp_path, [process], [])

    def notice_then_requeue() -> None:
        if not (attempt_dir / "notice").exists():
            sup._on_signal(signal.SIGUSR1, None)
        elif not (attempt_dir / "stopping.json").exists():  # this poll saves the checkpoint and exits 0
            sup._on_signal(signal.SIGTERM, None)

    process.on_poll = notice_then_requeue
    result = sup.run()
    assert (result.outcome, result.exit_code) == ("preempted", EXIT_PREEMPTED)
    attempt = result.attempts[0]
    assert attempt.preempted is not None and attempt.preempted["step"] == 4
    assert attempt.failure is None


def test_a_notice_without_a_saved_checkpoint_is_never_restarted(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    process = NoticedProcess(tmp_path / "safe-sft" / "run" / "attempt-1", tmp_path, step=4, saves=False)
    sup = supervisor(tmp_path, [process, FakeProcess(0, "")], spawned)
    process.on_poll = lambda: sup._on_signal(signal.SIGUSR1, None)
    result = sup.run()
    assert (result.outcome, result.exit_code, len(spawned)) == ("interrupted", 128 + signal.SIGUSR1, 1)


def test_a_sigterm_notice_whose_checkpoint_was_not_saved_in_time_is_an_interrupt_and_says_so(tmp_path: Path) -> None:
    """The ranks, told to save on a SIGTERM, failed before their checkpoint was complete: the root cause was
    `unknown` (torchrun's SignalException), and nothing said the checkpoint on notice was not saved."""
    attempt_dir = tmp_path / "safe-sft" / "run" / "attempt-1"
    process = NoticedProcess(attempt_dir, tmp_path, step=4, saves=False)
    process.tail = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15"
    sup = supervisor(tmp_path, [process, FakeProcess(0, "")], [], grace_seconds=30.0)

    process.on_poll = sigterm_once_measured(sup, attempt_dir, save_s=10.0)
    result = sup.run()
    assert (result.outcome, result.exit_code) == ("interrupted", 143)
    assert result.attempts[0].failure is not None and result.attempts[0].failure.kind is FailureKind.INTERRUPTED
    assert result.give_up_reason == "the checkpoint on notice (SIGTERM) was not saved within --grace-period 30 s"


def test_ranks_that_saved_on_the_notice_and_one_died_at_exit_are_preempted(tmp_path: Path) -> None:
    """Both ranks saved checkpoint-4 on the notice and returned from training; rank 1 then aborted at its
    interpreter's exit (`terminate called without an active exception`, SIGABRT). Not preempted because the
    exit code was not 0, the run was called a success (a SIGUSR1) or an interrupt (a SIGTERM)."""
    attempt_dir = tmp_path / "safe-sft" / "run" / "attempt-1"
    process = NoticedProcess(attempt_dir, tmp_path, step=4)
    process.code = -6
    process.tail = "terminate called without an active exception\nFatal Python error: Aborted"
    sup = supervisor(tmp_path, [process], [])

    def notice_and_finish() -> None:
        if not (attempt_dir / "notice").exists():
            sup._on_signal(signal.SIGUSR1, None)
        for rank in (0, 1):  # each rank's training entry returned (launcher/worker.py)
            (attempt_dir / f"finished-rank-{rank}").touch()

    process.on_poll = notice_and_finish
    result = sup.run()
    assert (result.outcome, result.exit_code) == ("preempted", EXIT_PREEMPTED)
    attempt = result.attempts[0]
    assert attempt.preempted == {"step": 4, "checkpoint": str(tmp_path / "v0-x" / "checkpoint-4")}
    assert attempt.failure is None and attempt.failed_at_exit is not None


def test_the_last_step_is_a_finished_run_not_a_preempted_one(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    process = NoticedProcess(tmp_path / "safe-sft" / "run" / "attempt-1", tmp_path, step=8)
    sup = supervisor(tmp_path, [process], spawned)
    process.on_poll = lambda: sup._on_signal(signal.SIGUSR1, None)
    assert sup.run().outcome == "succeeded"


def test_a_sigterm_checkpoints_after_a_save_that_fits_the_grace_period_else_it_stops(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    attempt_dir = tmp_path / "safe-sft" / "run" / "attempt-1"
    process = NoticedProcess(attempt_dir, tmp_path, step=4)
    sup = supervisor(tmp_path, [process], spawned, grace_seconds=30.0)

    process.on_poll = sigterm_once_measured(sup, attempt_dir, save_s=10.0)
    result = sup.run()
    assert (result.outcome, result.exit_code, process.signals) == ("preempted", EXIT_PREEMPTED, [])
    assert (attempt_dir / "notice").read_text() == "SIGTERM\n"

    slow = tmp_path / "slow"
    attempt_dir = slow / "safe-sft" / "run" / "attempt-1"
    process = NoticedProcess(attempt_dir, slow, step=4)
    sup = supervisor(slow, [process], [], grace_seconds=0.0)

    process.on_poll = sigterm_once_measured(sup, attempt_dir, save_s=40.0)  # a save longer than the grace
    result = sup.run()
    assert (result.outcome, result.exit_code) == ("interrupted", 143)
    assert process.signals[0] == signal.SIGTERM and not (attempt_dir / "notice").exists()


def test_a_requeued_job_resumes_its_first_attempt_from_the_mark(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, "v0-x", 5)
    write_checkpoint(tmp_path, "v1-later", 7)  # newer, but not the one the notice saved
    mark = NoticeMark("77", 0, str(tmp_path / "v0-x" / "checkpoint-5"), 5)
    spawned: list[list[str]] = []
    sup = supervisor(tmp_path, [FakeProcess(0, "")], spawned)
    sup.requeued = mark
    assert sup.run().outcome == "succeeded"
    assert spawned[0][spawned[0].index("--resume_from_checkpoint") + 1] == mark.checkpoint
    assert "--resume_only_model" not in spawned[0]

    (tmp_path / "v0-x" / "checkpoint-5" / "trainer_state.json").unlink()  # incomplete: never resumed
    sup = supervisor(tmp_path, [FakeProcess(0, "")], [])
    sup.requeued = mark
    with pytest.raises(SafeSftError, match="not complete"):
        sup.run()


def test_a_later_restart_goes_on_from_what_the_jobs_later_runs_saved_after_the_mark(tmp_path: Path) -> None:
    """Restart 0 saved checkpoint-6 on notice; restart 1 resumed from it, saved 9, 12 and 15 in its own run
    dir, and died (a node failure): restart 2 went back to checkpoint-6 again, even with --resume-latest."""
    from launcher.cli import requeued_mark

    write_checkpoint(tmp_path, "v0-a", 6)
    (tmp_path / "safe-sft").mkdir()
    write_mark(tmp_path, NoticeMark("900", 0, str(tmp_path / "v0-a" / "checkpoint-6"), 6))
    for step in (9, 12, 15):
        write_checkpoint(tmp_path, "v1-b", step)
    (tmp_path / "v1-b" / "checkpoint-15" / "trainer_state.json").write_text("{")  # cut short: never resumed
    restart1 = requeued_mark(tmp_path, SlurmJob("900", 1))
    assert restart1 is not None and (restart1.checkpoint, restart1.step) == (str(tmp_path / "v0-a/checkpoint-6"), 6)
    restart2 = requeued_mark(tmp_path, SlurmJob("900", 2))
    assert restart2 is not None and (restart2.checkpoint, restart2.step) == (str(tmp_path / "v1-b/checkpoint-12"), 12)


def test_a_mark_of_another_experiment_is_left_aside_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Job 1 of an earlier controller left notice-1.json; another experiment, job 1 again on a fresh one, was
    requeued and resumed from the first one's checkpoint, without the check --resume-latest makes
    (hostile44slurm F6)."""
    from launcher.backends.swift import swift_options, swift_value_kinds
    from launcher.cli import requeued_mark
    from launcher.plan.swift_args import parse_swift_argv

    write_checkpoint(tmp_path, "v0-a", 4)
    (tmp_path / "v0-a" / "args.json").write_text(json.dumps({"model": "m", "learning_rate": 1e-05}))
    (tmp_path / "safe-sft").mkdir()
    write_mark(tmp_path, NoticeMark("1", 0, str(tmp_path / "v0-a" / "checkpoint-4"), 4))

    def swift(lr: str):  # type: ignore[no-untyped-def]
        argv = ["--model", "m", "--learning_rate", lr]
        return parse_swift_argv(argv, None, swift_options(), swift_value_kinds())

    assert requeued_mark(tmp_path, SlurmJob("1", 1), swift("5e-5")) is None
    warning = capsys.readouterr().err
    assert "another experiment's (its run had learning_rate 1e-05, this one 5e-5): not resumed from" in warning
    same = requeued_mark(tmp_path, SlurmJob("1", 1), swift("1e-5"))
    assert same is not None and same.step == 4


# `scontrol show job -o 1` from Slurm 22.05 (the stack tier's cluster) as a step's safe-sft got SIGTERM, cut
# to the fields that matter and a few around them
NODE_DOWN = (
    "JobId=1 JobName=job.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 "
    "Account=(null) QOS=(null) JobState=COMPLETING Reason=NodeDown Dependency=(null) Requeue=0 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:00:33 TimeLimit=UNLIMITED NodeList=n1 BatchHost=n1\n"
)
REQUEUED = NODE_DOWN.replace("JobId=1", "JobId=2").replace("Reason=NodeDown", "Reason=None")
REQUEUED = REQUEUED.replace("Requeue=0 Restarts=0", "Requeue=1 Restarts=1")


@pytest.mark.parametrize(
    ("notice", "requeue", "shown", "requeued", "said"),
    [
        (signal.SIGUSR1, True, "", True, "the requeued job resumes from step 4"),
        # a plain scancel's SIGTERM with time to save: the cancelled job had come back (hostile44slurm F1)
        (signal.SIGTERM, True, "", False, "job 9 is not requeued: a SIGTERM (scancel, a time limit) asks it to stop"),
        # `scontrol requeue` sends that SIGTERM with the job already requeued: it had been said not to be (46 F4)
        (signal.SIGTERM, True, REQUEUED, False, "Slurm requeued job 9 (restart 1): it resumes from step 4"),
        # --no-requeue had still said "the requeued job resumes" (F2)
        (signal.SIGUSR1, False, "", False, "job 9 is not requeued (--no-requeue): rerun with --resume-latest"),
    ],
)
def test_after_a_checkpoint_on_notice_only_a_sigusr1_requeues(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    notice: int,
    requeue: bool,
    shown: str,
    requeued: bool,
    said: str,
) -> None:
    from types import SimpleNamespace

    import launcher.run.notice as run_notice
    from launcher.cli import _after_preemption

    asked: list[str] = []
    monkeypatch.setattr(run_notice, "requeue", lambda job_id: asked.append(job_id))
    monkeypatch.setattr(run_notice, "show_job", lambda job_id, timeout_s=5: shown)  # Slurm's record of job 9
    (tmp_path / "safe-sft").mkdir()
    checkpoint = str(tmp_path / "v0-a" / "checkpoint-4")
    result = SimpleNamespace(attempts=[SimpleNamespace(preempted={"step": 4, "checkpoint": checkpoint})])
    _after_preemption(tmp_path, SlurmJob("9", 0, "c"), result, requeue, notice)
    assert asked == (["9"] if requeued else [])
    assert said in capsys.readouterr().err
    assert read_mark(tmp_path, "9") == NoticeMark("9", 0, checkpoint, 4, cluster="c")  # kept for Slurm's requeue


def test_the_training_tree_starts_with_sigusr1_ignored(tmp_path: Path) -> None:
    """torchrun and the swift process would die of a notice Slurm sends to every process of the step."""
    import sys

    from launcher.run.child import TrainingProcess

    code = "import signal; print(signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN)"
    sink = open(tmp_path / "out", "wb")  # noqa: SIM115  the relay writes to a real file descriptor
    process = TrainingProcess([sys.executable, "-c", code], {}, tmp_path / "console.log", sink, sink)
    assert process.finish()[0] == 0
    sink.close()
    assert (tmp_path / "out").read_text().strip() == "True"


def test_the_slurm_job_is_read_once_from_its_two_variables() -> None:
    assert slurm_job({}) is None
    assert slurm_job({"SLURM_JOB_ID": ""}) is None
    assert slurm_job({"SLURM_JOB_ID": "4243"}) == SlurmJob("4243", 0)
    assert slurm_job({"SLURM_JOB_ID": "4243", "SLURM_RESTART_COUNT": "2"}) == SlurmJob("4243", 2)
    assert slurm_job({"SLURM_JOB_ID": "4243", "SLURM_RESTART_COUNT": ""}) == SlurmJob("4243", 0)
    assert slurm_job({"SLURM_JOB_ID": "4243", "SLURM_CLUSTER_NAME": "c1"}) == SlurmJob("4243", 0, "c1")
    for bad, what in (("two", "not an integer"), ("-1", "negative")):
        with pytest.raises(SafeSftError, match=f"SLURM_RESTART_COUNT='{bad}' is {what}"):
            slurm_job({"SLURM_JOB_ID": "4243", "SLURM_RESTART_COUNT": bad})


@pytest.mark.parametrize(
    ("text", "restarts", "resume_latest", "expected"),
    [
        (NODE_DOWN, 0, False, "one of its nodes failed (JobState=COMPLETING, Reason=NodeDown); `sinfo -R`"),
        (
            REQUEUED,
            0,
            False,
            "Slurm requeued job 7 (JobState=COMPLETING, Restarts=1): it runs the same command "
            "again, from step 0: add --resume-latest",
        ),
        (REQUEUED, 0, True, "with --resume-latest it goes on from the newest complete checkpoint"),
        (REQUEUED, 1, False, "short of its time limit and with no node lost: a scancel"),  # not requeued again
        (
            NODE_DOWN.replace("COMPLETING", "TIMEOUT").replace("NodeDown", "None"),
            0,
            False,
            "at its time limit (JobState=TIMEOUT): give it more time (--time), or add `#SBATCH --signal=USR1@120`",
        ),
        (
            NODE_DOWN.replace("COMPLETING", "CANCELLED").replace("NodeDown", "None"),
            0,
            False,
            "was cancelled (JobState=CANCELLED: scancel)",
        ),
        (NODE_DOWN.replace("COMPLETING", "PREEMPTED").replace("NodeDown", "None"), 0, False, "Slurm preempted job 7"),
        # a plain scancel, as the step's safe-sft sees it: COMPLETING, no reason (hostile46slurm F1's run)
        (
            NODE_DOWN.replace("NodeDown", "None"),
            0,
            False,
            "Slurm is ending job 7 (JobState=COMPLETING) short of its time limit and with no node lost: a scancel",
        ),
        # the time limit, as the step sees it: still COMPLETING, its run time at its limit
        (
            NODE_DOWN.replace("NodeDown", "None").replace(
                "RunTime=00:00:33 TimeLimit=UNLIMITED", "RunTime=00:01:00 TimeLimit=00:01:00"
            ),
            0,
            False,
            "at its time limit (JobState=COMPLETING)",
        ),
        (
            NODE_DOWN.replace("NodeDown", "None").replace(
                "RunTime=00:00:33 TimeLimit=UNLIMITED", "RunTime=1-00:00:02 TimeLimit=1-00:00:00"
            ),
            0,
            False,
            "at its time limit",
        ),
        # `scancel --signal=TERM` signals the step and leaves the job running: Slurm says nothing of why
        (NODE_DOWN.replace("COMPLETING", "RUNNING").replace("NodeDown", "None"), 0, False, None),
        ("", 0, False, None),  # scontrol missing, or it failed
    ],
)
def test_why_slurm_stopped_a_job_is_read_from_its_state_reason_and_restarts(
    text: str, restarts: int, resume_latest: bool, expected: str | None
) -> None:
    said = why_slurm_stopped(text, SlurmJob("7", restarts, None), resume_latest)
    if expected is None:
        assert said is None
    else:
        assert said is not None and expected in said, said
