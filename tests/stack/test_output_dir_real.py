"""An output dir nothing can be written to, on real filesystems: a read-only tmpfs, a file in the way.

The run path refuses before anything starts (exit 2, one line, nothing created, nothing changed), the
plan warns, and doctor measures and names the output dir's own filesystem, not the current dir's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CPU = ["--use_cpu", "true"]


def safe_sft(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _mount_tmpfs(where: Path, options: str) -> None:
    if os.geteuid() != 0:
        pytest.fail("CANNOT RUN: mounting a tmpfs needs root")
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)


@pytest.fixture
def read_only_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "ro"
    _mount_tmpfs(mount, "ro,size=16m")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    _mount_tmpfs(mount, "size=64m")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_run_path_refuses_an_output_dir_on_a_read_only_filesystem(read_only_fs: Path) -> None:
    out = read_only_fs / "out"
    result = safe_sft("--model", "m", *CPU, "--output_dir", str(out))
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("safe-sft: error:")]
    assert errors == [f"safe-sft: error: --output_dir {out}: {read_only_fs} is on a read-only filesystem"]
    assert "Traceback" not in result.stderr and not out.exists()
    plan = safe_sft("plan", "--model", "m", *CPU, "--output_dir", str(out))
    assert plan.returncode == 0 and f"{read_only_fs} is on a read-only filesystem" in plan.stdout  # a warning


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "full"
    _mount_tmpfs(mount, "size=1m")
    with (mount / "fill").open("wb") as handle, pytest.raises(OSError):  # until the disk is full
        while True:
            handle.write(b"\0" * 65536)
            handle.flush()
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_run_path_refuses_an_output_dir_on_a_full_disk_before_anything_starts(full_fs: Path) -> None:
    """Where safe-sft cannot write even its report, the trainer cannot write a checkpoint: the run had
    started (the model loaded), failed with disk_full, and its summary named a report never written."""
    out = full_fs / "out"
    result = safe_sft("--model", "m", *CPU, "--output_dir", str(out))
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("safe-sft: error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], result.stderr
    assert "nothing was started" in result.stderr and "Traceback" not in result.stderr
    assert not list(out.glob("safe-sft/*/attempt-*"))  # no attempt began


def test_run_path_refuses_an_output_dir_that_is_a_file(tmp_path: Path) -> None:
    user_file = tmp_path / "notes.txt"
    user_file.write_text("mine\n")
    for out in (user_file, user_file / "sub"):
        result = safe_sft("--model", "m", *CPU, "--output_dir", str(out))
        assert result.returncode == 2, result.stderr[-2000:]
        assert f"safe-sft: error: --output_dir {out}: {user_file} is a file, not a directory" in result.stderr
        assert "Traceback" not in result.stderr
    assert user_file.read_text() == "mine\n"


def test_doctor_measures_the_output_dirs_filesystem_not_the_current_dir(small_fs: Path) -> None:
    out = small_fs / "run"
    result = safe_sft("doctor", "--model", "m", "--output_dir", str(out))
    disk = next(line for line in result.stdout.splitlines() if " disk " in line)
    assert disk.startswith("[fail] disk") and f"64.0 MiB free at {small_fs}" in disk, result.stdout
    assert safe_sft("doctor", "--check-dir", str(out)).stdout.count(f"64.0 MiB free at {small_fs}") == 1


def test_doctor_reports_a_read_only_filesystem_as_such(read_only_fs: Path) -> None:
    result = safe_sft("doctor", "--output_dir", str(read_only_fs / "out"))
    disk = next(line for line in result.stdout.splitlines() if " disk " in line)
    assert disk.startswith(f"[fail] disk        {read_only_fs} is on a read-only filesystem (")
    assert result.returncode == 1


def test_doctor_warns_when_nproc_is_far_above_the_usable_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    result = safe_sft("doctor", env={"NPROC_PER_NODE": str(cores * 8)})
    line = next(line for line in result.stdout.splitlines() if " cpu_cores " in line)
    assert line.startswith(f"[warn] cpu_cores   NPROC_PER_NODE={cores * 8} with {cores} usable CPU core(s)")
    bad = safe_sft("doctor", env={"NPROC_PER_NODE": "lots"})
    assert bad.returncode == 2 and "NPROC_PER_NODE='lots' is not an integer" in bad.stderr


def test_a_rerun_into_a_dotdot_past_a_symlink_never_saves_over_the_checkpoints_swift_wrote_there(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """`--output_dir lnk/../out` is ./out to swift (os.path.abspath on the text), another dir to the file system
    past the symlink: safe-sft guarded that one while a rerun with --add_version false saved over the
    checkpoints in ./out (hostile45disk F1). The rerun now goes to a fresh dir; the first run's checkpoints stay."""
    from tests.stack.test_supervise_real import fault_env, safe_sft, swift_args

    (tmp_path / "real" / "sub").mkdir(parents=True)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "lnk").symlink_to(tmp_path / "real" / "sub")
    env = {**fault_env(tmp_path), "NPROC_PER_NODE": "1"}
    args = swift_args(tiny, Path("lnk/../out"), max_steps=4, save_steps=2, add_version="false")
    first = safe_sft(args, env, cwd=cwd)
    assert first.returncode == 0, first.stderr[-3000:]
    saved = (cwd / "out" / "checkpoint-4" / "model.safetensors").read_bytes()
    again = safe_sft([*args, "--learning_rate", "1e-3"], env, cwd=cwd)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "it would save over" in again.stderr
    assert (cwd / "out" / "checkpoint-4" / "model.safetensors").read_bytes() == saved
    assert not (tmp_path / "real" / "out").exists()  # safe-sft's records beside swift's run, not elsewhere


def test_a_full_records_folder_never_ends_a_training_swift_would_finish(
    tiny: dict[str, object], tmp_path: Path
) -> None:
    """safe-sft's own records in a folder that fills: its worker had died writing swift-args.json (rank 0) and
    every rank's on_save raised writing timing.json, ending runs plain swift finishes (hostile45disk F2). They
    now say what they could not write, and training goes on."""
    from tests.stack.test_supervise_real import fault_env, swift_args
    from tests.stack.test_supervise_real import safe_sft as run_safe_sft

    out = tmp_path / "out"
    out.mkdir()
    _mount_tmpfs(out / "safe-sft", "size=48k")
    try:
        env = {**fault_env(tmp_path), "NPROC_PER_NODE": "1"}
        result = run_safe_sft(swift_args(tiny, out, max_steps=4, save_steps=2, add_version="false"), env)
    finally:
        subprocess.run(["umount", str(out / "safe-sft")], check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "could not write" in result.stderr and "training goes on" in result.stderr
    assert (out / "checkpoint-4" / "trainer_state.json").is_file()
