"""Checkpoint on notice, the pure decisions: whether a plain SIGTERM is a notice, whether to requeue, and
where a requeued Slurm job resumes.

A notice (SIGUSR1 always; SIGTERM when the grace period leaves time for it) makes every rank finish its
optimizer step, agree on it, save a checkpoint there and exit 0; safe-sft then exits EXIT_PREEMPTED.
Nothing here reads the environment, the clock or a file: the callers pass the values in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.plan.slurm import int_var

EXIT_PREEMPTED = 75  # sysexits' EX_TEMPFAIL: "try again later"; a job script can requeue on it
SIGTERM_MARGIN = 1.5  # the last save and step may take this much longer under a preemption's load
SIGTERM_SLACK_S = 5.0  # the notice's way through safe-sft, the collective, and the exit


def sigterm_is_notice(last_save_s: float | None, last_step_s: float | None, grace_s: float) -> bool:
    """A plain SIGTERM checkpoints (rather than stopping at once) when the last measured step and save,
    with a margin, end well inside the grace period before SIGKILL. Nothing measured yet: stop at once."""
    if last_save_s is None:
        return False
    needed = SIGTERM_MARGIN * (last_save_s + (last_step_s or 0.0)) + SIGTERM_SLACK_S
    return needed <= grace_s


def requeue_wanted(flag: bool | None, job_id: str | None, job_allows_requeue: bool | None) -> bool:
    """--requeue / --no-requeue win; by default on inside a Slurm job whose record says Requeue=1."""
    if flag is not None:
        return flag
    return job_id is not None and job_allows_requeue is True


def job_allows_requeue(scontrol_show_job: str) -> bool | None:
    """From `scontrol show job -o ID`: its Requeue=0|1 field, or None when the text has none."""
    requeue = _fields(scontrol_show_job).get("Requeue")
    return None if requeue is None else requeue == "1"


def _fields(scontrol_show_job: str) -> dict[str, str]:
    return dict(f.split("=", 1) for f in scontrol_show_job.split() if "=" in f)


def slurm_requeued(scontrol_show_job: str, job: SlurmJob) -> int | None:
    """The job's restart count where Slurm has requeued it since this run started (a Restarts above the
    SLURM_RESTART_COUNT it started with: a node that failed, `scontrol requeue`); None where it has not."""
    return _requeued(_fields(scontrol_show_job), job)


def _requeued(fields: dict[str, str], job: SlurmJob) -> int | None:
    restarts = fields.get("Restarts", "")
    return int(restarts) if restarts.isdigit() and int(restarts) > job.restarts else None


def why_slurm_stopped(scontrol_show_job: str, job: SlurmJob, resume_latest: bool) -> str | None:
    """Why Slurm is ending the job whose step got a SIGTERM, from `scontrol show job -o ID` (its JobState,
    Reason, Restarts, RunTime and TimeLimit): a node that failed, a requeue, the time limit, a scancel, a
    preemption; None where it does not say (a `scancel --signal=TERM` leaves the job RUNNING) or scontrol gave
    nothing. A job being ended shows as COMPLETING (it stays so while this process lives), not as the state
    it ends in: the time limit is read from its run time, and a scancel is what is left."""
    fields = _fields(scontrol_show_job)
    state, reason = fields.get("JobState", ""), fields.get("Reason", "None")
    said = f"JobState={state}" + (f", Reason={reason}" if reason != "None" else "")
    job_id, restarts = job.job_id, fields.get("Restarts", "")
    if _requeued(fields, job) is not None:  # Slurm requeued it: a node failed, or scontrol
        goes_on = (
            "with --resume-latest it goes on from the newest complete checkpoint"
            if resume_latest
            else "it runs the same command again, from step 0: add --resume-latest to go on from the newest "
            "complete checkpoint"
        )
        return f"Slurm requeued job {job_id} ({said}, Restarts={restarts}): {goes_on}"
    if state == "NODE_FAIL" or reason in ("NodeDown", "NodeFail", "Node_Fail"):
        return (
            f"Slurm is ending job {job_id}: one of its nodes failed ({said}); `sinfo -R` says which and why, "
            "and a requeued job waits for nodes that are up"
        )
    limit, ran = slurm_seconds(fields.get("TimeLimit", "")), slurm_seconds(fields.get("RunTime", ""))
    if state == "TIMEOUT" or (limit is not None and ran is not None and ran >= limit):
        return (
            f"Slurm ended job {job_id} at its time limit ({said}): give it more time (--time), or add "
            "`#SBATCH --signal=USR1@120` so that safe-sft saves a checkpoint before the limit"
        )
    if state == "CANCELLED":
        return f"Slurm says job {job_id} was cancelled ({said}: scancel)"
    if state == "PREEMPTED":
        return f"Slurm preempted job {job_id} ({said})"
    if state == "COMPLETING":  # how Slurm shows a job it is ending until every process is gone, this one's too
        return (
            f"Slurm is ending job {job_id} ({said}) short of its time limit and with no node lost: a scancel (or "
            "a preemption that cancels)"
        )
    return None


_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+):(\d\d):(\d\d)$")


def slurm_seconds(text: str) -> int | None:
    """Seconds of a time as scontrol shows it (`[D-]HH:MM:SS`); None for UNLIMITED or anything else."""
    match = _SLURM_TIME.match(text)
    if not match:
        return None
    days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


@dataclass(frozen=True)
class NoticeMark:
    """What a preempted run leaves for its requeued job: which job, which restart, which checkpoint."""

    job_id: str
    restart_count: int
    checkpoint: str
    step: int
    cluster: str | None = None  # SLURM_CLUSTER_NAME: job ids restart on a new controller, and differ per cluster

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "restart_count": self.restart_count,
            "checkpoint": self.checkpoint,
            "step": self.step,
            "cluster": self.cluster,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> NoticeMark | None:
        """None for anything that is not a mark this code wrote."""
        try:
            cluster = data.get("cluster")
            mark = NoticeMark(
                str(data["job_id"]), int(data["restart_count"]), str(data["checkpoint"]), int(data["step"]),
                str(cluster) if cluster is not None else None,
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None
        return mark if mark.step >= 0 and mark.restart_count >= 0 else None


@dataclass(frozen=True)
class SlurmJob:
    """The Slurm job this run is a step of: its id, and how often Slurm has requeued it."""

    job_id: str
    restarts: int
    cluster: str | None = None


def slurm_job(env: Mapping[str, str]) -> SlurmJob | None:
    """SLURM_JOB_ID, SLURM_RESTART_COUNT and SLURM_CLUSTER_NAME, read once; None outside a Slurm job."""
    job_id = env.get("SLURM_JOB_ID") or None
    cluster = env.get("SLURM_CLUSTER_NAME") or None
    return SlurmJob(job_id, int_var(env, "SLURM_RESTART_COUNT") or 0, cluster) if job_id else None


def requeued_resume(mark: NoticeMark | None, job: SlurmJob) -> NoticeMark | None:
    """The mark a requeued job resumes from: written by the same job (its id, on the same cluster) in an
    earlier run of it."""
    if mark is None or mark.job_id != job.job_id or mark.cluster != job.cluster:
        return None
    return mark if job.restarts > mark.restart_count else None
