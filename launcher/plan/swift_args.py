"""swift's own command line, read once into `SwiftArgs` and written back with overrides.

`swift sft` accepts `--key value [value ...]`, `--key=value`, transformers' dash spellings
(`--max-steps`), an unambiguous prefix of an option (`--max_len`: argparse's allow_abbrev; read here
from the option names the backend passes), a bool field's `--no_<field>` twin that sets it false, and a
YAML/JSON config file as the first argument whose keys come first and whose `ENV:` block sets environment
variables. Later arguments win. A value swift's parser would not convert (a number, a truthy word, a
Literal field's choice: `--torch_dtype int4`; read from the kinds the backend passes), and a whole-number
field no run can use (`--gradient_accumulation_steps 0`), are a SafeSftError naming them. The batch and
length fields that every part of the plan reads are typed once per arguments (`SwiftArgs.batch`).
`swift sft` expands the config file into arguments before it starts torchrun, and so does safe-sft
(`argv()`, in swift's own format). safe-sft keeps the user's arguments as they are and changes a setting
by replacing that flag's values in place, or by appending the flag.

A trainer that spells its arguments otherwise (LLaMA-Factory: a config file, then `key=value`
overrides, `cutoff_len` for max_length) is read into the same swift names by its backend, and written
back in its own spelling (`KeyValueSpelling`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import overload

from launcher.errors import SafeSftError
from launcher.plan.swift_renames import EARLIER_OPTIONS

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
# the words transformers' string_to_bool (swift's parser for a bool field) takes, in any case
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}
# The whole-number fields the plan reads, and the least value a run can use: swift's parser takes
# `--per_device_train_batch_size -1` or `--gradient_accumulation_steps 0` and fails only in the first step,
# after the model has loaded; safe-sft names the value before anything starts.
LEAST_INT = {
    "per_device_train_batch_size": 1,
    "per_device_eval_batch_size": 1,
    "gradient_accumulation_steps": 1,
    "max_length": 1,
    "lora_rank": 1,
    "sequence_parallel_size": 1,
    "max_pixels": 1,
    "dataloader_num_workers": 0,
}
# Whole-number fields with no least (max_steps -1, or any value below 1, means "by epochs"): a trainer that
# takes its config as it is (LLaMA-Factory) hands a float on, and transformers' loop stops on it in range()
WHOLE_INT = ("max_steps",)

# swift's options: `swift sft --help` lists few (its pre-parser takes --help)
SWIFT_OPTIONS_DOC = "https://swift.readthedocs.io/en/latest/Instruction/Command-line-parameters.html"


def normalize_key(flag: str) -> str:
    """`--max-steps` and `--max_steps` name the same field."""
    return flag.lstrip("-").replace("-", "_")


@lru_cache(maxsize=4096)  # every field read looks up every flag: a prefix is resolved once
def option_key(flag: str, options: frozenset[str]) -> str:
    """A flag's field among a parser's options: its own name, else the only option it is a prefix of."""
    key = normalize_key(flag)
    if not options or key in options:
        return key
    matches = [option for option in options if option.startswith(key)]
    return matches[0] if len(matches) == 1 else key


@dataclass(frozen=True)
class KeyValueSpelling:
    """How a trainer with `CONFIG key=value ...` overrides spells swift's fields (the ladder's knobs and
    what safe-sft adds): its own names where they differ, a negated flag where it has one, and the
    fields it has no counterpart for, which are not written."""

    names: Mapping[str, str] = field(default_factory=dict)  # swift's field -> the trainer's
    negated: Mapping[str, str] = field(default_factory=dict)  # swift's boolean -> the trainer's opposite flag
    dropped: frozenset[str] = frozenset()
    # swift's field -> {the trainer's word for a value: swift's}, one to one, so a value read in swift's words
    # is written back in the trainer's (LLaMA-Factory's `lora_target: all` is swift's all-linear)
    words: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def swift_key(self, key: str) -> tuple[str, bool]:
        """A trainer's field as swift's name, and whether its boolean value is the opposite of swift's."""
        for swift, negated in self.negated.items():
            if negated == key:
                return swift, True
        for swift, name in self.names.items():
            if name == key:
                return swift, False
        return key, False

    def swift_value(self, key: str, value: str) -> str:
        """The trainer's value of swift's field `key` in swift's words (the whole value, as the trainer
        compares it)."""
        return self.words.get(key, {}).get(value, value)

    def token(self, key: str, values: tuple[str, ...]) -> str | None:
        """One `key=value` override in the trainer's spelling, or None for a field it does not have."""
        if key in self.dropped:
            return None
        value = " ".join(values) if values else "true"
        if key in self.negated:
            return f"{self.negated[key]}={negate(value)}"
        theirs = {swift: trainer for trainer, swift in self.words.get(key, {}).items()}
        return f"{self.names.get(key, key)}={theirs.get(value, value)}"


def negate(value: str) -> str:
    """The opposite of a boolean's text; any other text is returned as it is."""
    lowered = value.lower()
    return "false" if lowered in _TRUE else "true" if lowered in _FALSE else value


@dataclass(frozen=True)
class ValueKind:
    """What the trainer's parser takes as an option's value (launcher/backends/swift_options.txt)."""

    kind: str  # int, float, bool, text, or flag (no value); a trailing "+": one or more such values
    choices: tuple[str, ...] = ()  # a Literal field's allowed values, as text

    def refuses(self, tokens: tuple[str, ...], value: str) -> str | None:
        """Why the parser refuses this value (its tokens, and as one text), or None where it takes it."""
        if self.kind != "flag" and not self.kind.endswith("+") and len(tokens) > 1:
            return TAKES_ONE_VALUE
        if not tokens and self.kind in ("int", "float", "text"):
            return NEEDS_A_VALUE
        if self.choices:
            return None if value in self.choices else f"is not one of swift's choices: {', '.join(self.choices)}"
        if self.kind == "flag":  # given bare, it has no tokens; a token after it is left over for swift
            return TAKES_NO_VALUE if tokens else None
        many = self.kind.endswith("+")
        for token in tokens if many else (value,):
            problem = _refuses(self.kind.rstrip("+"), token)
            if problem:
                return problem
        return None


TAKES_NO_VALUE = "takes no value"  # a flag (a bool's `--no_` twin) given a value: swift's parser leaves it over
TAKES_ONE_VALUE = "takes one value"  # the tokens after the first are left over, and swift stops on them
NEEDS_A_VALUE = "needs a value"  # argparse: "expected one argument"
LEFT_OVER = (TAKES_NO_VALUE, TAKES_ONE_VALUE)  # what --ignore_args_error true lets swift leave over


def _refuses(kind: str, token: str) -> str | None:
    try:
        if kind == "int":
            int(token)
        elif kind == "float":
            float(token)
    except ValueError:
        return "is not a whole number" if kind == "int" else "is not a number"
    if kind == "bool" and token.lower() not in _TRUE | _FALSE:
        return "is not true or false"
    return None


_KIND_FIX = {
    "is not a whole number": "a whole number",
    "is not a number": "a number (like 1e-4)",
    "is not true or false": "true or false (swift also takes yes/no, t/f, y/n, 1/0)",
}


def _left_over_fix(key: str, rest: list[str]) -> str:
    r"""The fix for tokens after a one-value option: a lone space is a shell script's `\ ` line end."""
    if any(not token.strip() for token in rest):
        return (
            "remove the space after the backslash that ends the line: `\\ ` passes a lone space and ends the "
            "command there, so the lines after it were never passed"
        )
    return _value_fix(key, TAKES_ONE_VALUE, "")


def _value_fix(key: str, problem: str, value: str) -> str:
    """The fix for a value swift's parser would refuse (`_refuses`' problem)."""
    if problem == TAKES_NO_VALUE:
        return f"write --{key} alone (it sets --{key.removeprefix('no_')} false)"
    if problem == TAKES_ONE_VALUE:
        return f"give --{key} one value: swift stops on the rest (options start with --, and a config file comes first)"
    if problem == NEEDS_A_VALUE:
        return f"give --{key} its value, or leave it out for swift's default"
    if value.lower() == "none":  # a YAML null: swift writes it as None, which no number parses
        return f"leave --{key} out for swift's default: swift's parser takes no None there"
    return f"set --{key} to {_KIND_FIX.get(problem, 'one of them')}, or leave it out for swift's default"


@dataclass(frozen=True)
class BatchFields:
    """The batch and length fields every part of the plan reads, typed once (get_int's checks)."""

    micro_batch: int  # per_device_train_batch_size: 1 where unset
    grad_accum: int | None  # gradient_accumulation_steps as given; None: the plan chooses
    max_length: int | None  # None: unset (swift's default, or the model's own limit)
    sequence_parallel: int  # sequence_parallel_size: 1 where unset


@dataclass(frozen=True)
class SwiftArgs:
    """The user's swift arguments: CLI items in order, plus the config file's values and ENV block."""

    items: tuple[tuple[str, tuple[str, ...]], ...]  # (flag as typed, its values)
    config_file: str | None = None
    config_values: Mapping[str, str] = field(default_factory=dict)
    config_env: Mapping[str, str] = field(default_factory=dict)
    config_argv: tuple[str, ...] = ()  # the config file's keys as `--key value` tokens, placed first
    # the trainer's own defaults where they differ from swift's (launcher/backends): read, never written
    defaults: Mapping[str, str] = field(default_factory=dict)
    spelling: KeyValueSpelling | None = None  # how argv() writes them, when the trainer is not swift
    # the trainer's option names, where its parser takes an unambiguous prefix of one (swift's argparse)
    options: frozenset[str] = frozenset()
    # what the trainer's parser takes as each option's value, where it checks it (swift's int, float, bool and
    # Literal fields)
    kinds: Mapping[str, ValueKind] = field(default_factory=dict)
    # the items given as `--flag=value`, by their place in `items`: argparse gives such a flag that one value
    # and leaves the words after it over, where safe-sft would read them as more of its values
    joined: frozenset[int] = frozenset()
    # flags the trainer's parser cannot be reading as the option they are a prefix of (a script's own
    # `--resume`, given no value, where resume_from_checkpoint takes one): they stay themselves
    own_flags: frozenset[str] = frozenset()

    def key_of(self, flag: str) -> str:
        """The field a flag sets: its name, or the one option it is a prefix of (`--max_len` is max_length),
        as argparse reads it; an unknown or ambiguous flag stays itself (swift refuses it)."""
        if flag in self.own_flags:
            return normalize_key(flag)
        return option_key(flag, self.options)

    def get(self, key: str) -> str | None:
        """The effective value of a field: the last CLI occurrence, else the config file's, else the
        trainer's default where its backend names one."""
        given = self.given(key)
        return given if given is not None else self.defaults.get(key)

    def _twin(self, key: str) -> str | None:
        """The option that sets this bool field false: HfArgumentParser gives a bool field whose default is
        true a `--no_<field>` flag (store_false, no value), and the last of the two given wins."""
        twin = f"no_{key}"
        kind = self.kinds.get(twin)
        return twin if kind is not None and kind.kind == "flag" else None

    def _on_cli(self, key: str) -> tuple[str, ...] | None:
        """The values of the last command-line flag that sets this field (its `--no_` twin: "false"), or None."""
        twin = self._twin(key)
        for flag, values in reversed(self.items):
            name = self.key_of(flag)
            if name == key:
                return values
            if twin is not None and name == twin:
                return ("false",)
        return None

    def given(self, key: str) -> str | None:
        """A field's value as the user gave it (command line or config file), else None."""
        values = self._on_cli(key)
        if values is not None:
            return " ".join(values) if values else "true"
        twin = self._twin(key)
        if key not in self.config_values and twin is not None and twin in self.config_values:
            return "false"
        return self.config_values.get(key)

    def get_values(self, key: str) -> tuple[str, ...]:
        """A field's values as separate tokens (`--dataset a.jsonl b.jsonl#500`), as swift's parser sees them:
        the last CLI occurrence, else the config file's (a list there is one token per item)."""
        values = self._on_cli(key)
        if values is not None:
            return values
        tokens = self.config_argv
        for i, token in enumerate(tokens):
            if token.startswith("--") and self.key_of(token) == key:
                rest = tokens[i + 1 :]
                end = next((j for j, t in enumerate(rest) if t.startswith("--")), len(rest))
                return tuple(rest[:end])
        return ()

    def unknown_flags(self) -> tuple[str, ...]:
        """What the user typed as an option that is none of the trainer's (`options`), nor an unambiguous
        prefix of one: a typo, which swift refuses ("remaining_argv") unless --ignore_args_error is set."""
        if not self.options or self.get_bool("ignore_args_error", False):
            return ()
        typed = [flag for flag, _ in self.items if flag.startswith("--")]
        typed += [token for token in self.config_argv if token.startswith("--")]
        return tuple(dict.fromkeys(flag for flag in typed if self.key_of(flag) not in self.options))

    def ambiguous_flags(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The options typed as a prefix of several of the trainer's, with those options: argparse stops on
        each ("ambiguous option"), --ignore_args_error or not."""
        typed = [flag for flag, _ in self.items if flag.startswith("--")]
        typed += [token for token in self.config_argv if token.startswith("--")]
        found = []
        for flag in dict.fromkeys(typed):
            key = normalize_key(flag)
            matches = tuple(sorted(option for option in self.options if option.startswith(key)))
            if key not in self.options and len(matches) > 1:
                found.append((flag, matches))
        return tuple(found)

    def spelled(self, key: str) -> str:
        """How the user writes the field: swift's `--key`, or the trainer's own key (LLaMA-Factory's
        `cutoff_len` for max_length)."""
        return self.spelling.names.get(key, key) if self.spelling else f"--{key}"

    def has(self, key: str) -> bool:
        """Whether the user gave the field (a trainer's default does not count)."""
        return self.given(key) is not None

    @overload
    def get_int(self, key: str, default: int) -> int: ...
    @overload
    def get_int(self, key: str, default: None = None) -> int | None: ...
    def get_int(self, key: str, default: int | None = None) -> int | None:
        """A whole-number field, or `default` where it is unset (or `None`: a YAML null in a trainer's own
        config; swift's parser refuses it, check_values says so); a value that is no whole number, or one below
        the field's least (LEAST_INT), is a SafeSftError naming it as the user spelt it."""
        value = self.get(key)
        if value is None or value.lower() == "none":
            return default
        least = LEAST_INT.get(key)
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or (least is not None and number < least):
            name = self.spelled(key)
            problem = "is not a whole number" if number is None else f"is below {least}"
            fix = f"set {name} to a whole number" + ("" if least is None else f" of at least {least}")
            raise SafeSftError(f"{name} {value!r} {problem}", fix)
        return number

    @cached_property
    def batch(self) -> BatchFields:
        """The batch and length fields, read once per arguments (a changed copy reads its own)."""
        return BatchFields(
            micro_batch=self.get_int("per_device_train_batch_size", 1),
            grad_accum=self.get_int("gradient_accumulation_steps"),
            max_length=self.get_int("max_length"),
            sequence_parallel=self.get_int("sequence_parallel_size", 1),
        )

    def check_values(self) -> None:
        """Every value given is one the trainer's parser takes (`kinds`: a number, a truthy word, a Literal
        field's choice), and every whole-number field the plan reads is one a run can use (get_int's
        SafeSftError otherwise): called once, as the arguments are read, so a value the trainer would refuse
        in every rank, after torchrun has started them, stops safe-sft before anything starts."""
        for at in sorted(self.joined):
            flag, (first, *rest) = self.items[at]
            if rest and not self.get_bool("ignore_args_error", False):
                kind = self.kinds.get(self.key_of(flag))
                several = kind is not None and kind.kind.endswith("+")
                raise SafeSftError(
                    f"{flag}={first!r} {TAKES_ONE_VALUE} written with =, and is followed by "
                    f"{' '.join(map(repr, rest))}: swift leaves the words after it over, and stops",
                    f"give {flag} {' '.join([first, *rest])} for several values (without =)"
                    if several
                    else f"give {flag}={first} alone: drop what follows it",
                )
        end = next((at for at, (flag, _) in enumerate(self.items) if flag == "--"), None)
        if end is not None:  # safe-sft adds its arguments after the user's: they would land behind it too
            after = " ".join(flag for flag, _ in self.items[end + 1 :])
            where = f"followed by {after!r}" if after else "at their end"
            raise SafeSftError(
                f"a `--` among swift's arguments, {where}: swift's parser ends its options there and leaves it "
                "and every word after it over",
                "leave -- out there (one between safe-sft's options and swift's is the only place for it)",
            )
        typed = [self.key_of(flag) for flag, _ in self.items if flag.startswith("--")]
        for key in dict.fromkeys([*typed, *self.config_values]):
            kind, value = self.kinds.get(key), self.given(key)
            if kind is None or value is None:
                continue
            problem = kind.refuses(self.get_values(key), value)
            if problem in LEFT_OVER and self.get_bool("ignore_args_error", False):
                continue  # swift leaves the tokens over, and --ignore_args_error lets it
            if problem == TAKES_ONE_VALUE:
                first, *rest = self.get_values(key)
                raise SafeSftError(
                    f"--{key} {first!r} {problem}, and is followed by {' '.join(map(repr, rest))}",
                    _left_over_fix(key, rest),
                )
            if problem:
                shown = "" if problem == NEEDS_A_VALUE else f" {value!r}"
                raise SafeSftError(f"--{key}{shown} {problem}", _value_fix(key, problem, value))
        for key in (*LEAST_INT, *WHOLE_INT):
            self.get_int(key)
        self._check_split_ratio()

    def _check_split_ratio(self) -> None:
        """swift asserts 0 <= split_dataset_ratio <= 1 once the model has loaded, and 1 leaves no row to train
        on (every rank stops on a TypeError): refused before anything starts."""
        value = self.get("split_dataset_ratio")
        try:
            ratio = float(value) if value is not None else None
        except ValueError:
            return  # not a number: the kinds' check names it
        if ratio is None or "split_dataset_ratio" not in self.kinds or self.get("val_dataset"):
            return  # not swift's field (a script's own), or swift sets it to 0: a --val_dataset is given
        evaluates = (self.get("eval_strategy") or self.get("save_strategy") or "steps") != "no"
        if ratio > 0 and (self.get_bool("streaming", False) or not evaluates):
            return  # and where it streams, or never evaluates: the ratio is not used
        if not 0 <= ratio < 1:
            name = self.spelled("split_dataset_ratio")
            said = "is below 0" if ratio < 0 else "leaves no row to train on" if ratio == 1 else "is above 1"
            raise SafeSftError(
                f"{name} {value!r} {said}: swift holds that share of the data out for evaluation",
                f"set {name} from 0 up to below 1 (0.01 holds out 1 %), or 0 to hold none out",
            )

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        return default

    def with_values(self, updates: Mapping[str, str | None]) -> SwiftArgs:
        """A copy with these fields set (in place where given on the CLI, else appended).

        A value of None removes the field from the CLI items (the config file's value, if any, remains).
        """
        items = list(self.items)
        for key, value in updates.items():
            twin = self._twin(key)
            positions = [i for i, (flag, _) in enumerate(items) if self.key_of(flag) in (key, twin)]
            if value is None:
                items = [item for i, item in enumerate(items) if i not in positions]
                continue
            new_values = tuple(value.split(" ")) if key == "dataset" else (value,)
            if positions:
                for i in positions:  # a `--no_` twin becomes the field's own flag, in its place
                    flag = items[i][0] if self.key_of(items[i][0]) == key else f"--{key}"
                    items[i] = (flag, new_values)
            else:
                items.append((f"--{key}", new_values))
        return replace(self, items=tuple(items))

    def with_defaults(self, defaults: Mapping[str, str]) -> SwiftArgs:
        """A copy that reads these values where the user gave none (a trainer's own defaults)."""
        return replace(self, defaults={**self.defaults, **defaults})

    def argv(self) -> tuple[str, ...]:
        """What swift's entry point receives: the config file's arguments first, then the command line's.
        With a KeyValueSpelling, the overrides alone (the trainer reads its config file itself)."""
        if self.spelling is not None:
            spelt = (self.spelling.token(normalize_key(flag), values) for flag, values in self.items)
            return tuple(token for token in spelt if token is not None)
        out: list[str] = list(self.config_argv)
        for flag, values in self.items:
            out.append(flag)
            out.extend(values)
        return tuple(out)


def is_config_file(arg: str) -> bool:
    return arg.endswith(CONFIG_SUFFIXES) and not arg.startswith("-")


def parse_swift_argv(
    argv: tuple[str, ...] | list[str],
    config: Mapping[str, object] | None = None,
    options: frozenset[str] = frozenset(),
    kinds: Mapping[str, ValueKind] | None = None,
) -> SwiftArgs:
    """Read swift's argv. `config` is the parsed config file when argv[0] is one (see swift_config);
    `options`: swift's option names, so that a prefix of one reads as that option, as swift's parser does;
    `kinds`: what swift's parser takes as each option's value (`check_values`)."""
    args = list(argv)
    config_file = args.pop(0) if args and is_config_file(args[0]) else None
    items: list[tuple[str, tuple[str, ...]]] = []
    joined: set[int] = set()
    for index, arg in enumerate(args):
        if arg == "--":  # argparse's end of options: swift leaves it and every word after it over
            items.extend((word, ()) for word in args[index:])
            break
        if arg.startswith("--") and len(arg) > 2:
            flag, eq, value = arg.partition("=")
            if eq:
                joined.add(len(items))
            items.append((flag, (value,) if eq else ()))
        elif items:
            flag, values = items[-1]
            items[-1] = (flag, (*values, arg))
        else:
            items.append((arg, ()))  # a stray positional; swift reports it, we pass it through unchanged
    config_values: dict[str, str] = {}
    config_env: dict[str, str] = {}
    config_argv: list[str] = []
    for key, raw in (config or {}).items():
        if key == "ENV":  # swift pops it, sets each KEY: value not already set, and takes no other shape
            if raw and not isinstance(raw, Mapping):
                raise SafeSftError(
                    f"the config file's ENV is {json.dumps(raw, default=str)[:40]}, not a mapping (swift stops on it)",
                    "write ENV: with one `NAME: value` line under it for each variable",
                )
            config_env = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
            continue
        config_values[option_key(str(key), options)] = _config_value_text(raw)
        config_argv.append(f"--{key}")
        if isinstance(raw, list):  # swift's own expansion (swift/cli/main.py), token for token
            config_argv.extend(str(item) for item in raw)
        elif isinstance(raw, dict):
            config_argv.append(json.dumps(raw, ensure_ascii=False))
        else:
            config_argv.append(str(raw))
    return SwiftArgs(
        tuple(items),
        config_file,
        config_values,
        config_env,
        tuple(config_argv),
        options=options,
        kinds=kinds or {},
        joined=frozenset(joined),
    )


def _config_value_text(value: object) -> str:
    """A config file's value as the text swift's parser receives (swift/cli/main.py writes a mapping as JSON)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def unknown_flag_warning(flag: str, options: frozenset[str], command: str = "swift sft") -> str:
    """One line for an option the trainer (`command`) does not have: what an earlier ms-swift's option is
    now (launcher.plan.swift_renames), else the options it is closest to."""
    import difflib  # only where a flag is unknown: the plan's start-up stays lean

    key = normalize_key(flag)
    now = EARLIER_OPTIONS.get(key) if command.startswith("swift sft") else None
    if now is not None and now.split()[0].lstrip("-") in options:
        meant = f" (an earlier ms-swift's option: write {now})"
    else:
        prefixed = sorted(o for o in options if o.startswith(key))  # an ambiguous prefix: argparse refuses it
        near = prefixed[:3] or difflib.get_close_matches(key, options, n=1, cutoff=0.75)
        hint = " or ".join(f"--{name}" for name in near)
        meant = f" (did you mean {hint}?)" if hint else ""
    return f"{flag} is no option of {command}{meant}: swift stops on it unless --ignore_args_error true is given"
