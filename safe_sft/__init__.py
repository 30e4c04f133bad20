"""The `safe-sft` command's entry: launcher.cli.main, with safe-sft's own `launcher` package.

safe-sft's code is the package `launcher`. A project's own launcher.py, or launcher/ folder, in a folder on
PYTHONPATH (the working directory, with the common PYTHONPATH=.) comes before it on sys.path and hides it:
every command died on "No module named 'launcher.cli'" where `swift sft` runs. The front process imports
no code of the user's (swift imports plugins in the training processes, which run safe-sft's workers by
their path and keep the user's PYTHONPATH as it is), so the folders that hold another `launcher` leave
this process's sys.path before the import.
"""

from __future__ import annotations

import sys
from pathlib import Path

OURS = (Path(__file__).resolve().parent.parent / "launcher").resolve()


def _hides_ours(entry: str) -> bool:
    folder = Path(entry or ".")
    try:
        other = folder / "launcher"
        if other.resolve() == OURS:
            return False
        return (folder / "launcher.py").is_file() or other.is_dir() or (folder / "launcher.pyc").is_file()
    except OSError:
        return False


def main() -> None:
    sys.path[:] = [entry for entry in sys.path if not _hides_ours(entry)]
    try:
        from launcher.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:  # Ctrl-C before the CLI's own handling is in place: its modules still loading
        sys.stderr.write("safe-sft: aborted\n")
        raise SystemExit(130) from None
