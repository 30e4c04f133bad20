"""The progress watchdog: no new step and no new checkpoint for too long means a hang.

swift's ddp_timeout defaults to 18,000,000 s, so a rank that dies or stops while the others wait in a
collective can hang a job for days without an error line. Progress is swift's own record of it: the last
`global_step` in the attempt's logging.jsonl and the number of checkpoint dirs. Before the first step
the allowance is `startup_timeout` (loading the model, preparing the dataset); after it, `hang_timeout`
between two observed progress events. `logging_steps` x the step time must stay below hang_timeout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from launcher.run.evidence import last_logged_step, newest_run_dir

CHECK_EVERY_SECONDS = 5.0


@dataclass
class ProgressWatch:
    output_dir: Path
    existing_run_dirs: frozenset[str]  # swift's run dirs from before this attempt: not its progress
    started: float  # the clock's reading at the attempt's start
    hang_timeout: float
    startup_timeout: float
    last_progress: float = field(init=False)
    last_check: float = field(init=False)
    step: int | None = field(init=False, default=None)
    checkpoints: int = field(init=False, default=0)
    step_seen: dict[int, float] = field(init=False, default_factory=dict)  # step -> seconds after the start

    def __post_init__(self) -> None:
        self.last_progress = self.started
        self.last_check = self.started

    def observe(self, now: float, step: int | None, checkpoints: int) -> None:
        if step != self.step or checkpoints != self.checkpoints:
            self.step, self.checkpoints, self.last_progress = step, checkpoints, now
        if step is not None and step not in self.step_seen:
            self.step_seen[step] = round(now - self.started, 3)

    def stalled(self, now: float) -> str | None:
        """The finding when the allowance is used up, else None."""
        if self.step is None:
            if now - self.last_progress > self.startup_timeout:
                return f"no training step within {self.startup_timeout:.0f} s of the start (--startup-timeout)"
            return None
        if now - self.last_progress > self.hang_timeout:
            return (
                f"no progress for {self.hang_timeout:.0f} s after step {self.step} (--hang-timeout): "
                "no new logged step, no new checkpoint"
            )
        return None

    def poll(self, now: float) -> str | None:
        """Read swift's progress now and then (cheap stats in between), and judge."""
        if now - self.last_check >= CHECK_EVERY_SECONDS:
            self.last_check = now
            run_dir = newest_run_dir(self.output_dir, self.existing_run_dirs)
            checkpoints = len(list(run_dir.glob("checkpoint-*"))) if run_dir else 0
            self.observe(now, last_logged_step(run_dir), checkpoints)
        return self.stalled(now)
