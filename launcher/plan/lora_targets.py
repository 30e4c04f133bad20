"""Whether peft finds the modules `--target_modules` names, decided before the start.

Contract: pure. swift hands `--target_modules` to peft once the model has loaded, as its parser read them
(a list of words: `q_proj,v_proj` is one name), after putting the model's own names in place of its words
`all-linear` and `all-embedding` (ms-swift 4.6, swift/pipelines/train/tuner.py). peft adapts each module
whose path is a name or ends in `.name`, and stops every rank when no module matches any name ("Target
modules {'q_proj,v_proj'} not found in the base model"); a name that matches nothing beside one that does
is passed over in silence.

The model's modules are those its safetensors headers name weights of (ModelFacts.module_paths). A name is
judged by its last part, the module peft's match ends on, against every part of those paths: a loaded
model may nest a module deeper than its checkpoint does (transformers 5 moves Qwen2-VL's decoder under
`model.language_model`), never under another name of its own. With a tied output layer the checkpoint
holds no `lm_head` weight, yet the loaded model has the module. A module with no weights (an activation,
the rotary embedding) is no module peft can adapt either: peft stops on it as not supported.

`missing_targets` is None where swift does not hand the names to peft this way: another tuner, swift's
own LoRA or unsloth, `--target_regex` or `--target_parameters` given, an adapter resumed or loaded (its
own adapter_config.json decides), or no header read.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.model import ModelFacts, module_pattern
from launcher.plan.swift_args import SwiftArgs

SWIFT_WORDS = frozenset({"all-linear", "all-embedding"})  # swift puts the model's own names in their place
PEFT_TUNERS = frozenset({"lora", "longlora", "adalora"})  # the tuners whose --target_modules peft matches
TIED_HEAD = "lm_head"  # the output layer a tied checkpoint stores no weight of
SHOWN_NAMES = 12


@dataclass(frozen=True)
class MissingTargets:
    names: tuple[str, ...]  # the --target_modules names no module of the model matches
    matched: tuple[str, ...]  # the names that match one
    modules: tuple[str, ...]  # the model's weight-holding module names, for the message


def missing_targets(swift: SwiftArgs, model: ModelFacts | None) -> MissingTargets | None:
    """The names of `--target_modules` that match no module of the model (None: none, or not decided)."""
    if model is None or model.module_paths is None or not _handed_to_peft(swift):
        return None
    targets = swift.get_values("target_modules")
    if not targets or SWIFT_WORDS & set(targets):
        return None
    parts = {part for path in model.module_paths for part in path.split(".")}
    if model.tie_word_embeddings:
        parts.add(TIED_HEAD)
    missing = tuple(t for t in targets if module_pattern(t).rpartition(".")[2] not in parts)
    if not missing:
        return None
    matched = tuple(t for t in targets if t not in missing)
    return MissingTargets(missing, matched, _adaptable(model.module_paths))


def _adaptable(paths: frozenset[str]) -> tuple[str, ...]:
    """The modules that hold weights, a layer's first (q_proj before embed_tokens), norms left out (peft
    adapts none)."""
    leaves = {(0 if "#" in path else 1, path.rpartition(".")[2]) for path in paths}
    return tuple(dict.fromkeys(name for _, name in sorted(leaves) if name not in ("", "#") and "norm" not in name))


def _handed_to_peft(swift: SwiftArgs) -> bool:
    tuner = swift.get("tuner_type") or swift.get("train_type") or "lora"
    return (
        tuner in PEFT_TUNERS
        and (swift.get("tuner_backend") or "peft") == "peft"
        and not swift.get_bool("use_swift_lora", False)
        and not swift.get("target_regex")
        and not swift.get_values("target_parameters")
        and not swift.get("resume_from_checkpoint")
        and not swift.get_values("adapters")
    )


def describe_missing(found: MissingTargets) -> tuple[str, str]:
    """(what is wrong, the fix) in the words of a SafeSftError or a plan warning."""
    names = " ".join(found.names)
    shown = ", ".join(found.modules[:SHOWN_NAMES]) + (", ..." if len(found.modules) > SHOWN_NAMES else "")
    what = f"--target_modules {names}: no module of the model is so named (its weights' modules: {shown})"
    commas = [n for n in found.names if "," in n]
    if commas:
        apart = " ".join(part.strip() for part in commas[0].split(",") if part.strip())
        fix = f"give the names as separate words, as swift reads a list: --target_modules {apart}"
    else:
        fix = "name modules the model has, or give --target_modules all-linear"
    return what, fix
