"""LLaMA-Factory's train arguments as its parser takes them, and the check of a run's values against them.

Contract: `check_llamafactory_config_file(path)` refuses a JSON config where the installed LLaMA-Factory
cannot read one (0.9.5). `check_llamafactory_values(values, where)` raises SafeSftError, before anything
starts, on what `llamafactory-cli train` would stop on or hand its trainer unusable, in every rank after
torchrun started them: a key none of its five train dataclasses has (its HfArgumentParser stops every rank
on it, unless ALLOW_EXTRA_ARGS is on), and a value its field cannot hold (text or a list for a number, text
for a bool, a value outside a choice's list). LLaMA-Factory reads the config and the `key=value` overrides
with OmegaConf and passes the values on as they are (parse_dict converts nothing), so a quoted "8" stays
text where a whole number belongs, a quoted "false" is text that Python takes as true, and a misspelt
`stage` goes through. The values here are as OmegaConf reads them (launcher.swift_config).

The names and kinds come from llamafactory_options.txt (scripts/llamafactory_options.py, run in LLaMA-Factory's
environment). They hold for the LLaMA-Factory and the transformers (whose TrainingArguments it extends) the
file names, so the check runs only where both are the installed versions (read from package metadata,
nothing imported), not for a plan made where they are not installed, and not under USE_MCA=1, where
LLaMA-Factory parses Megatron's arguments instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from launcher.backends.base import read_option_table
from launcher.errors import SafeSftError

OPTIONS_FILE = Path(__file__).with_name("llamafactory_options.txt")
EXTRA_KEYS_VARIABLE = "ALLOW_EXTRA_ARGS"  # LLaMA-Factory then leaves a key no dataclass has alone
MEGATRON_VARIABLE = "USE_MCA"  # LLaMA-Factory then parses mcore_adapter's TrainingArguments
_VERSIONS = re.compile(r"\(LLaMA-Factory (\S+), transformers (\S+)\)")


@cache
def _table() -> tuple[tuple[str, str], dict[str, tuple[str, ...]]]:
    """The LLaMA-Factory and transformers versions the file was written from, and each argument's kind."""
    head, kinds = read_option_table(OPTIONS_FILE)
    found = _VERSIONS.search(head)
    return ((found.group(1), found.group(2)) if found else ("", "")), kinds


def table_versions() -> tuple[str, str]:
    return _table()[0]


def installed_versions() -> tuple[str | None, str | None]:
    """The installed LLaMA-Factory's and transformers' versions (None: not installed)."""
    from importlib import metadata  # what the host probe imports anyway: not on every import of the backends

    def version(distribution: str) -> str | None:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return None

    return version("llamafactory"), version("transformers")


def env_enabled(env: Mapping[str, str], variable: str) -> bool:
    """LLaMA-Factory's own reading of its switches (extras/misc.py is_env_enabled)."""
    return env.get(variable, "0").lower() in ("true", "y", "1")


def check_llamafactory_config_file(path: Path) -> None:
    """LLaMA-Factory 0.9.5's read_args hands json.load a path, not a file: every rank stops on a JSON config
    (AttributeError: 'PosixPath' object has no attribute 'read'); its YAML reading works."""
    if path.suffix == ".json" and installed_versions()[0] == "0.9.5":
        raise SafeSftError(
            f"{path}: LLaMA-Factory 0.9.5 cannot read a JSON config (its read_args hands json.load a path, and "
            "every rank stops on it)",
            f"write the same keys as YAML ({path.with_suffix('.yaml').name}) and give that",
        )


def check_llamafactory_values(values: Mapping[str, object], where: Mapping[str, str]) -> None:
    """Refuse the first key or value LLaMA-Factory cannot use; `where` names each key's source (the config
    file, or `key=value`). Nothing is checked unless the installed versions are the table's, or under USE_MCA."""
    if installed_versions() != table_versions() or env_enabled(os.environ, MEGATRON_VARIABLE):
        return
    kinds = _table()[1]
    if V1_MODEL_KEY in values and V0_MODEL_KEY not in values and V1_MODEL_KEY not in kinds:
        raise _v1_config(where[V1_MODEL_KEY])
    allow_extra = env_enabled(os.environ, EXTRA_KEYS_VARIABLE)
    for key, value in values.items():
        kind = kinds.get(key)
        if kind is None:
            if not allow_extra:
                raise _unknown(key, where[key], kinds)
            continue
        why = _refusal(kind, value)
        if why and key == "template" and _installed_registers_template(str(value)):
            why = None
        if why:
            named = " ".join(filter(None, (key, _shown(value), why[0])))
            raise SafeSftError(f"{where[key]}: {named}", why[1].format(key=key))


def _installed_registers_template(name: str) -> bool:
    """The installed LLaMA-Factory's own data/template.py registers a template of this name (one its user added
    to the copy they run, as its docs tell them to), read as text: nothing is imported."""
    import importlib.util

    spec = importlib.util.find_spec("llamafactory")
    if spec is None or not spec.submodule_search_locations:
        return False
    source = Path(next(iter(spec.submodule_search_locations))) / "data" / "template.py"
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return re.search(rf"""\bname\s*=\s*["']{re.escape(name)}["']""", text) is not None


# LLaMA-Factory's "v1" trainer (USE_V1=1 llamafactory-cli) takes another config: its one required key is
# `model` where v0's is `model_name_or_path`. safe-sft runs v0's llamafactory.launcher in every rank.
V1_MODEL_KEY, V0_MODEL_KEY = "model", "model_name_or_path"


def _v1_config(where: str) -> SafeSftError:
    use_v1 = (
        " (USE_V1=1 is set: safe-sft runs the v0 trainer all the same)" if env_enabled(os.environ, "USE_V1") else ""
    )
    return SafeSftError(
        f"{where}: a LLaMA-Factory v1 config (it names {V1_MODEL_KEY}, not {V0_MODEL_KEY}); safe-sft runs "
        f"LLaMA-Factory's v0 trainer, whose parser stops every rank on it{use_v1}",
        f"write it as a v0 config ({V0_MODEL_KEY}, dataset, per_device_train_batch_size, ...: LLaMA-Factory's "
        "examples/train_lora), or run `USE_V1=1 llamafactory-cli train CONFIG` without safe-sft",
    )


# Keys an earlier LLaMA-Factory (or transformers, whose TrainingArguments it parses) took, and what to write
# now: the maintainer's PR #1864 (checkpoint_dir, resume_lora_training), its issue #944 (cutoff_len is the
# two lengths summed), transformers' rename of evaluation_strategy.
EARLIER_KEYS = {
    "checkpoint_dir": "adapter_name_or_path",
    "resume_lora_training": "create_new_adapter (with the opposite value)",
    "max_source_length": "cutoff_len (the source and target lengths summed)",
    "max_target_length": "cutoff_len (the source and target lengths summed)",
    "evaluation_strategy": "eval_strategy",
}


def _unknown(key: str, where: str, kinds: Mapping[str, tuple[str, ...]]) -> SafeSftError:
    import difflib  # only where a key is unknown

    now = EARLIER_KEYS.get(key)
    if now is not None and now.split()[0] in kinds:
        fix = f"an earlier LLaMA-Factory's key: write {now}; "
    else:
        near = difflib.get_close_matches(key, kinds, n=1, cutoff=0.75)
        fix = f"did you mean {near[0]}? " if near else ""
    return SafeSftError(
        f"{where}: LLaMA-Factory {table_versions()[0]} has no argument {key} (its parser stops every rank on it)",
        f"{fix}see `llamafactory-cli train -h`; {EXTRA_KEYS_VARIABLE}=1 makes LLaMA-Factory leave unknown keys alone",
    )


# What a number field cannot hold. A number of the other kind is left alone (lora_alpha: 16.0 works in peft);
# the plan's own whole-number fields (cutoff_len, the batch) are checked as whole numbers elsewhere (SwiftArgs).
NOT_A_NUMBER = (bool, str, list, dict)
NUMBER_KINDS = {"int": (int, "a whole number"), "float": (float, "a number")}  # how it parses, what it is


def _refusal(kind: tuple[str, ...], value: object) -> tuple[str, str] | None:
    """Why a field of this kind cannot hold the value, and the fix (`{key}` for the key), or None. A kind
    ending in `?` takes a YAML null; any other field is set to None all the same, and the trainer stops on it."""
    name = kind[0].removesuffix("?")
    if value is None and name != kind[0]:
        return None
    if value is None:
        return (
            "is null: LLaMA-Factory sets it to None, which its trainer cannot use (every rank stops on it)",
            "leave {key} out for LLaMA-Factory's default, or give it a value",
        )
    kind = (name, *kind[1:])
    if kind[0] in ("text", "any"):
        return None
    if kind[0] in NUMBER_KINDS and isinstance(value, NOT_A_NUMBER):
        parse, what = NUMBER_KINDS[kind[0]]
        why = f"is not {what}: LLaMA-Factory hands it to the trainer as it is"
        if isinstance(value, str) and _parses(parse, value):  # a quoted number: the same, unquoted
            return why, f"write {{key}}: {value.strip()}, unquoted"
        return why, f"write {{key}}: followed by {what}, unquoted (like {{key}}: {'8' if parse is int else '3.0'})"
    if kind[0] == "bool" and isinstance(value, str | list | dict):
        why = 'is not true or false: LLaMA-Factory hands it on as it is (text, even "false", reads as true)'
        return why, "write {key}: true or {key}: false, unquoted"
    if kind[0] == "choice" and str(value) not in kind[1:]:
        import difflib

        long = len(kind) > 21  # a registry's names (template): the first dozen shown
        listed = (*kind[1:13], f"and {len(kind) - 13} more") if long else kind[1:]
        choices = f"is not one of LLaMA-Factory's values ({', '.join(listed)})"
        if isinstance(value, bool):  # YAML 1.1 reads a bare no / yes / off / on as a bool
            return choices, 'quote it: {key}: "no" (YAML reads a bare no, yes, off or on as false or true)'
        near = difflib.get_close_matches(str(value), kind[1:], n=1, cutoff=0.6)
        return choices, (f"did you mean {near[0]}? " if near else "") + (
            "use one of its values" if long else "use one of those"
        )
    return None


def _parses(parse: type, text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


def _shown(value: object) -> str:
    if value is None:
        return ""
    return f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
