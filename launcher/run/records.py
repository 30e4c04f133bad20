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


@dataclass(frozen=True)
class RunConfig:
    max_attempts: int = 5
    grace_seconds: float = 30.0
    allow_shorter_max_length: bool = False
    hang_timeout: float = 1800.0
    startup_timeout: float = 3600.0
    sample_interval: float = 5.0  # GPU/host memory sampling; 0 turns it off
    resume_latest: bool = False  # the first attempt too resumes from the newest complete checkpoint

    @property
    def ddp_timeout(self) -> int:
        """Long enough that the watchdog, not a collective's timeout, notices a stalled rank first."""
        return int(2 * max(self.hang_timeout, self.startup_timeout))


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
    skipped_incomplete: list[str] = field(default_factory=list)
    deepspeed_config_written: str | None = None  # a derived config safe-sft wrote for this attempt
    ended: str | None = None
    duration_s: float | None = None
    exit_code: int | None = None
    failure: Failure | None = None
    last_step: int | None = None
    run_dir: str | None = None  # the swift run dir (v<N>-...) it wrote: its checkpoints are there
    memory: MemoryTimeline | None = None
    diagnostics: list[str] = field(default_factory=list)
    decision: dict[str, Any] | None = None  # several nodes: node 0's decision after this attempt
    estimate: Estimate | None = None  # the memory estimate for this attempt's settings and DeepSpeed config
    estimate_correction: float = 1.0  # what earlier attempts' measured peak / estimate put on it
    step_seen_s: dict[int, float] = field(default_factory=dict)  # logged step -> seconds after the start, when seen
    predicted_need_bytes: int | None = None  # the guided ladder's corrected estimate when it chose these settings


@dataclass
class RunResult:
    outcome: str  # succeeded | failed | interrupted
    attempts: list[AttemptRecord]
    exit_code: int
    give_up_reason: str | None = None
