"""Whether saved logs show a run that safe-sft stopped on a notice (a preemption: exit 75), not a failure.

Two shapes, read from what safe-sft itself leaves: its summary at the end of a log (`safe-sft: preempted
after N attempt(s)`, then `preempted at step K: checkpoint PATH`), and an attempt's folder holding the
notice it got (`notice`, the signal's name) and the step every rank agreed to stop at (`stopping.json`,
written by launcher/worker_notice.py). Such a run saved its checkpoint and lost nothing; `safe-sft
explain` says so and how to go on, where it would otherwise read srun's `exited with exit code 75` as a
rank's failure, or the folder's log as a finished run. A log that also proves a failure (a save that then
crashed) is the failure's: explain decides that, not this module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SUMMARY = re.compile(r"^safe-sft: preempted after \d+ attempt\(s\)")
_SAVED = re.compile(r"^\s*preempted at step (\d+): checkpoint (.+?)\s*$")
NOTICE_FILE = "notice"  # launcher/run/notice.py writes the signal's name into the attempt folder
STOPPING_FILE = "stopping.json"


@dataclass(frozen=True)
class Preempted:
    step: int | None
    checkpoint: str | None
    notice: str | None  # the signal that asked for it (SIGUSR1, SIGTERM), where the folder says

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "checkpoint": self.checkpoint, "notice": self.notice}

    def text(self) -> str:
        by = f" ({self.notice})" if self.notice else ""
        at = f" at step {self.step}" if self.step is not None else ""
        where = f" ({self.checkpoint})" if self.checkpoint else ""
        return "\n".join(
            [
                f"preempted: safe-sft stopped this run on a notice{by}{at} and saved its checkpoint there{where}: "
                "nothing failed, and no step is lost",
                "go on: run the same command with --resume-latest (a Slurm job that is requeued resumes from "
                "it by itself)",
            ]
        )


def preempted(paths: Sequence[str], lines: Sequence[str]) -> Preempted | None:
    """The preemption the logs (their `lines`, as read) or an attempt folder among `paths` show; None if none."""
    for raw in paths:
        folder = Path(raw)
        if raw != "-" and folder.is_dir() and (folder / NOTICE_FILE).is_file():
            return Preempted(_stopping_step(folder / STOPPING_FILE), None, _notice(folder / NOTICE_FILE))
    if not any(_SUMMARY.match(line) for line in lines):
        return None
    saved = next((m for m in map(_SAVED.match, lines) if m), None)
    return Preempted(int(saved.group(1)), saved.group(2), None) if saved else Preempted(None, None, None)


def _notice(path: Path) -> str | None:
    try:
        name = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return name[:32] if re.fullmatch(r"SIG[A-Z0-9]+", name[:32]) else None


def _stopping_step(path: Path) -> int | None:
    try:
        step = json.loads(path.read_text(encoding="utf-8")).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None
