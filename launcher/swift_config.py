"""Load a swift YAML/JSON config file (the optional first swift argument) into a mapping.

The one place that reads such a file; PyYAML comes with ms-swift and is imported only when a YAML
config is actually given.
"""

from __future__ import annotations

import json
from pathlib import Path

from launcher.errors import SafeSftError
from launcher.plan.swift_args import is_config_file


def load_swift_config(argv: list[str] | tuple[str, ...]) -> dict[str, object] | None:
    if not argv or not is_config_file(argv[0]):
        return None
    path = Path(argv[0])
    try:
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
    else:
        try:
            import yaml
        except ImportError:
            raise SafeSftError(
                f"config file {path} is YAML but PyYAML is not installed", "pip install pyyaml"
            ) from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as err:
            where = getattr(err, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise SafeSftError(f"config file {path} is not valid YAML{at}: {problem}", "fix the YAML") from None
    if not isinstance(loaded, dict):
        raise SafeSftError(f"config file {path} does not hold a mapping of arguments", "see swift's examples")
    return loaded
