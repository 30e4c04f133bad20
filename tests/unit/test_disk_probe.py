"""Where checkpoints would go: the probe names a place nothing can be written, and passes a plain dir."""

from pathlib import Path

from launcher.probe.disk import probe_disk


def test_a_dir_under_proc_is_named_a_kernel_filesystem() -> None:
    facts = probe_disk(Path("/proc/safe-sft-out"))
    assert facts.path == "/proc"
    assert facts.problem == "/proc is on a kernel filesystem (proc, sysfs), which holds no files"


def test_a_new_dir_under_a_writable_one_has_no_problem(tmp_path: Path) -> None:
    facts = probe_disk(tmp_path / "out" / "run")
    assert facts.path == str(tmp_path)
    assert facts.problem is None and facts.free_bytes is not None and facts.free_bytes > 0
