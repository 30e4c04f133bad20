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

LLaMA-Factory (`llamafactory_missing_targets`, 0.9.5's model/adapter.py) splits `lora_target` at its commas
and puts the model's linears in place of a lone `all`. For a model of its COMPOSITE_MODELS (the multimodal
ones) it first keeps every module whose path holds a name anywhere (`proj` takes q_proj), so there a name
is judged as a part of a path, not as its last part.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from launcher.model import ModelFacts, module_pattern
from launcher.plan.swift_args import SwiftArgs

SWIFT_WORDS = frozenset({"all-linear", "all-embedding"})  # swift puts the model's own names in their place
PEFT_TUNERS = frozenset({"lora", "longlora", "adalora"})  # the tuners whose --target_modules peft matches
TIED_HEAD = "lm_head"  # the output layer a tied checkpoint stores no weight of
SHOWN_NAMES = 12


@dataclass(frozen=True)
class MissingTargets:
    option: str  # how the user named the list: --target_modules, lora_target
    names: tuple[str, ...]  # the names no module of the model matches
    matched: tuple[str, ...]  # the names that match one
    modules: tuple[str, ...]  # the model's weight-holding module names, for the message
    fix_all: str  # the option's own word for every linear
    joiner: str = " "  # how the option's names are written together (LLaMA-Factory's: commas)


def missing_targets(swift: SwiftArgs, model: ModelFacts | None) -> MissingTargets | None:
    """swift: the names of `--target_modules` that match no module of the model (None: none, or not
    decided)."""
    if model is None or model.module_paths is None or not _swift_hands_to_peft(swift):
        return None
    targets = swift.get_values("target_modules")
    if not targets or SWIFT_WORDS & set(targets):
        return None
    return _unmatched("--target_modules", targets, model, anywhere=False, fix_all="--target_modules all-linear")


def llamafactory_missing_targets(args: SwiftArgs, model: ModelFacts | None) -> MissingTargets | None:
    """LLaMA-Factory: the names of `lora_target` that match no module of the model (None: none, or not
    decided: another finetuning_type, an adapter loaded, LLaMA Pro's expanded layers, no header read)."""
    if model is None or model.module_paths is None:
        return None
    # its backend reads finetuning_type as tuner_type and lora_target as target_modules (`all` as all-linear)
    if (args.get("tuner_type") or "lora") not in ("lora", "oft") or args.get("adapter_name_or_path"):
        return None
    if args.get_bool("use_llama_pro", False):
        return None
    targets = tuple(name.strip() for name in (args.get("target_modules") or "all-linear").split(","))
    if targets == ("all-linear",):
        return None
    found = _unmatched("lora_target", targets, model, anywhere=model.is_multimodal, fix_all="lora_target: all")
    return replace(found, option="lora_target:", joiner=",") if found else None


def _unmatched(
    option: str, targets: tuple[str, ...], model: ModelFacts, *, anywhere: bool, fix_all: str
) -> MissingTargets | None:
    paths = model.module_paths or frozenset()
    parts = {part for path in paths for part in path.split(".")}
    if model.tie_word_embeddings:
        parts.add(TIED_HEAD)

    def found(target: str) -> bool:
        pattern = module_pattern(target)
        if anywhere:
            return any(pattern in path for path in paths) or pattern in parts
        return pattern.rpartition(".")[2] in parts

    missing = tuple(t for t in targets if not found(t))
    if not missing:
        return None
    matched = tuple(t for t in targets if t not in missing)
    return MissingTargets(option, missing, matched, _adaptable(paths), fix_all)


def _adaptable(paths: frozenset[str]) -> tuple[str, ...]:
    """The modules that hold weights, a layer's first (q_proj before embed_tokens), norms left out (peft
    adapts none)."""
    leaves = {(0 if "#" in path else 1, path.rpartition(".")[2]) for path in paths}
    return tuple(dict.fromkeys(name for _, name in sorted(leaves) if name not in ("", "#") and "norm" not in name))


def _swift_hands_to_peft(swift: SwiftArgs) -> bool:
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
    names = found.joiner.join(found.names)
    shown = ", ".join(found.modules[:SHOWN_NAMES]) + (", ..." if len(found.modules) > SHOWN_NAMES else "")
    what = f"{found.option} {names}: no module of the model is so named (its weights' modules: {shown})"
    commas = [n for n in found.names if "," in n]
    if commas:
        apart = " ".join(part.strip() for part in commas[0].split(",") if part.strip())
        fix = f"give the names as separate words, as swift reads a list: --target_modules {apart}"
    else:
        fix = f"name modules the model has, or give {found.fix_all}"
    return what, fix
