"""The swift backend: `swift sft`'s argv and YAML/JSON config, swift's sft entry under @record
(launcher/worker.py). Today's behaviour: every knob of the ladder, swift's v<N>-<time> run dirs. An option
is read as swift's parser reads it, an unambiguous prefix included, and a value swift's parser would not
convert (a number, a truthy word, a Literal field's choice) is refused before anything starts
(swift_options.txt holds the names and their kinds of value)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from launcher.backends.base import WORKER_DIR, Backend, BackendArgs, read_option_table
from launcher.backends.swift_models import SwiftModels, installed_swift_like, swift_models
from launcher.errors import SafeSftError
from launcher.plan.swift_args import SwiftArgs, ValueKind, parse_swift_argv

OPTIONS_FILE = Path(__file__).with_name("swift_options.txt")  # scripts/swift_options.py writes it


@cache
def _table() -> tuple[str, dict[str, tuple[str, ...]]]:
    return read_option_table(OPTIONS_FILE)


@cache
def _option_table() -> dict[str, ValueKind]:
    """Each option's name and what swift's parser takes as its value, as the file lists them."""
    return {name: ValueKind(kind[0], kind[1:]) for name, kind in _table()[1].items()}


@cache
def swift_options() -> frozenset[str]:
    """`swift sft`'s option names (ms-swift 4.6), read without importing swift."""
    return frozenset(_option_table())


def table_version() -> str:
    """The ms-swift version the option table was written from ("4.6.0"), from its comment line."""
    found = re.search(r"ms-swift ([\d.]+)", _table()[0])
    return found.group(1) if found else ""


def swift_value_kinds() -> Mapping[str, ValueKind]:
    """What swift's parser takes as each option's value: int, float, bool, text, flag, a Literal's choices."""
    return _option_table()


# `swift`'s other commands (swift/cli/main.py's ROUTE_MAPPING, ms-swift 4.6): safe-sft runs sft alone.
OTHER_SWIFT_COMMANDS = frozenset(
    {"pt", "infer", "merge-lora", "web-ui", "deploy", "rollout", "rlhf", "sample", "export", "eval", "app"}
)


def without_command_word(argv: list[str]) -> list[str]:
    """`swift sft ARGS` with `swift` swapped for safe-sft keeps its `sft`: that word, or `swift sft`, before
    swift's arguments is dropped, as `swift` itself takes it. Another swift command is refused (swift sft has
    no positional argument but a config file, so the word cannot be anything else)."""
    words = argv[1:] if argv[:1] == ["swift"] else argv
    first = words[0].replace("_", "-") if words else ""
    if first == "sft":
        return words[1:]
    if first in OTHER_SWIFT_COMMANDS:
        raise SafeSftError(
            f"safe-sft runs `swift sft`, not `swift {words[0]}`",
            f"run `swift {words[0]} ...` itself; for fine-tuning, give safe-sft what you would give `swift sft`",
        )
    return argv


def read(argv: list[str]) -> BackendArgs:
    from launcher.swift_config import load_swift_config

    argv = without_command_word(argv)
    if not argv:
        raise SafeSftError("no swift arguments given", "use it as `safe-sft --model M --dataset D ...`")
    swift = parse_swift_argv(argv, load_swift_config(argv), swift_options(), swift_value_kinds())
    stray = next((flag for flag, _ in swift.items if not flag.startswith("--")), None)
    if stray is not None and not swift.get_bool("ignore_args_error", False):
        raise SafeSftError(
            f"{stray!r} is no swift argument: swift sft takes no word before its options but a config file "
            "(.yaml, .yml or .json, in lower case), and stops on it in every rank",
            _stray_fix(stray, argv),
        )
    check_tuner(swift)
    check_registered_names(swift)
    return BackendArgs((), swift)


# a backend's command word where swift's arguments begin (`safe-sft plan torchrun train.py`): its backend
BACKEND_WORDS = {"torchrun": "torchrun", "llamafactory": "llamafactory", "llamafactory-cli": "llamafactory"}


def _stray_fix(stray: str, argv: list[str]) -> str:
    backend = BACKEND_WORDS.get(stray) if argv[:1] == [stray] else None
    if backend is not None:
        rest = " ".join([word for word in argv[1:] if word != "train" and not word.startswith("-")][:1])
        command = "llamafactory train" if backend == "llamafactory" else backend
        return (
            f"run another trainer as `safe-sft {command} [safe-sft's options] {rest} ...`, safe-sft's options after "
            f"`{command}`, not before it; plan it with `safe-sft plan --backend {backend} {rest} ...`"
        )
    if argv[:1] == [stray] == ["swift"]:
        return "drop `swift`: safe-sft takes what `swift sft` takes (`safe-sft sft ARGS` reads the same)"
    return "drop it, or write the option it belongs to (swift's options start with --)"


# swift's own tuners (ms-swift 4.6: swift/arguments/base_args/base_args.py get_supported_tuners, which adds
# swift/tuner_plugin/mapping.py's tuners_map); tests/stack/test_swift_options_real.py holds it to swift's.
SWIFT_TUNERS = frozenset(
    {"lora", "full", "longlora", "adalora", "llamapro", "adapter", "vera", "boft", "fourierft", "reft", "bone",
     "ia3", "lora_llm", "dummy"}
)  # fmt: skip


def check_tuner(swift: SwiftArgs) -> None:
    """swift's parser takes any --tuner_type and stops on an unknown one in every rank only once the model has
    loaded (prepare_adapter's ValueError); the plan would have estimated it as LoRA. An --external_plugins
    file may register more tuners, so with one given any name passes."""
    tuner = swift.get("tuner_type")
    if tuner is None or tuner in SWIFT_TUNERS or swift.get("external_plugins"):
        return
    near = difflib.get_close_matches(tuner, sorted(SWIFT_TUNERS), n=1)
    meant = f" (did you mean {near[0]}?)" if near else ""
    raise SafeSftError(
        f"--tuner_type {tuner!r} is not one of swift's tuners{meant}",
        f"use one of {', '.join(sorted(SWIFT_TUNERS))}; a tuner of your own comes with --external_plugins",
    )


def _optim_choices() -> tuple[str, ...]:
    optim = swift_value_kinds().get("optim")
    return optim.choices if optim else ()


def swift_plugins(swift: SwiftArgs) -> bool:
    """The run imports files of the user's into swift, which may register model types, templates and names
    of their own: --external_plugins, --custom_register_path."""
    return bool(swift.get("external_plugins") or swift.get("custom_register_path"))


def _registered(option: str, value: str, models: SwiftModels) -> bool:
    """swift's registry takes the value for the option; a --loss_scale as swift composes it: a base strategy
    alone, or `[BASE+]NAME[+NAME...]`."""
    if option != "loss_scale":
        return value in models.registered[option]
    parts = value.split("+")
    if parts[0] in models.loss_scale_bases:
        parts = parts[1:]
    return all(part in models.registered[option] for part in parts)


def _unregistered(option: str, value: str, models: SwiftModels) -> SafeSftError:
    names = models.registered[option]
    near = difflib.get_close_matches(value, names, n=1)
    meant = f" (did you mean {near[0]}?)" if near else ""
    how, form, torch = " with a bare KeyError", "", ""
    if option == "loss_scale":  # it ends on a TypeError, not its name
        how, form = "", f" (after one of {', '.join(models.loss_scale_bases)} and +, or joined by +)"
    if option == "optimizer" and value in _optim_choices():
        torch = f"; torch's optimizer is --optim (--optim {value})"
    return SafeSftError(
        f"--{option} {value!r} is no name swift sft {models.version} registers for it{meant}: swift stops "
        f"on it{how} in every rank once the model has loaded",
        f"use one of {', '.join(names)}{form}{torch}; a name of your own comes with --external_plugins",
    )


def check_registered_names(swift: SwiftArgs) -> None:
    """swift's parser takes any text for --optimizer, --callbacks, --loss_type, --eval_metric and --loss_scale,
    and looks each name up in its registry only once the model has loaded, stopping every rank there. The
    names are read from ms-swift 4.6 (swift_models.txt); a plugin file (swift_plugins) may register more, and
    another ms-swift version may have others, so with either any name passes."""
    models = swift_models()
    if swift_plugins(swift) or installed_swift_like(models.version) is None:
        return
    for option in models.registered:
        for value in swift.get_values(option):
            if not _registered(option, value, models):
                raise _unregistered(option, value, models)


SWIFT = Backend(
    name="swift",
    command="safe-sft",
    worker=WORKER_DIR / "worker.py",
    read=read,
    trainer=("swift", "ms-swift"),
    deepspeed_names=True,
    lexical_paths=True,
)
