"""The work each failure cost: steps and seconds lost, from the attempts' records. Pure.

For a failed attempt followed by another, the next attempt resumes from checkpoint step K (0 when it
starts afresh, or was told to resume and trained from step 0 instead). Lost steps: the failed attempt's
last logged step minus K. Lost seconds: the failed attempt's time after it reached step K (all of it when
K is not past the step it started from; between two looks, in proportion to the steps), plus the next
attempt's time to its first logged step (restart, reload, and the steps up to its first log). The last
attempt of a run that failed (or was interrupted) counts what it did after the newest complete checkpoint
it saved, where a rerun with --resume-latest goes on, else since the step it started from. An attempt
stopped on a notice saved the step it stopped at (launcher/plan/notice.py): it loses nothing. Step times
are when safe-sft saw swift log the step (it looks every few seconds), so they are a few seconds late; a
checkpoint is written right after its step is logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `safe-sft report` imports this module for lost_line, and stays light
    from launcher.run.records import AttemptRecord


@dataclass(frozen=True)
class Lost:
    attempt: int
    steps: int
    seconds: float
    reload_seconds: float  # the next attempt's time to its first logged step (included in `seconds`)
    kept_step: int  # the checkpoint step the work went back to


def lost_work(attempts: Sequence[AttemptRecord]) -> list[Lost]:
    """One entry per failed attempt."""
    out = []
    for index, a in enumerate(attempts):
        if a.failure is None or a.preempted:  # a notice's checkpoint is at the step it stopped: nothing lost
            continue
        start = a.went_on_from()
        following = attempts[index + 1] if index + 1 < len(attempts) else None
        kept = start  # the last attempt: what it did since its start, or since its newest complete checkpoint
        if following is not None:
            kept = following.went_on_from()
        elif a.saved_step is not None and a.saved_step > start:
            kept = a.saved_step
        last = a.last_step if a.last_step is not None else start
        duration = a.duration_s or 0.0
        reached = _time_at(a.step_seen_s, kept)
        spent = duration - reached if kept > start and reached is not None else duration
        reload = 0.0
        if following is not None and following.step_seen_s:
            reload = min(following.step_seen_s.values())
        out.append(Lost(a.number, max(last - kept, 0), round(max(spent, 0.0) + reload, 3), reload, kept))
    return out


def _time_at(step_seen_s: Mapping[int, float], step: int) -> float | None:
    """When the attempt reached `step`: as seen, else between the steps seen either side of it (safe-sft
    looks every few seconds, and a fast run logs many steps between two looks), else the first seen after
    it; None where none was seen at or after it."""
    after = [(s, t) for s, t in step_seen_s.items() if s >= step]
    if not after:
        return None
    later, later_t = min(after)
    before = [(s, t) for s, t in step_seen_s.items() if s < step]
    if later == step or not before:
        return later_t
    earlier, earlier_t = max(before)
    return earlier_t + (later_t - earlier_t) * (step - earlier) / (later - earlier)


def gpu_hours(lost: Sequence[Lost], attempts: Sequence[AttemptRecord], gpus_used: bool) -> float | None:
    """The lost seconds times the GPUs the failed attempts held (their world size), in hours; None on the CPU."""
    if not gpus_used:
        return None
    world = {a.number: a.settings.world_size for a in attempts}
    return round(sum(x.seconds * world.get(x.attempt, 1) for x in lost) / 3600, 4)


def lost_line(lost: Mapping[str, Any], interrupted: bool) -> str:
    """The line for a run's lost work (report.json's `lost_work` sums), in the run's summary and in `safe-sft
    report`. An interrupt's steps since the last checkpoint are the user's own stop, not a failure's cost."""
    hours = f", {lost['gpu_hours']:.2f} GPU-hours" if lost.get("gpu_hours") is not None else ""
    what = "lost to failures"
    if interrupted:
        what = "lost to failures and the interrupt" if lost["failures"] > 1 else "not saved when interrupted"
    seconds = float(lost["seconds"])
    took = "<1 s" if 0 < seconds < 0.5 else f"{seconds:.0f} s"  # a fast run's few steps: not "0 s"
    return f"  {what}: {lost['steps']} steps, {took}{hours}"
