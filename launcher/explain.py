"""`safe-sft explain LOGFILE`: classify a saved log (a whole terminal capture or a tail).

Reads the file once into the same evidence the supervisor builds from a live attempt.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from launcher.errors import SafeSftError
from launcher.masking import mask_text
from launcher.model import Failure
from launcher.plan.degrade import describe_ladder
from launcher.run.classify import AttemptEvidence, classify, parse_torchrun_failures

_KERNEL_OOM = re.compile(r"Out of memory: Killed process|oom-kill:|Memory cgroup out of memory|oom_kill \d+ -> \d+")
_SUCCESS = re.compile(r"last_model_checkpoint:|'train_runtime'|\"train_runtime\"")


def explain_file(path: Path) -> tuple[Failure | None, list[str]]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as err:
        raise SafeSftError(f"cannot read log {path}: {err.strerror}", "give the path of a saved log") from None
    failures = parse_torchrun_failures(lines)
    succeeded = not failures and any(_SUCCESS.search(line) for line in lines[-50:])
    failure = classify(
        AttemptEvidence(
            exit_code=0 if succeeded else 1,
            rank_failures=failures,
            log_tail=tuple(lines[-2000:]),
            kernel_oom=tuple(line.strip() for line in lines if _KERNEL_OOM.search(line)),
            steps_seen=any("global_step/max_steps" in line for line in lines),
        )
    )
    return failure, ([] if failure is None else describe_ladder(failure.kind))


def explain_json(failure: Failure | None, ladder: list[str]) -> dict[str, Any]:
    if failure is None:
        return {"kind": None, "evidence": [], "rank": None, "exit_code": None, "ladder": []}
    return {**failure.to_json(), "evidence": [mask_text(line) for line in failure.evidence], "ladder": ladder}


def explain_text(failure: Failure | None, ladder: list[str]) -> str:
    if failure is None:
        return "no failure found: the log ends in a finished run"
    lines = [failure.headline(), "evidence:"]
    lines += [f"  {mask_text(line)[:400]}" for line in failure.evidence]
    lines.append("safe-sft would change, in this order:")
    lines += [f"  {n}. {step}" for n, step in enumerate(ladder, 1)]
    return "\n".join(lines)
