"""A hook that runs a function on a module right after it is first imported, by whoever imports it.

Contract: standard library only, and importable by path: it runs inside training processes that may not
have the launcher package on their path (launcher/worker.py loads it beside itself;
tests/stack/hf_rank_hooks/sitecustomize.py from the repository) and imports nothing at start-up, so a
process that never imports the module pays nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any


class AfterImport(importlib.abc.MetaPathFinder):
    """On `sys.meta_path`: when `name` is first imported, load it as usual, then call `then(module)`.
    It removes itself as it fires, so it fires once."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module, then = spec.loader.exec_module, self.then

        def exec_then(module: Any) -> None:
            exec_module(module)
            then(module)

        spec.loader.exec_module = exec_then  # type: ignore[method-assign]
        return spec


def after_import(name: str, then: Callable[[Any], None]) -> None:
    """Call `then(module)` right after `name` is first imported."""
    sys.meta_path.insert(0, AfterImport(name, then))
