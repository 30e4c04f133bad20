"""swift sft's model type and template for a run, decided as ms-swift 4.6 decides them, before anything starts.

Contract: pure: the registry (launcher.backends.swift_models), the model as the user wrote it, what its
folder says (launcher.model.ModelFacts: config.json's architectures, args.json's model_type and template)
and the user's --model_type and --template in; a SwiftNaming out, or SafeSftError where swift would stop.

swift (swift/model/model_meta.py `get_model_info_meta`, swift/template/register.py `get_template_meta`):
1. the model's name (the last part of the path or hub id; a hub cache path's repo name; `___` read as `.`),
   lower case, against the last part of every id it registers: the first match gives a type and its
   group's template;
2. `--model_type`, else that type, else args.json's model_type, else the one type registered for
   config.json's first architecture (`null` when it names none); with several it stops ("Failed to
   automatically match `model_type`"); with none it runs the model under a `dummy` template, unless it reads
   it as multimodal (config.json has a text, vision or audio config), which it stops on;
3. a `--model_type` or args.json model_type it does not register stops it;
4. the template: `--template`, else args.json's, else the matched group's, else the type's own, else its
   one candidate; with several or none it stops ("Failed to automatically match `template_type`"), and a
   template it does not register stops it.
Every stop comes only after torchrun has started each rank and swift has imported itself.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from launcher.backends.swift_models import SwiftModels
from launcher.errors import SafeSftError
from launcher.model import ModelFacts

DUMMY_TEMPLATE = "dummy"  # swift's template for a model it registers under no type

# `swift sft --help` lists none of them (its pre-parser takes --help)
SWIFT_MODELS_DOC = "https://swift.readthedocs.io/en/latest/Instruction/Supported-models-and-datasets.html"


@dataclass(frozen=True)
class SwiftNaming:
    """The type and template swift will run the model with; None where nothing here tells (a hub id with no
    cached config.json: swift decides after its download)."""

    model_type: str | None
    template: str | None


def model_name(model: str) -> str:
    """The name swift matches against the ids it registers (`get_model_name`, lower case)."""
    text = model.replace("\\", "/").rstrip("/")
    found = re.search(r"/models--(?:.+?--)?(.+?)/snapshots/", text) or re.search(
        r"/models/(?:.+?--)?(.+?)/snapshots/", text
    )
    name = found.group(1) if found else text.rsplit("/", 1)[-1].replace("___", ".")
    return name.lower()


def swift_naming(
    models: SwiftModels, model: str, facts: ModelFacts | None, model_type: str | None, template: str | None
) -> SwiftNaming:
    """The type and template swift takes for `model` (SafeSftError where swift would stop on them)."""
    _check_known(
        model_type, models.templates_of, "--model_type", "model type", models.version, _as_name(models, model_type)
    )
    _check_known(template, models.system_chars, "--template", "template", models.version)
    matched = models.names.get(model_name(model))
    kind = model_type or (matched[0] if matched else None)
    if kind is None and facts is not None and facts.saved_model_type is not None:
        kind = facts.saved_model_type
        _check_known(kind, models.templates_of, f"{model}/args.json's model_type", "model type", models.version)
    if kind is None:
        if facts is None or facts.architectures is None:
            return SwiftNaming(None, template)
        kind = _type_by_architecture(models, model, facts)
    saved_template = facts.saved_template if facts is not None else None
    if kind is None and facts is not None and facts.swift_multimodal:
        arch = facts.architectures[0] if facts.architectures else "none"
        raise SafeSftError(
            f"swift sft {models.version} does not train {model!r}: it reads it as multimodal (config.json has a "
            f"text, vision or audio config), and neither its name nor its architecture ({arch}) is of a type it "
            "registers",
            "add --model_type with the type of the model it derives from, where swift registers one "
            f"(ms-swift lists them: {SWIFT_MODELS_DOC}); else swift cannot train it",
        )
    if kind is None:
        chosen = template or saved_template or DUMMY_TEMPLATE
    else:
        group_template = matched[1] if matched and matched[0] == kind else None
        chosen = template or saved_template or group_template or _type_template(models, model, kind)
    _check_known(chosen, models.system_chars, f"{model}/args.json's template", "template", models.version)
    return SwiftNaming(kind, chosen)


def _type_by_architecture(models: SwiftModels, model: str, facts: ModelFacts) -> str | None:
    arch = facts.architectures[0] if facts.architectures else "null"
    types = models.arch_types.get(arch, ())
    if len(types) <= 1:
        return types[0] if types else None
    said = f"architecture {arch} is" if facts.architectures else "lack of an architecture (swift's `null`) is"
    raise SafeSftError(
        f"swift sft {models.version} cannot tell the model type of {model!r}: {model_name(model)!r} is none of "
        f"the names it registers, and config.json's {said} that of {len(types)} types ({_listed(types)})",
        f"add --model_type with the type swift registers for this model{_suggestion(models, facts, types)}",
    )


def _suggestion(models: SwiftModels, facts: ModelFacts, types: tuple[str, ...]) -> str:
    """config.json's own model_type where swift registers a type of that name (and the template it would
    then need), else the architecture's first type where config.json names one."""
    best = facts.model_type if facts.model_type in models.templates_of else None
    if best is None and facts.architectures:
        best = types[0]
    if best is None:
        return f" (ms-swift lists them: {SWIFT_MODELS_DOC})"
    own, candidates = models.templates_of[best]
    template = "" if own or len(candidates) == 1 else f" and --template (one of {_listed(candidates)})"
    return f", such as --model_type {best}{template}"


def _type_template(models: SwiftModels, model: str, kind: str) -> str:
    own, candidates = models.templates_of[kind]
    if own is not None:
        return own
    if len(candidates) == 1:
        return candidates[0]
    raise SafeSftError(
        f"swift sft {models.version} cannot tell which template {model!r} takes: its model type {kind} has "
        + (f"{len(candidates)} candidate templates ({_listed(candidates)})" if candidates else "none"),
        "add --template with the chat format the model was trained with"
        + (f" (one of {_listed(candidates)})" if candidates else ""),
    )


def _listed(names: tuple[str, ...], shown: int = 6) -> str:
    more = f", and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _as_name(models: SwiftModels, value: str | None) -> str | None:
    """The type of the model a --model_type value names, where it is a model's name (ms-swift 2 took
    `qwen2-1_5b-instruct` there, `_` for `.`)."""
    if not value or value in models.templates_of:
        return None
    lower = value.lower()
    found = models.names.get(lower) or models.names.get(re.sub(r"(?<=\d)_(?=\d)", ".", lower))
    return found[0] if found else None


def _check_known(
    value: str | None, known: Iterable[str], name: str, what: str, version: str, named_type: str | None = None
) -> None:
    if value is None or value in known:
        return
    by_lower = {name.lower(): name for name in known}  # swift's names are lower case; a user's may not be
    close = [by_lower[n] for n in difflib.get_close_matches(value.lower(), list(by_lower), n=3, cutoff=0.6)]
    hint = f" (close: {', '.join(close)})" if close else ""
    if named_type:
        hint = f" (it is a model's name, of type {named_type}: --model_type {named_type})"
    raise SafeSftError(
        f"{name} {value!r} is no {what} of swift sft {version}{hint}",
        f"write a {what} swift registers (ms-swift lists them: {SWIFT_MODELS_DOC}), or "
        "register your own in a file given to --external_plugins",
    )
