"""What a rank's Python sees under safe-sft, held to what plain `torchrun swift/cli/sft.py` gives it.

swift's plugin file (`--external_plugins`) records the rank's sys.path when swift imports it, in each rank:
- as plain swift runs it, swift/cli is on sys.path and safe-sft's own folder is not (its model.py,
  errors.py must not answer a trainer's or a plugin's imports);
- with PYTHONSAFEPATH=1 (Python 3.11's -P, which hardened images set) Python puts no script folder on
  sys.path: the ranks train, where safe-sft's worker had stopped every rank on its own import.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import launcher
from tests.stack.test_supervise_real import swift_args

PLUGIN = """
import json, os, sys
with open(os.environ["PATHS_OUT"] + f"-{os.environ.get('RANK', '0')}.json", "w") as out:
    json.dump(sys.path, out)
"""


@pytest.mark.parametrize("safe_path", [False, True])
def test_a_rank_has_swifts_script_folder_first_never_safe_sfts(
    tiny: dict[str, object], tmp_path: Path, safe_path: bool
) -> None:
    plugin = tmp_path / "record_path.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "out"
    args = swift_args(tiny, out, max_steps=2, save_steps=2, external_plugins=plugin)
    at = args.index("--callbacks")
    del args[at : at + 2]  # the fault plugin's callback: not imported here
    env = {**os.environ, "NPROC_PER_NODE": "1", "PATHS_OUT": str(tmp_path / "paths")}
    env.pop("PYTHONSAFEPATH", None)
    if safe_path:
        env["PYTHONSAFEPATH"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "--grace-period", "10", *args],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    paths = json.loads((tmp_path / "paths-0.json").read_text())
    ours = str(Path(launcher.__file__).resolve().parent)
    assert ours not in [str(Path(p).resolve()) for p in paths if p]
    swift = importlib.util.find_spec("swift")
    assert swift is not None and swift.origin is not None
    swift_cli = str(Path(swift.origin).parent / "cli")
    assert (swift_cli in paths) is not safe_path, paths[:4]
