"""Load a swift YAML/JSON config file (the optional first swift argument) into a mapping, or a LLaMA-Factory
one as OmegaConf reads it.

The one place that reads such a file; PyYAML comes with ms-swift and is imported only when a YAML
config is actually given. swift reads YAML with PyYAML's safe loader; LLaMA-Factory with OmegaConf's, which
also takes `1e-4` as a number (PyYAML: text), leaves dates as text and stops on a key given twice
(`omegaconf=True`, and `omegaconf_scalar` for its `key=value` overrides).
"""

from __future__ import annotations

import json
import re
import stat
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

from launcher.errors import SafeSftError
from launcher.plan.swift_args import is_config_file

# YAML 1.1's floats and the ones OmegaConf adds: an exponent without a point (1e-4, 2E5)
_OMEGACONF_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.VERBOSE,
)


@cache
def _omegaconf_loader() -> Any:
    """PyYAML's safe loader read as OmegaConf reads YAML."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            # a YAML merge key (`<<: *defaults`) is no key of its own: the mapping takes the merged keys, and its
            # own win over them (OmegaConf's loader, too, counts repeats among the keys written, then merges)
            written = [key for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge"]
            keys = [self.construct_object(key, deep=True) for key in written]
            try:
                counts = Counter(keys)
            except TypeError:  # a list or mapping as a key: PyYAML's own error names it
                return super().construct_mapping(node, deep=deep)
            twice = sorted({str(key) for key, count in counts.items() if count > 1})
            if twice:
                raise yaml.constructor.ConstructorError(None, None, f"{', '.join(twice)} given twice", node.start_mark)
            return super().construct_mapping(node, deep=deep)

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _OMEGACONF_FLOAT, list("-+0123456789."))
    Loader.yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in Loader.yaml_implicit_resolvers.items()
    }
    return Loader


def omegaconf_scalar(text: str) -> object:
    """A `key=value` override's value as OmegaConf's command line reads it: `8` a number, `true` a bool."""
    import yaml

    try:
        return yaml.load(text, Loader=_omegaconf_loader())
    except yaml.YAMLError:
        return text


MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_VALUES = 100_000  # a config of arguments holds hundreds; YAML aliases can make 9**9 of 0.5 KB


def _larger_than(value: object, budget: int) -> bool:
    """Whether `value`, with every alias expanded (as reading its values into arguments expands them), holds
    more than `budget` values. Walked with a stack and stopped at the budget: a "billion laughs" file's
    shared lists are never expanded."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > budget:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set):
            stack.extend(item)
    return False


def load_swift_config(argv: list[str] | tuple[str, ...], omegaconf: bool = False) -> dict[str, object] | None:
    if not argv or not is_config_file(argv[0]):
        return None
    path = Path(argv[0])
    try:
        facts = path.stat()
        if not stat.S_ISREG(facts.st_mode) and not stat.S_ISDIR(facts.st_mode):  # a FIFO would block for ever
            raise SafeSftError(f"config file {path} is not a regular file", "give the config file itself")
        size = facts.st_size
        if size > MAX_CONFIG_BYTES:  # parsing 3 MB of YAML alone takes PyYAML 8 s
            raise SafeSftError(
                f"config file {path} is {size / 2**20:.1f} MiB: a config of arguments is a few KiB",
                "give the config file itself (one `key: value` per argument), not a dataset or a log",
            )
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SafeSftError(f"cannot read config file {path}: {err.strerror}", "check the path") from None
    except UnicodeDecodeError as err:
        raise SafeSftError(
            f"config file {path} is not text (byte {err.start} is not UTF-8)", "give a YAML or JSON file"
        ) from None
    if path.suffix == ".json":
        try:
            loaded = json.loads(text)
        except ValueError as err:
            raise SafeSftError(f"config file {path} is not valid JSON ({err})", "fix the JSON") from None
        except RecursionError:
            raise SafeSftError(
                f"config file {path} nests too deep to read", "write one `key: value` per argument"
            ) from None
    else:
        try:
            import yaml
        except ImportError:
            raise SafeSftError(
                f"config file {path} is YAML but PyYAML is not installed", "pip install pyyaml"
            ) from None
        try:
            loaded = yaml.load(text, Loader=_omegaconf_loader()) if omegaconf else yaml.safe_load(text)
        except yaml.YAMLError as err:
            where = getattr(err, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise SafeSftError(f"config file {path} is not valid YAML{at}: {problem}", "fix the YAML") from None
        except RecursionError:
            raise SafeSftError(
                f"config file {path} nests too deep to read", "write one `key: value` per argument"
            ) from None
    if _larger_than(loaded, MAX_CONFIG_VALUES):
        raise SafeSftError(
            f"config file {path} expands to more than {MAX_CONFIG_VALUES:,} values (YAML anchors that repeat "
            "each other, or nesting no argument needs)",
            "write each argument's value out, without nested anchors",
        )
    if not isinstance(loaded, dict):
        examples = "LLaMA-Factory's examples/train_lora" if omegaconf else "swift's examples"  # omegaconf: its reader
        raise SafeSftError(
            f"config file {path} does not hold a mapping of arguments",
            f"write one `key: value` line per argument, as {examples} do",
        )
    return loaded
