"""What a rank's Python sees under safe-sft, held to what plain `torchrun swift/cli/sft.py` gives it.

swift's plugin file (`--external_plugins`) records the rank's sys.path when swift imports it, in each rank:
- as plain swift runs it, swift/cli is on sys.path and safe-sft's own folder is not (its model.py,
  errors.py must not answer a trainer's or a plugin's imports);
- with PYTHONSAFEPATH=1 (Python 3.11's -P, which hardened images set) Python puts no script folder on
  sys.path: the ranks train, where safe-sft's worker had stopped every rank on its own import.

And what real torchrun reads of a rank that failed on a full disk: no empty error.json to stop on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
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


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Path]:
    """A real filesystem with no space left: a 1 MiB tmpfs, filled."""
    if os.geteuid() != 0:
        pytest.fail("CANNOT RUN: mounting a tmpfs needs root")
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    with (mount / "fill").open("wb") as handle, pytest.raises(OSError):
        while True:
            handle.write(b"\0" * 65536)
            handle.flush()
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize("worker", ["worker", "hf_worker"])
def test_a_rank_failing_on_a_full_disk_leaves_torchrun_no_empty_error_file(
    full_fs: Path, tmp_path: Path, worker: str
) -> None:
    """torchelastic's @record opens the rank's error.json on the full disk and cannot write it; real torchrun
    then stopped on the empty file with a JSONDecodeError traceback of its own over the rank's failure."""
    if worker == "hf_worker":
        script = tmp_path / "boom.py"
        script.write_text('raise ValueError("boom in the script")\n')
        argv = [str(script)]
    else:
        (tmp_path / "empty-model").mkdir()
        argv = ["--model", str(tmp_path / "empty-model"), "--dataset", "x.jsonl"]  # swift raises ValueError
    worker_file = Path(launcher.__file__).with_name(f"{worker}.py")
    log_dir = full_fs / "torchelastic"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--log-dir", str(log_dir),
         str(worker_file), *argv],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONSAFEPATH": "1"},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert "ValueError" in output and "No space left on device" in output  # the rank's own failure is shown
    assert "JSONDecodeError" not in output, output[-3000:]
    assert "error_file: <N/A>" in output
    assert not list(log_dir.rglob("error.json"))
