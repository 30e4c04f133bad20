"""The output dir's lock: a live holder refuses, a dead one's lock is taken over, a clean end leaves none.

Real flocks and real processes (a holder in another Python process, killed with SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.errors import SafeSftError
from launcher.run.lock import Holder, acquire

REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from pathlib import Path
from launcher.run.lock import acquire
lock = acquire(Path(sys.argv[1]), "job-7")
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    first = acquire(tmp_path, None)
    with pytest.raises(SafeSftError) as refused:
        acquire(tmp_path, None)
    message = str(refused.value)
    assert str(tmp_path) in message
    assert f"pid {os.getpid()} on {socket.gethostname()}, started " in message
    first.release()
    again = acquire(tmp_path, None)
    assert again.stale is None  # released cleanly: no stale record
    again.release()


def test_a_live_process_holds_it_and_its_sigkill_leaves_a_stale_lock_to_take_over(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(SafeSftError) as refused:
            acquire(tmp_path, None)
        assert f"pid {holder.pid} on {socket.gethostname()}" in str(refused.value)
        assert "run id job-7" in str(refused.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    lock = acquire(tmp_path, None)
    assert lock.stale is not None and lock.stale.pid == holder.pid
    lock.release()


def test_the_lock_is_not_inherited_by_children(tmp_path: Path) -> None:
    """A training process left running after safe-sft died must not keep the output dir locked."""
    lock = acquire(tmp_path, None)
    # close_fds=False: only the descriptor's close-on-exec flag keeps it out of the child
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], close_fds=False)
    try:
        lock.fd, fd = -1, lock.fd
        os.close(fd)  # as if safe-sft were gone; the child lives on
        time.sleep(0.1)
        again = acquire(tmp_path, None)
        assert again.stale is not None and again.stale.pid == os.getpid()
        again.release()
    finally:
        child.kill()
        child.wait()


def test_without_file_locks_a_dead_holder_on_this_host_is_stale_and_another_hosts_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(37, "No locks available")  # ENOLCK, as on a filesystem mounted without locking

    monkeypatch.setattr(fcntl, "flock", no_locks)
    lock_file = tmp_path / "safe-sft" / "lock"
    lock_file.parent.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    lock_file.write_text(Holder(pid, socket.gethostname(), "2026-11-23T01:00:00+00:00").to_json())
    taken = acquire(tmp_path, None)
    assert taken.stale is not None and taken.stale.pid == pid
    taken.release()
    lock_file.write_text(Holder(pid, "other-host", "2026-11-23T01:00:00+00:00").to_json())
    with pytest.raises(SafeSftError, match="on other-host"):
        acquire(tmp_path, None)
    assert json.loads(lock_file.read_text())["host"] == "other-host"  # a refused run changes nothing


def test_an_unwritable_output_dir_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SafeSftError, match="cannot write to the output dir"):
        acquire(blocker / "out", None)


def test_a_file_where_safe_sft_keeps_its_records_is_named_not_the_output_dir(tmp_path: Path) -> None:
    """It had been "cannot write to the output dir ... File exists", with the fix to choose another one."""
    (tmp_path / "safe-sft").write_text("notes")
    with pytest.raises(SafeSftError) as err:
        acquire(tmp_path, None)
    assert (
        err.value.message
        == f"{tmp_path / 'safe-sft'} is a file: safe-sft keeps its records (lock, reports) in a folder of that name"
    )
    assert (tmp_path / "safe-sft").read_text() == "notes"  # left as it was


@pytest.mark.parametrize("text", ["garbage", "[1, 2]", '"text"', "[" * 2040 + "]" * 2040])
def test_a_damaged_lock_record_reads_as_none(text: str) -> None:
    """A record nested too deep raised a RecursionError traceback on the run path; garbage read as none."""
    from launcher.run.lock import _parse

    assert _parse(text) is None


def test_a_removed_lock_is_taken_again_so_a_second_run_is_still_refused(tmp_path: Path) -> None:
    """An flock holds the file, not its name: with the file removed, a second run would have started beside
    the first and saved over its checkpoints (hostile42sig F1)."""
    for removed in ("lock", "folder"):
        lock = acquire(tmp_path, "job-1")
        assert lock.retake() is None  # untouched
        if removed == "lock":
            lock.path.unlink()
        else:
            lock.path.unlink()
            lock.path.parent.rmdir()
        taken = f"safe-sft: warning: the lock {lock.path} was removed while this run held it; taken again"
        assert lock.retake() == taken
        with pytest.raises(SafeSftError, match="run id job-1"):
            acquire(tmp_path, None)
        lock.release()


def test_a_run_that_took_the_removed_lock_first_is_named_once(tmp_path: Path) -> None:
    lock = acquire(tmp_path, "job-1")
    lock.path.unlink()
    second = acquire(tmp_path, "job-2")  # it started in the window before the first took the lock again
    message = lock.retake()
    assert message is not None and "another safe-sft run" in message and "run id job-2" in message
    assert "stop one of them" in message
    assert lock.retake() is None  # said once
    second.release()
    lock.release()


def test_keep_watches_until_release(tmp_path: Path) -> None:
    lock = acquire(tmp_path, None)
    said: list[str] = []
    lock.keep(said.append, interval=0.02)
    lock.path.unlink()
    deadline = time.monotonic() + 5
    while not said and time.monotonic() < deadline:
        time.sleep(0.02)
    assert said and said[0].endswith("taken again")
    assert lock.path.is_file()
    lock.release()
    lock.path.unlink()
    time.sleep(0.1)
    assert not lock.path.exists() and len(said) == 1  # released: no longer kept


def test_an_output_dir_too_long_for_safe_sfts_records_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """A 4020-byte output dir: plain swift's files fit under it, safe-sft's torchelastic log dir did not, and
    torchrun failed with its traceback, read as an unknown failure and retried (hostile45disk F3)."""
    from launcher.errors import SafeSftError
    from launcher.run.lock import path_too_long

    deep = tmp_path.joinpath(*["d" * 200] * 20)  # 4000 bytes and more, none of it made
    with pytest.raises(SafeSftError, match=r"the output dir's path is \d+ bytes: safe-sft's records under it"):
        acquire(deep)
    assert not (tmp_path / ("d" * 200)).exists()
    assert path_too_long(tmp_path / "out") is None


@pytest.mark.parametrize("code", [28, 1])  # ENOSPC (no space, or no free files), EPERM (chattr +i)
def test_a_lock_that_cannot_be_made_says_what_ran_out_or_what_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """No free inodes had been told "choose a --output_dir this user can write to", and an immutable records
    folder was called the output dir (hostile45disk F7). The file system's refusal is stood in for here."""
    out = tmp_path / "out"
    (out / "safe-sft").mkdir(parents=True)

    def refused(*_: object) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "open", refused)
    with pytest.raises(SafeSftError) as raised:
        acquire(out)
    if code == 28:
        import re

        said = rf"cannot write to the output dir {re.escape(str(out))}: No space left on device \({re.escape(str(out))}"
        assert re.fullmatch(said + r" has \S+ \S+ free.*\)", raised.value.message), raised.value.message
        assert raised.value.hint.startswith(f"free space and files in {out}")
    else:
        assert raised.value.message.startswith(f"cannot write to safe-sft's records folder {out / 'safe-sft'}")
        assert raised.value.hint == f"make {out / 'safe-sft'} writable (chmod, chattr -i), or move it away"
