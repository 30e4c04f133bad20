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
    if path.suffix == ".json":
        loaded = json.loads(text)
    else:
        try:
            import yaml
        except ImportError:
            raise SafeSftError(
                f"config file {path} is YAML but PyYAML is not installed", "pip install pyyaml"
            ) from None
        loaded = yaml.safe_load(text)
    if not isinstance(loaded, dict):
        raise SafeSftError(f"config file {path} does not hold a mapping of arguments", "see swift's examples")
    return loaded
