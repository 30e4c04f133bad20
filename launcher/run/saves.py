"""Which checkpoint steps a run will save, read from its arguments alone (pure).

transformers' DefaultFlowCallback saves every `save_steps` steps under save_strategy "steps", and swift's
patcher (as transformers' own end-of-training rule) saves the last step too unless save_strategy is "no";
"no" saves nothing. The steps are known only where the arguments fix them: a whole-number save_steps and a
max_steps. Epochs end at steps the data decides, and a save_steps below 1 is a share of a total the data
decides, so those are unknown (None). With save_total_limit the trainer deletes the oldest checkpoint-N of
its output dir, another run's included, so its saves are not bounded to their own names either (None).
"""

from __future__ import annotations

from launcher.plan.swift_args import SwiftArgs

DEFAULT_SAVE_STEPS = 500  # transformers' and swift's


def steps_saved(args: SwiftArgs, after: int) -> frozenset[int] | None:
    """The steps whose checkpoint-N a run resumed from step `after` (0: from the start) writes into its output
    dir; None where the arguments do not fix them."""
    strategy = (args.get("save_strategy") or "steps").strip().lower()
    if strategy == "no":
        return frozenset()
    if strategy != "steps" or args.get("save_total_limit") not in (None, "", "None"):
        return None
    try:
        every = float(args.get("save_steps") or DEFAULT_SAVE_STEPS)
        last = int(args.get("max_steps") or -1)
    except ValueError:
        return None
    if last <= 0 or every < 1 or not every.is_integer():
        return None
    saved = set(range(int(every), last + 1, int(every))) | {last}
    return frozenset(step for step in saved if step > after)
