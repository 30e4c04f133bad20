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


def test_a_symlink_that_leads_nowhere_is_named_with_its_target(tmp_path: Path) -> None:
    """A purged scratch dir behind a link, and a loop: swift's makedirs fails on both after torchrun started."""
    (tmp_path / "out").symlink_to("/scratch/gone/outputs")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    gone = probe_disk(tmp_path / "out")
    assert gone.problem == f"{tmp_path / 'out'} is a symlink that leads nowhere (/scratch/gone/outputs)"
    assert (
        probe_disk(tmp_path / "a" / "run").problem
        == f"{tmp_path / 'a'} is a symlink that leads nowhere ({tmp_path / 'b'})"
    )


def test_a_fifo_in_the_way_is_called_a_fifo(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "out")
    assert probe_disk(tmp_path / "out" / "run").problem == f"{tmp_path / 'out'} is a FIFO, not a directory"
