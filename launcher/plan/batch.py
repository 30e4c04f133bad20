"""Keep the global batch plain `swift sft` would train with when safe-sft runs another number of processes.

Pure. `swift sft` starts torchrun only when NPROC_PER_NODE or NNODES is set; otherwise it runs ONE
process, whatever the number of visible GPUs. safe-sft runs one process per selected GPU (or `--nproc`
on the CPU), so the same `--gradient_accumulation_steps` would multiply the global batch
(micro-batch x accumulation x processes). swift's own default accumulation, when unset, is
max(1, ceil(16 / micro-batch / world size)) (swift/trainers/arguments.py), computed for ITS world size.

The rule: the global batch swift would have used is the target. Where safe-sft's world size differs,
the accumulation is divided (or multiplied) to hit it exactly; where no whole number does, the nearest
one is taken and the plan and the summary say so. Nodes count as the topology has them (several nodes
are always asked for, by flag, env or Slurm); processes per node as swift would start them.
"""

from __future__ import annotations

import math
from dataclasses import replace

from launcher.model import GlobalBatch

SWIFT_DEFAULT_GLOBAL_BATCH = 16  # swift: gradient_accumulation_steps = max(1, ceil(16 / batch / world_size))


def swift_default_accum(micro_batch: int, world_size: int) -> int:
    return max(1, math.ceil(SWIFT_DEFAULT_GLOBAL_BATCH / micro_batch / world_size))


def keep_global_batch(micro_batch: int, accum_given: int | None, world_size: int, swift_world_size: int) -> GlobalBatch:
    """The accumulation that makes safe-sft's global batch the one plain swift would have trained with."""
    swift_accum = accum_given or swift_default_accum(micro_batch, swift_world_size)
    if world_size == swift_world_size:
        return GlobalBatch(micro_batch, swift_accum, world_size, swift_accum, swift_world_size, accum_given)
    exact, rest = divmod(swift_accum * swift_world_size, world_size)
    accum = exact if rest == 0 and exact >= 1 else max(1, round(swift_accum * swift_world_size / world_size))
    return GlobalBatch(micro_batch, accum, world_size, swift_accum, swift_world_size, accum_given)


def as_ran(batch: GlobalBatch, micro_batch: int, grad_accum: int) -> GlobalBatch:
    """The batch as the first attempt ran it. A script (the torchrun backend) may set its micro-batch and
    accumulation in its own code, where the plan, reading its command line, saw transformers' defaults; the
    script alone runs them too, so where safe-sft kept the accumulation, so would it."""
    if (micro_batch, grad_accum) == (batch.micro_batch, batch.grad_accum):
        return batch
    alone = grad_accum if batch.swift_accum == batch.grad_accum else batch.swift_accum
    return replace(batch, micro_batch=micro_batch, grad_accum=grad_accum, swift_accum=alone)


def accum_to_pass(batch: GlobalBatch) -> str | None:
    """--gradient_accumulation_steps to pass; None where the user's argv already makes swift use it."""
    as_given = batch.accum_given or swift_default_accum(batch.micro_batch, batch.world_size)
    return None if as_given == batch.grad_accum else str(batch.grad_accum)


def describe(batch: GlobalBatch) -> str:
    """One line for the plan and the summary: the global batch, and what safe-sft changed to keep it."""
    ours = (
        f"global batch {batch.global_batch} = per_device_train_batch_size {batch.micro_batch} x "
        f"gradient_accumulation_steps {batch.grad_accum} x {batch.world_size} process(es)"
    )
    if not batch.changed:
        return ours
    given = "" if batch.accum_given else " (swift's default for that world size)"
    alone = (
        f"`swift sft` alone would run {batch.swift_world_size} process(es) with gradient_accumulation_steps "
        f"{batch.swift_accum}{given}, a global batch of {batch.swift_global_batch}"
    )
    if batch.kept:
        return (
            f"{ours}: kept as {alone}; set NPROC_PER_NODE (not --nproc) to the process count you want to run your "
            "own accumulation as given"
        )
    return (
        f"{ours}, NOT {batch.swift_global_batch}: {alone}, and no whole gradient_accumulation_steps gives that "
        f"on {batch.world_size} process(es); set NPROC_PER_NODE (or choose a batch that divides) to decide yourself"
    )
