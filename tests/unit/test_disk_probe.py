"""Where checkpoints would go: the probe names a place nothing can be written, and passes a plain dir."""

from pathlib import Path

import pytest

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


def test_a_full_disk_with_room_in_the_output_dir_names_the_disk_that_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A datasets cache on a full disk had been reported "the disk is full ... (the output dir has 60.2 GiB
    free)", naming no other disk (hostile45disk F6)."""
    from launcher.probe import disk

    out, cache, data = tmp_path / "out", tmp_path / "cache", tmp_path / "data"
    for folder in (out, cache, data):
        folder.mkdir()
    room = {out: 60 << 30, cache: 0, data: 0}
    monkeypatch.setattr(disk, "disk_free", lambda path: room.get(disk.nearest_existing(path), 60 << 30))
    monkeypatch.setattr(disk, "free_files", lambda path: None)
    env = {"HOME": str(tmp_path), "HF_DATASETS_CACHE": str(cache)}
    said = disk.which_disk_is_full(out, ["OSError: Not enough disk space. Needed: Unknown size"], env)
    assert said == f"{out} has 60.0 GiB free; {cache} has 0 B free: that disk is the full one"
    named = disk.which_disk_is_full(out, [f"OSError: [Errno 28] No space left on device: '{data}/x.arrow'"], {})
    assert named.endswith(f"; {data} has 0 B free: that disk is the full one")
    room[cache] = room[data] = 60 << 30
    another = ": the full disk is another one (a cache the ranks write to: HF_HOME, HF_DATASETS_CACHE, "
    assert disk.which_disk_is_full(out, [], env).endswith(another + "MODELSCOPE_CACHE, TMPDIR)")
    room[out] = 0  # the output dir's own disk: nothing more to say
    assert disk.which_disk_is_full(out, [], env) == f"{out} has 0 B free"
