"""Write launcher/backends/llamafactory_options.txt: every argument `llamafactory-cli train` takes (LLaMA-Factory's
HfArgumentParser over its five train dataclasses), with the kind of value its dataclass field holds.

Run in LLaMA-Factory's own environment (.venv-llamafactory; scripts/setup_llamafactory.sh), not in .venv:

    .venv-llamafactory/bin/python scripts/llamafactory_options.py          # rewrite the file

LLaMA-Factory reads its YAML config and `key=value` overrides with OmegaConf, then hands the values to the
dataclasses as they are (parse_dict converts nothing): a key no dataclass has stops every rank ("Some keys are
not used by the HfArgumentParser"), and a value of the wrong type (text where a whole number belongs, a
misspelt stage) reaches the trainer as given. safe-sft checks both before anything starts, from this list,
without importing LLaMA-Factory. Its TrainingArguments extend transformers', so the file names both versions.
One line per argument: its name, its kind (int, float, bool, text, choice followed by the values allowed,
any: not checked; `?` after the kind: a YAML null suits it, its type admits None or None is its default).
tests/stack/test_llamafactory_options_real.py holds the file to the installed LLaMA-Factory.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from pathlib import Path

import option_table

OUT = Path(__file__).resolve().parents[1] / "launcher" / "backends" / "llamafactory_options.txt"
SCALARS = {bool: "bool", int: "int", float: "float", str: "text"}


def kind_of(annotation: object) -> tuple[str, ...]:
    """A field's kind: None dropped from a Union; a Literal's values, or an Enum's (alone or with str: HF's
    TrainingArguments turns such a string into its Enum and stops on any other), are its choices."""
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        enums = [arg for arg in args if isinstance(arg, type) and issubclass(arg, enum.Enum)]
        if len(args) == 1:
            return kind_of(args[0])
        if len(enums) == 1 and set(args) == {enums[0], str}:
            return kind_of(enums[0])
        return ("any",)
    if origin is typing.Literal:
        return ("choice", *(str(arg) for arg in args)) if all(isinstance(a, str) for a in args) else ("any",)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return ("choice", *(str(member.value) for member in annotation))
    kind = SCALARS.get(annotation) if isinstance(annotation, type) else None
    return (kind,) if kind else ("any",)


def takes_null(annotation: object, field: dataclasses.Field) -> bool:  # type: ignore[type-arg]
    """Whether a YAML null suits the field: its type admits None, or None is its default. LLaMA-Factory sets
    the field to None all the same; where neither holds, its trainer stops on it (`cutoff_len: null`: a
    TypeError in every rank once the data is read)."""
    return type(None) in typing.get_args(annotation) or annotation is type(None) or field.default is None


def registered() -> dict[str, tuple[str, ...]]:
    """Text fields LLaMA-Factory looks up in a registry, as choices: `template` (data/template.py TEMPLATES;
    get_template_and_fix_tokenizer stops every rank on a name it lacks, "Template ... does not exist")."""
    from llamafactory.data.template import TEMPLATES

    return {"template": ("choice", *TEMPLATES)}


def installed_options() -> dict[str, tuple[str, ...]]:
    from llamafactory.hparams.parser import _TRAIN_ARGS

    options: dict[str, tuple[str, ...]] = {}
    names = registered()
    for dataclass in _TRAIN_ARGS:
        hints = typing.get_type_hints(dataclass)
        for field in dataclasses.fields(dataclass):
            if field.init:
                kind = names.get(field.name) or kind_of(hints[field.name])
                options[field.name] = (kind[0] + "?", *kind[1:]) if takes_null(hints[field.name], field) else kind
    return dict(sorted(options.items()))


def render(options: dict[str, tuple[str, ...]]) -> str:
    import llamafactory
    import transformers

    versions = f"LLaMA-Factory {llamafactory.__version__}, transformers {transformers.__version__}"
    trainer = f"llamafactory-cli train's arguments ({versions})"
    return option_table.render(trainer, "llamafactory_options.py", options)


def main() -> int:
    return option_table.write(OUT, render(installed_options()))


if __name__ == "__main__":
    raise SystemExit(main())
