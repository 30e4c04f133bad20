"""The installed `safe-sft` command: it runs where a project's own `launcher` comes first on sys.path
(safe_sft/__init__.py), and the package list in pyproject.toml holds every package of the tree, so a wheel
(`pip install safe-sft`, not only an editable install) carries them all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
COMMAND = Path(sys.executable).with_name("safe-sft")


@pytest.mark.parametrize("theirs", ["launcher.py", "launcher/__init__.py", "launcher/cli.py"])
def test_a_projects_own_launcher_on_pythonpath_does_not_hide_safe_sfts(tmp_path: Path, theirs: str) -> None:
    """A research repo's launcher.py (or launcher/ package) in the working directory, with PYTHONPATH=.:
    `swift sft` runs there, and so must safe-sft."""
    assert COMMAND.is_file(), f"{COMMAND} is not installed: run `bash scripts/setup.sh`"
    (tmp_path / theirs).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / theirs).write_text("raise SystemExit('the project own launcher was imported')\n")
    env = {**os.environ, "PYTHONPATH": "."}
    done = subprocess.run([str(COMMAND), "--version"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "safe-sft" in done.stdout and "Traceback" not in done.stderr


def test_the_package_list_holds_every_package_of_the_tree() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {
        ".".join(init.parent.relative_to(REPO).parts)
        for top in ("launcher", "safe_sft")
        for init in (REPO / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert tree <= listed, f"not in pyproject.toml's packages: {sorted(tree - listed)}"


def test_ctrl_c_while_the_cli_loads_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C in the first tens of milliseconds lands in an import: the same line and exit as later ones."""
    import types

    import safe_sft

    class Loading(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "launcher.cli", Loading("launcher.cli"))
    with pytest.raises(SystemExit) as stopped:
        safe_sft.main()
    assert stopped.value.code == 130
    assert capsys.readouterr().err == "safe-sft: aborted\n"
