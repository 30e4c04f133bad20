"""`safe-sft explain LOG...`: classify saved logs as the supervisor would have classified the live run.

Input: one or more logs (per-rank logs, a Slurm .out, a dmesg capture: merged into one diagnosis), an
attempt's folder, or `-` for stdin, read by launcher.logfile. The lines go through the same launcher
parser (launcher.run.launcher_output) and classifier as a live attempt. Output: the kind, how firmly the
log proves it (and the runner-up where it is thin), the proving lines, and what safe-sft would do next;
for a user error, the line to fix. A run safe-sft stopped on a notice (launcher.preempted) is said to be
that, with how to go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

from launcher.logfile import LogText, read_logs
from launcher.masking import mask_text
from launcher.model import Confidence, Failure, FailureKind
from launcher.plan.degrade import describe_ladder
from launcher.preempted import Preempted, preempted
from launcher.run.classify import classify, merge_failures
from launcher.run.launcher_output import parse_launcher_output, to_evidence


@dataclass(frozen=True)
class Explanation:
    failure: Failure | None  # None: a finished run, or one stopped on a notice (`preempted`)
    ladder: list[str]
    preempted: Preempted | None = None


def explain(paths: Sequence[str], stdin: BinaryIO | None = None) -> Explanation:
    """What the logs show: a failure and the ladder safe-sft would climb, a run stopped on a notice (which a
    failure the log proves beats; srun's `exit code 75` alone is the notice's), or a finished run."""
    text = read_logs(paths, stdin)
    failure, ladder = _classified(text)
    stopped = preempted(paths, text.lines)
    if stopped is not None and (failure is None or failure.kind is FailureKind.UNKNOWN):
        return Explanation(None, [], stopped)
    return Explanation(failure, ladder)


def explain_logs(paths: Sequence[str], stdin: BinaryIO | None = None) -> tuple[Failure | None, list[str]]:
    """The failure the logs show (None: they end in a finished run) and the ladder safe-sft would climb."""
    return _classified(read_logs(paths, stdin))


def _classified(text: LogText) -> tuple[Failure | None, list[str]]:
    output = parse_launcher_output(text.lines)
    evidence = to_evidence(output, text.lines)
    if text.error_files or text.steps_seen:
        evidence = replace(
            evidence,
            rank_failures=merge_failures(evidence.rank_failures, text.error_files),
            steps_seen=evidence.steps_seen or text.steps_seen,
        )
    failure = classify(evidence)
    return failure, ([] if failure is None else describe_ladder(failure.kind))


def explain_json(failure: Failure | None, ladder: list[str], stopped: Preempted | None = None) -> dict[str, Any]:
    if failure is None:
        none: dict[str, Any] = {"kind": None, "evidence": [], "rank": None, "exit_code": None, "ladder": []}
        return {**none, "preempted": stopped.to_json()} if stopped else none
    return {
        **failure.to_json(),
        "evidence": [mask_text(line) for line in failure.evidence],
        "ladder": ladder,
        "fix": _fix_line(failure),
    }


def _fix_line(failure: Failure) -> str | None:
    """For a user error: the fix the classifier named (a machine's limit or permission), else its error line."""
    if failure.kind is FailureKind.USER_ERROR and failure.evidence:
        named = next((line.removeprefix("fix: ") for line in failure.evidence if line.startswith("fix: ")), None)
        return mask_text(named or failure.evidence[0])
    return None


_ELSEWHERE = (
    "a log that shows no error and no exit may hold only part of the run's output: explain the file its ranks "
    "wrote to (a Slurm step's own -o file, each node's log) too"
)


def _nothing_named(failure: Failure) -> bool:
    """An unknown failure with neither an exit status nor a rank: the log showed no failure at all."""
    return failure.kind is FailureKind.UNKNOWN and failure.exit_code is None and failure.rank is None


def explain_text(failure: Failure | None, ladder: list[str], stopped: Preempted | None = None) -> str:
    if failure is None:
        return stopped.text() if stopped else "no failure found: the log ends in a finished run"
    lines = [failure.headline()]
    if failure.confidence is Confidence.THIN:
        also = f"; it could also be {failure.runner_up.value}" if failure.runner_up else ""
        ended = "only how the process ended" if failure.exit_code is not None else "nor how the process ended"
        lines.append(f"the evidence is thin: no line names the cause, {ended}{also}")
    if failure.evidence and _nothing_named(failure):
        # the classifier quotes the log's last lines; here they are context, not proof of anything
        lines.append("the log ends with:")
        lines += [f"  {mask_text(line)[:400]}" for line in failure.evidence]
        lines.append(_ELSEWHERE)
    elif failure.evidence:
        lines.append("evidence:")
        lines += [f"  {mask_text(line)[:400]}" for line in failure.evidence]
    else:
        lines.append("evidence: no line in the log names a failure")
    fix = _fix_line(failure)
    if fix is not None and not any(line.startswith("fix: ") for line in failure.evidence):  # else shown above
        lines.append(f"fix this line's cause, then run again: {fix[:400]}")
    lines.append("safe-sft would change, in this order:")
    lines += [f"  {n}. {step}" for n, step in enumerate(ladder, 1)]
    return "\n".join(lines)
