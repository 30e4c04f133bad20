"""The open-files soft limit is raised to the hard one before the ranks start (launcher/run/open_files.py)."""

from __future__ import annotations

import resource
import subprocess
import sys


def _in_child(soft: int, hard: int) -> tuple[int, int]:
    """raise_open_files in a process started with these limits: (soft before, soft after)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    code = "from launcher.run.open_files import raise_open_files; print(*raise_open_files())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limit, check=True)
    before, after = done.stdout.split()
    return int(before), int(after)


def test_a_soft_limit_below_the_hard_one_is_raised_to_it() -> None:
    """A shell's 1024 under a hard 4096: the ranks get 4096 (hostile47env F5/F6: ulimit -n low)."""
    assert _in_child(256, 4096) == (256, 4096)


def test_a_hard_limit_that_low_stays_as_it_is() -> None:
    """`ulimit -n 64` sets both: nothing can be raised without privilege, and nothing is."""
    assert _in_child(64, 64) == (64, 64)


def test_safe_sfts_own_files_out_of_descriptors_is_named_as_that_not_as_a_disk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`ulimit -n 12`: the summary said `could not read or write <dir>: Too many open files (<dir> has 74 GiB
    free)`, a disk's words with no fix (hostile47env F6)."""
    import errno

    from launcher.cli import own_io_failure

    said = own_io_failure(OSError(errno.EMFILE, "Too many open files"), tmp_path)
    assert said.startswith(f"safe-sft could not open {tmp_path}: too many open files (ulimit -n is ")
    assert "raise the open-files limit (ulimit -n 65536" in said and " free)" not in said
    full = own_io_failure(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "report.json")), tmp_path)
    assert full.startswith(f"safe-sft could not read or write {tmp_path / 'report.json'}: No space left on device (")
