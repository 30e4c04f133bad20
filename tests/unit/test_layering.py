"""The architecture's one-way imports: the pure core never touches the process or the clock."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "launcher"
PURE = sorted([*(ROOT / "plan").glob("*.py"), *(ROOT / name for name in ("model.py", "units.py", "doctor.py"))])
PURE.append(ROOT / "masking.py")
PURE.append(ROOT / "run" / "classify.py")
FORBIDDEN = {"os", "subprocess", "psutil", "pynvml", "time", "socket", "resource", "signal"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_modules_do_no_io(path: Path) -> None:
    assert not imports(path) & FORBIDDEN


def test_model_imports_nothing_internal() -> None:
    assert "launcher" not in imports(ROOT / "model.py")
