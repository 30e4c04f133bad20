"""Where the next attempt resumes from: the newest complete checkpoint of this run, and whether only its
weights. An earlier run's checkpoints in the same output dir (swift's v<N>-<time> dirs pile up there)
count only for the first attempt, and only with --resume-latest.

Reads the output dir (never writes it). A full resume needs the optimizer state and the same ZeRO stage
and world size as the attempt that wrote the checkpoint; otherwise the weights alone are loaded
(`--resume_only_model true`), and the report says the optimizer state was reset. On several nodes,
node 0 picks the checkpoint and every node checks that it sees it complete on the shared output dir.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from launcher.errors import SafeSftError
from launcher.plan.degrade import Settings
from launcher.plan.settings import Resume
from launcher.plan.swift_args import SwiftArgs
from launcher.run.checkpoints import (
    Checkpoint,
    Snapshot,
    candidate_dirs,
    checkpoint_at,
    checkpoint_step,
    is_complete,
    latest_complete,
    saved_args,
    saved_count,
    zero_stage,
)

Writers = Mapping[Path, Settings]  # a checkpoint this run wrote -> the settings of the attempt that wrote it


def only_incomplete(output_dir: Path) -> tuple[Path, str] | None:
    """The newest checkpoint in output_dir and why it is incomplete, when no complete one is there."""
    found, skipped = latest_complete(output_dir)
    if found is not None or not skipped:
        return None
    newest = max(skipped, key=lambda path: checkpoint_step(path) or 0)  # all checkpoint-N
    return newest, skipped[newest]


def given_resume(path: Path, weights_only: bool, fresh: bool = False) -> Resume:
    """The user's own --resume_from_checkpoint as an attempt resumes from it: its step from its name
    (`checkpoint-N`), else from its trainer_state.json; weights only where --resume_only_model says so.
    `fresh` (--resume_only_model with --ignore_data_skip: swift's way to start a new training from a
    checkpoint's weights) trains from step 0."""
    why = "--resume_only_model true was given" if weights_only else ""
    if fresh:
        return Resume(str(path), 0, weights_only, why, start=True)
    step = checkpoint_step(path)
    if step is None:
        try:
            state = json.loads((path / "trainer_state.json").read_bytes())
        except (OSError, ValueError, RecursionError):
            state = None
        found = state.get("global_step") if isinstance(state, dict) else None
        step = found if type(found) is int else 0
    return Resume(str(path), step, weights_only, why, start=True)


def resume_point(
    roots: Sequence[Path],
    settings: Settings,
    writers: Writers,
    *,
    before: Snapshot | None = None,
    started_from: Resume | None = None,
    earlier: Path | None = None,
    set_aside: Collection[Path] = (),
    same_experiment: Callable[[Path], bool] = lambda _checkpoint: True,
    only_model: bool = False,
) -> tuple[Resume | None, dict[str, str]]:
    """(the resume point, the newer checkpoints skipped as unreadable, with why).

    `roots` are where to look: the run dirs this run's attempts wrote (as swift reported them), or for a
    first attempt the output dir. `before` (the output dir as it was when this run began) leaves an earlier
    run's checkpoints there out. `started_from`, the checkpoint this run's first attempt resumed from, is a
    candidate by itself, never its neighbours: beside a --resume_from_checkpoint of the user's may lie
    another run's. `earlier` is where the first attempt found it (--resume-latest, a requeue: the output
    dir): once it is set aside, the newest complete one left there is a candidate again, where
    `same_experiment` says its run is this one's experiment (the output dir is shared by all of them).
    `set_aside` (checkpoints that failed to load in an attempt) are left out for the rest of the run. Paths
    are compared with their folders resolved: a relative or `..` path names the same checkpoint.
    `only_model` (the user's --resume_only_model true) holds for every checkpoint this run did not write:
    the user's own start, an earlier run's; this run's own are resumed whole where they can be.
    """
    aside = {canonical(path) for path in set_aside}
    found: list[Checkpoint] = []
    reasons: dict[str, str] = {}

    def search(root: Path, snapshot: Snapshot | None, accept: Callable[[Path], bool] = lambda _: True) -> None:
        checkpoint, skipped = latest_complete(root, before=snapshot, set_aside=aside)
        for path, why in skipped.items():
            reasons.setdefault(str(path), why)
        if checkpoint is not None and accept(checkpoint.path):
            found.append(checkpoint)

    for root in dict.fromkeys(path.resolve() for path in roots):
        search(root, before)
    if started_from is not None:
        start = canonical(Path(started_from.checkpoint))
        if start not in aside and (checkpoint := checkpoint_at(start, started_from.step)) is not None:
            found.append(checkpoint)
        elif start in aside and earlier is not None:
            search(earlier.resolve(), None, same_experiment)
    if not found:
        return None, reasons
    checkpoint = max(found, key=lambda c: (c.step, c.path.stat().st_mtime))
    why = weights_only_reason(checkpoint, settings, writers)
    if started_from is not None and checkpoint.path == canonical(Path(started_from.checkpoint)):
        # the user's own start again: weights only where they asked for it too, at the step it starts from
        weights_only = bool(why) or started_from.weights_only
        path, reason = str(checkpoint.path), why or started_from.why_weights_only
        return Resume(path, started_from.step, weights_only, reason, start=True), reasons
    if only_model and checkpoint.path not in writers:  # not this run's: as the user asked for it, not as it allows
        why = "--resume_only_model true was given"
    return Resume(str(checkpoint.path), checkpoint.step, bool(why), why), reasons


def canonical(path: Path) -> Path:
    """A checkpoint's path with its folder resolved (relative, `..`, a linked parent), its own name kept."""
    return path.parent.resolve() / path.name


def weights_only_reason(checkpoint: Checkpoint, settings: Settings, writers: Writers) -> str:
    """Why only the weights can be resumed, or "" for a full resume.

    The writer is found by the checkpoint itself, not by its run dir: with --add_version false every
    attempt writes into the same dir, under settings that may differ.
    """
    if not checkpoint.has_optimizer_state:
        return "the checkpoint holds no optimizer state (saved with save_only_model, or its optimizer files are gone)"
    writer = writers.get(checkpoint.path)
    if writer is None:  # an earlier job's (a requeue): trust it only where the ZeRO stage and ranks are the same
        if zero_stage(checkpoint.deepspeed) != zero_stage(settings.deepspeed):
            return "the checkpoint was written under another ZeRO stage by an earlier run"
        if checkpoint.zero_ranks is not None and checkpoint.zero_ranks != settings.world_size:
            return (
                f"the checkpoint's ZeRO optimizer state is {checkpoint.zero_ranks} ranks', this run has "
                f"{settings.world_size} (DeepSpeed loads it only into as many)"
            )
        return ""
    if writer.deepspeed != settings.deepspeed:
        return f"the ZeRO stage changed ({writer.deepspeed} -> {settings.deepspeed})"
    if writer.world_size != settings.world_size:
        return "the world size changed"
    return ""


def started_over(resume: Resume | None, written: Sequence[str], steps_logged: Collection[int]) -> str | None:
    """Why an attempt told to resume at step K is known to have trained from step 0 instead, or None.

    A trainer that resumed logs and saves only steps after K; one that saved a checkpoint at K or below, or
    logged such a step, started over: a user's script that never passes --resume_from_checkpoint on to
    trainer.train() does (`safe-sft torchrun`). Its steps up to K were trained again.
    """
    if resume is None:
        return None
    saved = sorted(
        (step, path) for path in written if (step := checkpoint_step(Path(path))) is not None and step <= resume.step
    )
    if saved:
        return f"it saved {saved[0][1]} (step {saved[0][0]}), not after step {resume.step}: it trained from step 0"
    logged = min((step for step in steps_logged if step <= resume.step), default=None)
    if logged is not None:
        return f"it logged step {logged}, not after step {resume.step}: it trained from step 0"
    return None


# What tells one experiment from another in swift's args.json, where the user gave it this time: the ladder
# changes the batch, checkpointing and ZeRO stage between attempts, and a requeue may too, never these.
IDENTITY_FIELDS = (
    "model", "dataset", "tuner_type", "learning_rate", "seed", "lr_scheduler_type", "weight_decay", "warmup_ratio",
    "optim", "torch_dtype", "lora_rank", "lora_alpha", "target_modules", "template", "system",
)  # fmt: skip
NUMBER_FIELDS = frozenset({"learning_rate", "seed", "weight_decay", "warmup_ratio", "lora_rank", "lora_alpha"})


# swift's defaults for the identity fields that have one, the same in swift 3 and 4 (a run that relies on one
# is the same experiment only as a run that had it); learning_rate's depends on the tuner
SWIFT_DEFAULTS = {
    "tuner_type": "lora", "seed": "42", "lr_scheduler_type": "cosine", "weight_decay": "0.1", "lora_rank": "8",
    "lora_alpha": "32",
}  # fmt: skip


def other_experiment(saved: Mapping[str, object], swift: SwiftArgs) -> str | None:
    """How the run that saved a checkpoint differs from this one in IDENTITY_FIELDS (the first difference,
    from `saved`, its args.json as swift wrote it: checkpoints.saved_args), or None: the same, or nothing to
    compare. A field this run does not give is compared as swift's default (SWIFT_DEFAULTS), where it has a
    fixed one."""
    for key in IDENTITY_FIELDS:
        given = swift.get(key) if swift.has(key) else _swift_default(key, swift)
        if key not in saved or given is None:
            continue
        then = saved[key]
        if not _same(key, given, then):
            default = "" if swift.has(key) else " (swift's default)"
            return f"its run had {key} {_shown(then)}, this one {given}{default}"
    return None


# swift's defaults for a run's length, as its args.json writes them (swift 3 and 4)
LENGTH_DEFAULTS = {"max_steps": "-1", "num_train_epochs": "3"}


def already_finished(checkpoint: Path, saved: Mapping[str, object], swift: SwiftArgs) -> str | None:
    """Where `checkpoint` is the last step of a run as long as this one (the same max_steps and
    num_train_epochs in `saved`, its run's args.json: checkpoints.saved_args; without one, a script's run,
    the --max_steps given here is the one its trainer_state.json ends at): what to tell the user, as
    nothing is left to train. A trainer resumed there trains past the end instead (a step `7/6` and a new
    final model). None otherwise, or where its args.json or trainer_state.json cannot tell."""
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_bytes())
        step, last = int(state["global_step"]), int(state["max_steps"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    if last <= 0 or step < last:
        return None
    steps_given = swift.get("max_steps") if swift.has("max_steps") else None
    if not saved and steps_given is not None and _same_number(steps_given, last):
        pass  # no args.json (a script's run): the trainer's own state holds the max_steps given again
    elif any(
        key not in saved or given is None or not _same_number(given, saved[key])
        for key, default in LENGTH_DEFAULTS.items()
        for given in (swift.get(key) if swift.has(key) else default,)
    ):
        return None
    return (
        f"the run already finished: {checkpoint} is its last step ({step} of {last}), so nothing is left to "
        "resume (raise --max_steps or --num_train_epochs to train further)"
    )


def _same_number(given: str, then: object) -> bool:
    try:
        return math.isclose(float(given), float(then), rel_tol=1e-9)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _swift_default(key: str, swift: SwiftArgs) -> str | None:
    if key == "learning_rate":
        tuner = swift.get("tuner_type") if swift.has("tuner_type") else SWIFT_DEFAULTS["tuner_type"]
        return "1e-5" if tuner == "full" else "1e-4"
    return SWIFT_DEFAULTS.get(key)


def _same(key: str, given: str, then: object) -> bool:
    if key in NUMBER_FIELDS:
        return _same_number(given, then) or given == str(then)
    if key in ("dataset", "target_modules"):  # lists, given as words
        items = then if isinstance(then, list) else [then]
        return [_place(d) for d in given.split()] == [_place(str(d)) for d in items]
    return _place(given) == _place(str(then))


def _place(text: str) -> str:
    """A local path as an absolute one (swift writes them so), anything else (a hub id) as it is."""
    head, mark, tail = text.partition("#")  # a dataset's `#N` sample count
    path = Path(head).expanduser()
    return str(path.resolve()) + mark + tail if path.exists() else text


def _shown(value: object) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def complete_checkpoints(output_dir: Path) -> list[str]:
    """Every complete checkpoint under the output dir, relative to it (what a node reports it sees)."""
    return sorted(str(p.relative_to(output_dir)) for p in candidate_dirs(output_dir) if is_complete(p))


def relative_to(resume: Resume | None, output_dir: Path) -> Resume | None:
    """A resume point as node 0 sends it: relative to the shared output dir; the user's own start (which may
    lie anywhere) as no path at all, since every node was given it (their arguments agree)."""
    if resume is None:
        return None
    relative = "" if resume.start else str(Path(resume.checkpoint).relative_to(output_dir))
    return replace(resume, checkpoint=relative)


def shared_resume(decided: Resume | None, output_dir: Path, start: str | None) -> Resume | None:
    """Node 0's checkpoint as this node sees it on the shared output dir (or, for the user's own start, this
    node's --resume_from_checkpoint, `start`): it must be complete here too."""
    if decided is None:
        return None
    path = Path(start) if decided.start and start else output_dir / decided.checkpoint
    if not is_complete(path):
        raise SafeSftError(
            f"checkpoint {path} that node 0 chose is not complete on this node",
            "put the output dir on a filesystem all nodes share (NFS, Lustre, GPFS)",
        )
    return replace(decided, checkpoint=str(path))


BATCH_FIELDS = ("per_device_train_batch_size", "gradient_accumulation_steps", "global_world_size")


def _saved_batch(checkpoint: Path) -> tuple[int, int, int] | None:
    """(micro-batch, accumulation, world size) the run that saved `checkpoint` trained with, from its args.json
    (per_device_train_batch_size, gradient_accumulation_steps and global_world_size, as swift writes them)."""
    saved = saved_args(checkpoint)
    micro, accum, world = (saved_count(saved, key) for key in BATCH_FIELDS)
    return None if micro is None or accum is None or world is None else (micro, accum, world)


def batch_kept(checkpoint: Path, settings: Settings) -> Settings | None:
    """`settings` with the accumulation that trains at the checkpoint's global batch, where its run trained
    with another one (a requeue on fewer GPUs, a resume with another NPROC_PER_NODE) and a whole
    gradient_accumulation_steps keeps it at this micro-batch and world size. The trainer skips the data of the
    steps done as batches of the global batch it has now: under another one it would skip samples never
    trained, or train some twice. None where they agree, no whole accumulation does, or args.json does not tell."""
    saved = _saved_batch(checkpoint)
    if saved is None:
        return None
    then, per_step = math.prod(saved), settings.micro_batch * settings.world_size
    if then == settings.global_batch or then % per_step:
        return None
    return replace(settings, grad_accum=then // per_step)


def batch_change(checkpoint: Path, settings: Settings) -> str | None:
    """Where the run that saved `checkpoint` trained with another global batch than `settings` and no whole
    accumulation keeps it (batch_kept): one line saying both and what it costs. None where they agree or the
    checkpoint's args.json does not tell."""
    saved = _saved_batch(checkpoint)
    if saved is None:
        return None
    micro, accum, world = saved
    then, now = micro * accum * world, settings.global_batch
    if then == now:
        return None
    cost = "samples of this epoch are skipped, never trained" if now > then else "samples of this epoch train twice"
    return (
        f"the checkpoint's run trained with global batch {then} (per_device_train_batch_size {micro} x "
        f"gradient_accumulation_steps {accum} x {world} process(es)); this attempt trains with {now} "
        f"({settings.micro_batch} x {settings.grad_accum} x {settings.world_size}), and no whole "
        f"gradient_accumulation_steps keeps {then}: the trainer skips the steps done as batches of {now}, so {cost} "
        f"(per_device_train_batch_size x gradient_accumulation_steps x {settings.world_size} process(es) = {then} "
        "keeps it)"
    )
