"""What the trainer decides from the model before it trains, decided before the start.

Contract: `model_checks(backend, args, model_name, model, here)` -> ModelChecks: swift's model type and
template (launcher.plan.model_type), the LoRA targets peft would look for (launcher.plan.lora_targets), and
a local model folder's tokenizer. `error` is what would stop every rank once they have started (the run
refuses it, the plan shows it); `warnings` what the trainer would pass over. A plugin file (swift's
--external_plugins) may register a model, a type, a template or modules of its own: with one, swift's
registry checks stand down.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from launcher.backends import Backend
from launcher.backends.swift import swift_plugins
from launcher.errors import SafeSftError
from launcher.model import ModelFacts
from launcher.plan.lora_targets import MissingTargets, describe_missing, llamafactory_missing_targets, missing_targets
from launcher.plan.model_type import SwiftNaming
from launcher.plan.swift_args import SwiftArgs


@dataclass(frozen=True)
class ModelChecks:
    """What swift decides from the model before it trains, decided here: its type and template, the error
    that would stop every rank (the run refuses), and warnings for what swift would pass over."""

    naming: SwiftNaming | None = None
    error: SafeSftError | None = None
    warnings: tuple[str, ...] = ()


def swift_model_checks(swift: SwiftArgs, model_name: str | None, model: ModelFacts | None) -> ModelChecks:
    """swift_naming_of, then the LoRA targets peft would look for (launcher.plan.lora_targets). A plugin
    file may register a model whose modules are not its checkpoint's: with one, the targets are not
    judged."""
    naming, error = swift_naming_of(swift, model_name, model)
    targets = target_checks(None if swift_plugins(swift) else missing_targets(swift, model))
    return ModelChecks(naming, error or targets.error, targets.warnings)


def target_checks(missing: MissingTargets | None) -> ModelChecks:
    """LoRA target names no module of the model matches: where none of the list does, peft stops every rank
    once the model has loaded (the run refuses); beside names that do, peft passes them over (a warning)."""
    if missing is None:
        return ModelChecks()
    what, fix = describe_missing(missing)
    if missing.matched:
        adapted = missing.joiner.join(missing.matched)
        return ModelChecks(warnings=(f"{what}: peft passes it over and adapts {adapted} alone ({fix})",))
    return ModelChecks(error=SafeSftError(f"{what}; peft stops every rank on it once the model has loaded", fix))


def swift_naming_of(
    swift: SwiftArgs, model_name: str | None, model: ModelFacts | None
) -> tuple[SwiftNaming | None, SafeSftError | None]:
    """The model type and template swift decides for the model before it loads anything, decided here from
    its registry (launcher.plan.model_type), or why swift would stop on them (in every rank, after the
    start): a plan shows it, a run refuses to start. (None, None) where the installed ms-swift is not the
    version the registry was read from, and no error where a plugin file (--external_plugins,
    --custom_register_path) may register the model, its type or its template."""
    from launcher.backends.swift_models import installed_swift_like, swift_models
    from launcher.plan.model_type import swift_naming

    models = swift_models()
    if not model_name or installed_swift_like(models.version) is None:
        return None, None
    try:
        # an empty value (a script's `--template "$T"` with T unset) is swift's None: detected, as if not given
        given_type, given_template = swift.get("model_type") or None, swift.get("template") or None
        return swift_naming(models, model_name, model, given_type, given_template), None
    except SafeSftError as err:
        return None, None if swift_plugins(swift) else err


def model_checks(
    backend: Backend, args: SwiftArgs, model_name: str | None, model: ModelFacts | None, here: bool
) -> ModelChecks:
    """Every check of the model for this trainer; `here`: the model's files are on this machine (a plan for
    another machine judges no local folder)."""
    checked = ModelChecks()
    if backend.name == "swift":
        checked = swift_model_checks(args, model_name, model)
    elif backend.name == "llamafactory":
        checked = target_checks(llamafactory_missing_targets(args, model))
    if not model_name or backend.name not in ("swift", "llamafactory") or not here:
        return checked
    tokenizer = tokenizer_error(model_name, args.spelled(backend.model_key))
    if tokenizer is None:
        return checked
    if checked.error is None:
        return replace(checked, error=tokenizer)
    return replace(checked, warnings=(*checked.warnings, f"{tokenizer} (the run refuses to start)"))  # both shown


# What a model folder's tokenizer is saved as, by any tokenizer transformers or a model's own code has
# (tokenizer.json, tokenizer.model, vocab.json and merges.txt, vocab.txt, spiece.model, qwen.tiktoken,
# ice_text.model, tokenization_*.py): a folder with none of these words in a file's name has no tokenizer.
TOKENIZER_WORDS = ("token", "vocab", "merges", "spiece", "sentencepiece", "spm", "bpe", "tiktoken", ".model")


def tokenizer_error(model: str, name: str) -> SafeSftError | None:
    """A local model folder the trainer loads its tokenizer from (swift, LLaMA-Factory) must hold one: swift
    loads the weights, then fails to encode every row and stops on a TypeError that names no file. A plan
    of a folder of config.json alone (a model not downloaded) shows it; a run refuses."""
    folder = Path(model).expanduser()
    if not (folder / "config.json").is_file() or _holds_a_tokenizer(folder):
        return None
    return SafeSftError(
        f"{name} {model!r} holds no tokenizer (no tokenizer.json, tokenizer.model, vocab or merges file): "
        "swift would load the weights, then stop on every row it cannot encode",
        "copy the tokenizer's files (tokenizer.json, tokenizer_config.json, ...) from the model it was trained "
        "from into it",
    )


def _holds_a_tokenizer(folder: Path) -> bool:
    try:
        return any(word in entry.name.lower() for entry in folder.iterdir() for word in TOKENIZER_WORDS)
    except OSError:
        return True  # a folder that cannot be listed is the trainer's to report
