"""What a run is configured with and what it records: the types the supervisor, the attempt runner and
the report share. Data only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.model import Estimate, Failure
from launcher.plan.degrade import Settings
from launcher.plan.settings import Resume
from launcher.run.gpumon import MemoryTimeline
from launcher.run.resolved import ResolvedArgs


@dataclass(frozen=True)
class RunConfig:
    max_attempts: int = 5
    grace_seconds: float = 30.0
    allow_shorter_max_length: bool = False
    hang_timeout: float = 1800.0  # 0: the watchdog is off
    startup_timeout: float = 3600.0  # 0: no limit before the first step
    sample_interval: float = 5.0  # GPU/host memory sampling; 0 turns it off
    resume_latest: bool = False  # the first attempt too resumes from the newest complete checkpoint
    download_wait: float = 30.0  # seconds before the first retry of a failed download (launcher.plan.degrade)


@dataclass
class AttemptRecord:
    number: int
    settings: Settings
    command: list[str]
    env_set: dict[str, str]
    log_path: str
    started: str
    change: str | None = None
    change_reason: str | None = None
    resumed_from: Resume | None = None
    started_over: str | None = None  # why, where the trainer was told to resume and trained from step 0 instead
    skipped_incomplete: dict[str, str] = field(default_factory=dict)  # newer checkpoints not readable -> why
    deepspeed_config_written: str | None = None  # a derived config safe-sft wrote for this attempt
    ended: str | None = None
    duration_s: float | None = None
    exit_code: int | None = None
    failure: Failure | None = None
    failed_at_exit: Failure | None = None  # a rank that died after every rank's training had returned
    last_step: int | None = None
    run_dir: str | None = None  # the swift run dir (v<N>-..., or output_dir with --add_version false)
    checkpoints_written: list[str] = field(default_factory=list)  # checkpoint dirs new or changed in this attempt
    saved_step: int | None = None  # the step of the newest of those that is complete (a later run resumes there)
    load_failure: str | None = None  # the log line showing it died loading the checkpoint it resumed from
    set_aside: dict[str, str] | None = None  # that checkpoint, set aside for the rest of the run: path, why
    versioned_because: str | None = None  # why --add_version true was given to this attempt (never overwrite)
    resolved: ResolvedArgs | None = None  # swift's own resolved arguments, as it reported them
    memory: MemoryTimeline | None = None
    diagnostics: list[str] = field(default_factory=list)
    decision: dict[str, Any] | None = None  # several nodes: node 0's decision after this attempt
    preempted: dict[str, Any] | None = None  # stopped on a notice: {"step", "checkpoint"} it saved
    estimate: Estimate | None = None  # the memory estimate for this attempt's settings and DeepSpeed config
    estimate_correction: float = 1.0  # what earlier attempts' measured peak / estimate put on it
    step_seen_s: dict[int, float] = field(default_factory=dict)  # logged step -> seconds after the start, when seen
    predicted_need_bytes: int | None = None  # the guided ladder's corrected estimate when it chose these settings

    def went_on_from(self) -> int:
        """The step this attempt's training went on from: its resume point's, or 0 (no resume, or started over)."""
        return self.resumed_from.step if self.resumed_from is not None and self.started_over is None else 0

    def optimizer_state_reset(self) -> bool | None:
        """Whether swift loaded only the weights of the checkpoint it resumed from: what swift reported
        (a config file's resume_only_model counts), else what safe-sft found: a script's Trainer has no such
        field and loads what the checkpoint holds, so one without optimizer state resets it; None without a resume."""
        if self.resumed_from is None:
            return None
        if self.resolved is not None and self.resolved.resume_only_model is not None:
            return self.resolved.resume_only_model
        return self.resumed_from.weights_only


REPORT_SCHEMA = 1  # report.json's `schema` (docs/report-json.md)
# a run's outcome in report.json: `running` until it ends (a killed run's report stays so), then RunResult's
OUTCOMES = ("running", "succeeded", "failed", "interrupted", "preempted")


@dataclass
class RunResult:
    outcome: str  # succeeded | failed | interrupted | preempted
    attempts: list[AttemptRecord]
    exit_code: int
    give_up_reason: str | None = None


def set_aside_line(number: int, set_aside: dict[str, str]) -> str:
    """A checkpoint an attempt could not load, as the summary and `safe-sft report` name it."""
    return f"  attempt {number} set aside {set_aside['path']} (left where it is): {set_aside['why']}"


def reason_line(outcome: str, reason: str) -> str:
    """The line that ends a run's summary and `safe-sft report`: an interrupted run was stopped (by the
    user, a scheduler or a notice), not given up on."""
    return f"  {'stopped' if outcome == 'interrupted' else 'gave up'}: {reason}"
