"""Lost work per failure: steps since the checkpoint the next attempt resumed from, seconds since that step
was logged, plus the next attempt's time to its first logged step."""

from launcher.model import Failure, FailureKind
from launcher.plan.degrade import Settings
from launcher.plan.settings import Resume
from launcher.run.lost_work import gpu_hours, lost_line, lost_work
from launcher.run.records import AttemptRecord
from launcher.run.report import lost_json
from launcher.show_report import render_report

S = Settings(micro_batch=2, grad_accum=2, world_size=4)
OOM = Failure(FailureKind.CUDA_OOM, ("CUDA out of memory",))


def attempt(number: int, **kw) -> AttemptRecord:  # type: ignore[no-untyped-def]
    return AttemptRecord(number=number, settings=S, command=[], env_set={}, log_path="", started="", **kw)


def test_failure_after_a_checkpoint_then_resume() -> None:
    # attempt 1: steps 5 (seen at 20 s) and 10 (seen at 40 s, checkpoint-10), died at step 13 at 55 s;
    # attempt 2 resumed from 10 and logged its first step 28 s in.
    first = attempt(1, failure=OOM, last_step=13, duration_s=55.0, step_seen_s={5: 20.0, 10: 40.0, 13: 55.0})
    second = attempt(2, resumed_from=Resume("ckpt-10", 10, False), last_step=20, step_seen_s={15: 28.0, 20: 40.0})
    (lost,) = lost_work([first, second])
    assert (lost.attempt, lost.steps, lost.kept_step) == (1, 3, 10)
    assert lost.seconds == 55.0 - 40.0 + 28.0
    assert lost.reload_seconds == 28.0


def test_no_checkpoint_loses_the_whole_attempt() -> None:
    first = attempt(1, failure=OOM, last_step=7, duration_s=30.0, step_seen_s={5: 20.0, 7: 30.0})
    second = attempt(2, last_step=20, step_seen_s={5: 12.0})
    (lost,) = lost_work([first, second])
    assert (lost.steps, lost.seconds) == (7, 42.0)


def test_a_failure_before_any_step_and_the_sum_in_gpu_hours() -> None:
    first = attempt(1, failure=OOM, duration_s=10.0)
    second = attempt(2, failure=OOM, last_step=3, duration_s=20.0, step_seen_s={3: 20.0})
    lost = lost_work([first, second])
    assert [(x.steps, x.seconds) for x in lost] == [(0, 30.0), (3, 20.0)]
    assert gpu_hours(lost, [first, second], True) == round(50.0 * 4 / 3600, 4)
    assert gpu_hours(lost, [first, second], False) is None
    total = lost_json(lost, [first, second])
    assert (total["steps"], total["seconds"], total["gpu_hours"]) == (3, 50.0, None)


def test_report_shows_the_sum() -> None:
    data = {
        "_path": "r/report.json",
        "outcome": "succeeded",
        "attempts": [],
        "lost_work": {"failures": 2, "steps": 3, "seconds": 50.0, "gpu_hours": 0.0556},
    }
    assert "  lost to failures: 3 steps, 50 s, 0.06 GPU-hours" in render_report(data)  # the summary's words
    assert "  lost to failures and the interrupt: 3 steps" in render_report({**data, "outcome": "interrupted"})


def test_an_attempt_stopped_on_a_notice_loses_nothing() -> None:
    """It saved the step it stopped at (as on node 0 of a real scancel --signal=USR1, whose attempt also
    carries the signal as `interrupted`): no lost steps, no lost seconds."""
    stopped = Failure(FailureKind.INTERRUPTED, ("safe-sft received SIGUSR1",))
    notice = attempt(1, failure=stopped, last_step=3, duration_s=18.2, step_seen_s={1: 6.0, 3: 18.0},
                     preempted={"step": 3, "checkpoint": "v0-x/checkpoint-3"})  # fmt: skip
    assert lost_work([notice]) == []
    assert lost_json([], [notice])["steps"] == 0


def test_the_last_attempt_loses_only_what_came_after_its_newest_complete_checkpoint() -> None:
    """A run that filled its disk at step 6 with checkpoint-3 complete: a rerun with --resume-latest goes on
    from 3, so 3 steps are lost, not 6 (and the seconds since step 3 was logged)."""
    last = attempt(1, failure=OOM, last_step=6, duration_s=30.0, step_seen_s={3: 12.0, 6: 30.0}, saved_step=3)
    (lost,) = lost_work([last])
    assert (lost.steps, lost.kept_step, lost.seconds) == (3, 3, 18.0)
    unsaved = attempt(1, failure=OOM, last_step=6, duration_s=30.0, step_seen_s={3: 12.0, 6: 30.0})
    assert lost_work([unsaved])[0].steps == 6  # nothing saved: all of it


def test_the_summary_line_names_an_interrupts_unsaved_steps_as_its_own() -> None:
    lost = {"failures": 1, "steps": 10, "seconds": 10.4, "gpu_hours": None}
    assert lost_line(lost, interrupted=False) == "  lost to failures: 10 steps, 10 s"
    assert lost_line(lost, interrupted=True) == "  not saved when interrupted: 10 steps, 10 s"
    both = {"failures": 2, "steps": 13, "seconds": 50.0, "gpu_hours": 0.0556}
    assert lost_line(both, interrupted=True) == "  lost to failures and the interrupt: 13 steps, 50 s, 0.06 GPU-hours"


def test_a_checkpoint_between_two_looks_is_reached_in_proportion_to_the_steps() -> None:
    """safe-sft saw steps 4 (at 15.3 s) and 65 (at 18.6 s) of a fast run that died at 65 with checkpoint-50:
    the lost time had been read from step 65's look, 0 s (hostile42sig F8)."""
    last = attempt(1, failure=OOM, last_step=65, duration_s=18.6, step_seen_s={4: 15.3, 65: 18.6}, saved_step=50)
    (lost,) = lost_work([last])
    assert (lost.steps, lost.seconds) == (15, round(18.6 - (15.3 + 3.3 * 46 / 61), 3))
    assert lost_line({"failures": 1, "steps": 15, "seconds": 0.2}, interrupted=True).endswith("15 steps, <1 s")
    assert lost_line({"failures": 1, "steps": 0, "seconds": 0.0}, interrupted=True).endswith("0 steps, 0 s")
