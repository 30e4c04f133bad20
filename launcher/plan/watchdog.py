"""The progress watchdog's allowances, and the one argument they add to swift's: `--ddp_timeout`. Pure.

swift's ddp_timeout defaults to 18,000,000 s (208 days): a collective waiting on a dead or stopped rank
never fails by itself. With the watchdog on and no `--ddp_timeout` of the user's, safe-sft passes twice
the larger allowance, so the watchdog notices a stall first and the process group still fails on its own
if safe-sft were gone. The user's value always wins; with the watchdog off, swift's default stays.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.plan.swift_args import SwiftArgs

SWIFT_DEFAULT_DDP_TIMEOUT = 18_000_000
# A user's script may parse its own arguments (argparse) and refuse an unknown --ddp_timeout: for it the
# timeout goes by this variable to launcher/hf_worker.py, which sets it in the TrainingArguments the script builds
DDP_TIMEOUT_ENV = "SAFE_SFT_DDP_TIMEOUT"


@dataclass(frozen=True)
class Watchdog:
    hang_timeout: float = 1800.0  # seconds without progress after the first step; 0 turns the watchdog off
    startup_timeout: float = 3600.0  # before the first step; 0: no limit

    @property
    def on(self) -> bool:
        return self.hang_timeout > 0


def added_ddp_timeout(swift: SwiftArgs, watchdog: Watchdog, by_env: bool = False) -> tuple[int | None, str | None]:
    """(the --ddp_timeout safe-sft adds, or None; the plan's note saying so, or None). `by_env`: it goes to the
    worker as DDP_TIMEOUT_ENV, not on the trainer's command line."""
    if swift.has("ddp_timeout"):
        return None, None
    if not watchdog.on:
        return None, None
    value = int(2 * max(watchdog.hang_timeout, watchdog.startup_timeout))
    default = swift.get("ddp_timeout")  # a trainer's own default (launcher/backends), else swift's
    why = (
        f"swift's default is {SWIFT_DEFAULT_DDP_TIMEOUT} s, 208 days: a collective waiting on a stalled rank "
        "never fails"
        if default is None
        else f"the trainer's default is {default} s: a stall would end before the watchdog could collect its stacks"
    )
    how = (
        f"ddp_timeout {value} set in the TrainingArguments the script builds, where it leaves transformers' "
        f"default ({DDP_TIMEOUT_ENV}; the script's own parser is not given an argument it may not take)"
        if by_env
        else f"--ddp_timeout {value} added"
    )
    return value, (
        f"{how} ({why}): twice the larger of --hang-timeout and --startup-timeout, so "
        "the watchdog notices a stall first. A rank that waits longer in one collective (for another rank's "
        "long download or preprocessing) then fails: pass --ddp_timeout yourself to keep your value, or "
        "--hang-timeout 0 to turn the watchdog and this off"
    )
