"""`safe-sft explain` on what users really hand it: several files, folders, stdin, and hostile input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OOM_LINES = (
    "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
)


def explain(*args: str, stdin: bytes | None = None, timeout: float = 20) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "explain", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_several_files_merge_into_one_diagnosis(tmp_path: Path) -> None:
    """The job's .out shows only a SIGKILL; the dmesg capture beside it proves the kernel's OOM kill."""
    (tmp_path / "slurm-1.out").write_text("srun: error: gpu-1: task 0: Killed\n")
    (tmp_path / "dmesg.txt").write_text("[77.1] Out of memory: Killed process 4242 (python)\n")
    alone = json.loads(explain("--json", str(tmp_path / "slurm-1.out")).stdout)
    both = json.loads(explain("--json", str(tmp_path / "slurm-1.out"), str(tmp_path / "dmesg.txt")).stdout)
    assert (alone["kind"], alone["confidence"]) == ("host_oom", "thin")
    assert (both["kind"], both["confidence"]) == ("host_oom", "firm")
    assert any("Killed process 4242" in line for line in both["evidence"])


def test_an_attempt_folder_reads_its_console_log_and_error_files(tmp_path: Path) -> None:
    error = tmp_path / "torchelastic" / "none_x" / "attempt_0" / "1" / "error.json"
    error.parent.mkdir(parents=True)
    message = {
        "message": "ValueError: remaining_argv: ['--bogus']",
        "extraInfo": {"py_callstack": "", "timestamp": "1"},
    }
    error.write_text(json.dumps({"message": message}))
    (tmp_path / "console.log").write_text(
        "run sh: torchrun ...\nsomething failed (exitcode: 1) local_rank: 1 (pid: 5)\n"
    )
    result = explain("--json", str(tmp_path))
    data = json.loads(result.stdout)
    assert (data["kind"], data["rank"]) == ("user_error", 1)
    assert data["fix"] == "ValueError: remaining_argv: ['--bogus']"


@pytest.mark.parametrize(
    "given",
    ["out", "out/safe-sft", "out/safe-sft/20261127-120000-000001"],
    ids=["output-dir", "its-safe-sft-folder", "run-dir"],
)
def test_an_output_or_run_dir_of_safe_sfts_is_sent_to_report_and_to_an_attempt(tmp_path: Path, given: str) -> None:
    """Every attempt's error.json under it, merged: a run that recovered from an OOM was explained as an OOM."""
    for run, attempt in (("20261127-110000-000001", 1), ("20261127-120000-000001", 1), ("20261127-120000-000001", 2)):
        folder = tmp_path / "out" / "safe-sft" / run / f"attempt-{attempt}"
        folder.mkdir(parents=True)
        (folder / "console.log").write_text(OOM_LINES)
    # the newest run recovered: its attempt 1 failed, its attempt 2 finished (the one to explain is the failed
    # one: naming attempt 2 had explained nothing, hostile45report F5)
    attempts = [{"number": 1, "failure": {"kind": "cuda_oom"}}, {"number": 2, "failure": None}]
    (tmp_path / "out" / "safe-sft" / "20261127-120000-000001" / "report.json").write_text(
        json.dumps({"attempts": attempts})
    )
    result = explain(str(tmp_path / given))
    assert result.returncode == 2
    newest = tmp_path / "out" / "safe-sft" / "20261127-120000-000001" / "attempt-1"
    assert result.stderr.decode().splitlines() == [
        f"safe-sft: error: {tmp_path / given} holds safe-sft's records of whole runs, not one failure (a run may "
        "have failed, then recovered)",
        f"safe-sft: fix: `safe-sft report {tmp_path / given}` tells how each run ended; to explain one attempt: "
        f"safe-sft explain {newest}",
    ]


def test_stdin(tmp_path: Path) -> None:
    result = explain("-", stdin=OOM_LINES.encode())
    assert result.returncode == 0
    assert result.stdout.decode().startswith("cuda_oom")


def test_escape_codes_are_stripped_and_no_raw_bytes_reach_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "color.log"
    log.write_bytes(b"\x1b[31mRuntimeError: CUDA error: an illegal memory access was encountered\x1b[0m\x07\n")
    result = explain(str(log))
    out = result.stdout.decode()
    assert result.returncode == 0 and out.startswith("cuda_error")
    assert "\x1b" not in out and "\x07" not in out
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in out


def _safetensors_like() -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4096], "data_offsets": [0, 16384]}}).encode()
    return len(header).to_bytes(8, "little") + header + bytes(range(32, 127)) * 172


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda p: p.write_bytes(b""), "is empty", id="empty"),
        pytest.param(lambda p: p.write_bytes(bytes(range(256)) * 64), "is binary data", id="binary"),
        # weights named by mistake: safetensors' header is JSON and its tensors' bytes look half like text
        pytest.param(lambda p: p.write_bytes(_safetensors_like()), "is binary data", id="safetensors"),
        pytest.param(lambda p: p.write_bytes(b"PK\x03\x04" + b"archive/data.pkl" * 64), "is binary data", id="zip"),
        pytest.param(lambda p: os.mkfifo(p), "is a FIFO", id="fifo"),
        pytest.param(lambda p: p.write_bytes(b" \n\t\n"), "is blank", id="white-space"),  # had been classified
        pytest.param(lambda p: None, "does not exist", id="missing"),
    ],
)
def test_hostile_inputs_get_one_line(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "log"
    make(path)
    result = explain(str(path), timeout=10)
    err = result.stderr.decode()
    assert result.returncode == 2
    assert err.startswith(f"safe-sft: error: {path} {message}"), err
    assert "Traceback" not in err and result.stdout == b""


def test_a_device_that_never_ends_is_refused_at_once() -> None:
    result = explain("/dev/zero", timeout=10)
    assert result.returncode == 2
    assert result.stderr.decode().startswith("safe-sft: error: /dev/zero is a device or socket")


def test_endless_binary_on_stdin_is_refused_at_once() -> None:
    with subprocess.Popen(["cat", "/dev/zero"], stdout=subprocess.PIPE) as zeros:
        result = subprocess.run(
            [sys.executable, "-m", "launcher", "explain", "-"],
            stdin=zeros.stdout,
            capture_output=True,
            timeout=20,
            cwd=REPO,
        )
        zeros.kill()
    assert result.returncode == 2
    assert b"stdin is binary data" in result.stderr


def test_a_long_log_keeps_the_early_oom_and_its_frames(tmp_path: Path) -> None:
    """The root cause early in a long log (later ranks print chatter and peer errors) is still found."""
    head = (
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "/x/transformers/trainer.py", line 3331, in _save_checkpoint\n'
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB\n"
    )
    chatter = "".join(
        f"{{'loss': 0.5, 'global_step/max_steps': '{i}/9'}} padding padding padding\n" for i in range(120_000)
    )
    tail = "[rank0]: RuntimeError: Connection closed by peer [10.0.0.3]:29500\n"
    log = tmp_path / "long.log"
    log.write_text(head + chatter + tail)
    assert log.stat().st_size > 4 * (2 << 20)  # longer than the whole-line tail
    data = json.loads(explain("--json", str(log)).stdout)
    assert (data["kind"], data["rank"]) == ("cuda_oom_save", 3)


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda text: text.encode("utf-16"), id="utf-16-bom"),  # Windows PowerShell's `>`
        pytest.param(lambda text: text.encode("utf-16-le"), id="utf-16-le"),
        pytest.param(lambda text: text.encode("utf-16-be"), id="utf-16-be"),
        pytest.param(lambda text: ("训练中出现错误显存不足\n" * 50 + text).encode("gbk"), id="gbk"),
        pytest.param(lambda text: ("é" * 30 + "\n").encode("latin-1") * 20 + text.encode(), id="latin-1"),
    ],
)
def test_a_log_in_another_encoding_is_read_as_text(tmp_path: Path, encode) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_bytes(encode(OOM_LINES))
    result = explain("--json", str(log))
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["kind"] == "cuda_oom"


def test_a_log_of_progress_bars_redrawn_in_place_is_read_in_bounded_memory() -> None:
    """tqdm writes `\\r` and no `\\n`: the scanner cuts there too, so it holds about two tails, not the log."""
    from launcher.logfile import CHUNK, TAIL_BYTES, _Scanner

    bar = b"Train:  45%|####5     | 450/1000 [01:00<01:13,  7.50it/s]\r"
    scanner = _Scanner("bars.log")
    for _ in range(3 * CHUNK // len(bar) // 1000):
        scanner.feed(bar * 1000)
    scanner.feed(b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\r")
    assert len(scanner.pending) <= 2 * TAIL_BYTES + len(bar) * 1000
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB" in scanner.lines()


def test_stdin_given_twice_is_one_line() -> None:
    result = explain("-", "-", stdin=OOM_LINES.encode())
    assert result.returncode == 2
    assert result.stderr.decode().startswith("safe-sft: error: - (stdin) is given more than once")


def test_a_closed_stdin_is_one_line() -> None:
    result = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m launcher explain - <&-"], capture_output=True, timeout=20, cwd=REPO
    )
    assert result.returncode == 2
    assert result.stderr.decode().startswith("safe-sft: error: stdin is closed"), result.stderr.decode()


@pytest.mark.parametrize(
    ("log", "said"),
    [
        pytest.param("hello\n", "nor how the process ended", id="no-exit"),
        pytest.param("srun: error: gpu-1: task 0: Killed\n", "only how the process ended", id="killed"),
    ],
)
def test_thin_evidence_says_what_the_log_does_show(tmp_path: Path, log: str, said: str) -> None:
    (tmp_path / "a.log").write_text(log)
    result = explain(str(tmp_path / "a.log"))
    assert f"the evidence is thin: no line names the cause, {said}" in result.stdout.decode()


def test_a_log_that_shows_no_failure_quotes_its_end_as_context_not_evidence(tmp_path: Path) -> None:
    """A Slurm job log holding only the batch script's own lines (the step wrote elsewhere): its last lines are
    what the log ends with, not evidence of a failure, and the line says where the rest may be
    (hostile46slurm)."""
    (tmp_path / "job.out").write_text("start 12:53:25 restart=3\nSAFE_SFT_EXIT=0 12:54:47\n")
    out = explain(str(tmp_path / "job.out")).stdout.decode()
    assert "evidence:" not in out
    assert "the log ends with:\n  start 12:53:25 restart=3\n  SAFE_SFT_EXIT=0 12:54:47\n" in out
    assert "a Slurm step's own -o file" in out
    killed = tmp_path / "killed.out"
    killed.write_text("srun: error: gpu-1: task 0: Killed\n")
    assert "evidence:" in explain(str(killed)).stdout.decode()


def test_a_log_without_line_breaks_is_read_in_bounded_memory_and_keeps_its_end(tmp_path: Path) -> None:
    """3 MB on one line, the failure at its end: the reader cuts it mid-line, keeps the line's start and
    end, and does not hold the whole input."""
    from launcher.logfile import MAX_LINE, read_logs

    log = tmp_path / "one-line.log"
    log.write_bytes(b"x" * (3 << 20) + b" torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    lines = read_logs([str(log)]).lines
    assert sum(len(line) for line in lines) < 1_200_000  # the last 1 MB and bounded keyword lines, not 3 MB
    assert max(len(line) for line in lines) <= MAX_LINE + 5
    assert json.loads(explain("--json", str(log)).stdout)["kind"] == "cuda_oom"


def test_a_log_of_keyword_lines_keeps_each_line_whole(tmp_path: Path) -> None:
    """Every line names NCCL (an NCCL_DEBUG=INFO log): each kept line is one line of the log, found within
    its own bounds (the reader looks at most a line's length around a keyword, never to the block's end)."""
    from launcher.logfile import read_logs

    line = b"node01:12345:12399 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
    log = tmp_path / "nccl.log"
    log.write_bytes(line * 60_000 + b"[rank1]: torch.OutOfMemoryError: CUDA out of memory.\n")
    lines = read_logs([str(log)]).lines
    assert set(lines[:-3]) == {line.decode().rstrip("\n")}
    assert lines[-2] == "[rank1]: torch.OutOfMemoryError: CUDA out of memory."


def test_a_folder_reads_error_files_of_torchelastics_layout_only(tmp_path: Path) -> None:
    """An old run's error.json deep below a log folder is not this log's; a FIFO named error.json is no
    file to read (it would block)."""
    (tmp_path / "train.log").write_text(
        "[rank0]:[E ProcessGroupNCCL.cpp:1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
        "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds before timing out.\n"
    )
    stray = tmp_path / "old" / "run7" / "torchelastic" / "x" / "attempt_0" / "0" / "error.json"
    stray.parent.mkdir(parents=True)
    stray.write_text(json.dumps({"message": "torch.OutOfMemoryError: CUDA out of memory."}))
    (tmp_path / "attempt_0" / "1").mkdir(parents=True)
    os.mkfifo(tmp_path / "attempt_0" / "1" / "error.json")
    result = explain("--json", str(tmp_path))
    assert json.loads(result.stdout)["kind"] == "comm_timeout", result.stderr


def test_a_folder_that_cannot_be_listed_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.11's Path.is_file() raises on EACCES (another user's run dir on a shared cluster)."""
    from launcher.errors import SafeSftError
    from launcher.logfile import read_logs

    def denied(self: Path) -> bool:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_file", denied)
    with pytest.raises(SafeSftError) as err:
        read_logs([str(tmp_path)])
    assert err.value.message == f"cannot read {tmp_path}: {tmp_path / 'console.log'} Permission denied"


def test_stdin_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    with (tmp_path / "w").open("w") as write_only:
        result = subprocess.run(
            [sys.executable, "-m", "launcher", "explain", "-"], stdin=write_only, capture_output=True, timeout=20,
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
    assert (result.returncode, result.stderr.decode().splitlines()[0]) == (
        2, "safe-sft: error: cannot read stdin: Bad file descriptor",
    )  # fmt: skip


def test_a_non_blocking_pipe_is_read_to_its_end() -> None:
    """ssh and some CI runners leave stdin non-blocking: its first empty moment is not the log's end."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "explain", "--json", "-"], stdin=read, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    os.close(read)
    import time

    time.sleep(1.5)  # safe-sft has started and found nothing to read yet
    os.write(write, OOM_LINES.encode())
    os.close(write)
    out, err = proc.communicate(timeout=20)
    assert json.loads(out)["kind"] == "cuda_oom", err


@pytest.mark.parametrize("nuls", ["one", "leading-run", "trailing-run"])
def test_a_log_with_nul_bytes_a_crash_left_is_read_as_text(tmp_path: Path, nuls: str) -> None:
    """A node that crashed while its log was appended to leaves zero-filled blocks: the log had been refused
    as binary data."""
    text = b"step 3\nslurmstepd: error: Detected 1 oom_kill event in StepId=81234.0.\n"
    log = tmp_path / "crashed.out"
    log.write_bytes(
        {
            "one": text[:4] + b"\x00" + text[4:],
            "leading-run": b"\x00" * 8192 + text,
            "trailing-run": text + b"\x00" * 8192,
        }[nuls]
    )
    result = explain(str(log))
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("host_oom")


def test_torchruns_summary_without_the_ranks_traceback_shows_how_the_rank_exited(tmp_path: Path) -> None:
    """Its `traceback : To enable traceback see: <url>` had been the evidence, and the rank was lost."""
    log = tmp_path / "childfailed.log"
    log.write_text(
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\ntrain.py FAILED\n"
        "------------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n"
        "  time      : 2026-11-20_04:01:55\n  host      : gpu-node-17\n  rank      : 3 (local_rank: 3)\n"
        "  exitcode  : 1 (pid: 140301)\n  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n"
    )
    out = explain(str(log)).stdout.decode()
    assert out.startswith("unknown: an unrecognised failure on rank 3")
    assert "rank 3 exited with code 1" in out and "To enable traceback" not in out


# A preempted job's Slurm output as a real one ends (hostile46slurm F3): safe-sft's summary, then srun's line
# for the step's exit status, safe-sft's own 75
PREEMPTED_JOB = """\
[INFO:swift] {'loss': 2.41, 'grad_norm': 1.3, 'learning_rate': 9e-05, 'global_step/max_steps': '21/300'}
safe-sft: notice (SIGUSR1): every rank saves a checkpoint at the next step and stops
safe-sft: preempted after 1 attempt(s)
  preempted at step 21: checkpoint /scratch/out/v0-20261129-123636/checkpoint-21
srun: error: gpu-3: task 0: Exited with exit code 75
"""


def test_a_preempted_jobs_log_is_said_to_be_a_preemption_not_a_rank_failure_to_retry(tmp_path: Path) -> None:
    (tmp_path / "slurm-5.out").write_text(PREEMPTED_JOB)
    said = explain(str(tmp_path / "slurm-5.out"))
    text = said.stdout.decode()
    assert said.returncode == 0, said.stderr
    assert text.startswith("preempted: safe-sft stopped this run on a notice at step 21 and saved its checkpoint")
    assert "/scratch/out/v0-20261129-123636/checkpoint-21" in text and "--resume-latest" in text
    assert "same settings once more" not in text and "unknown" not in text
    data = json.loads(explain("--json", str(tmp_path / "slurm-5.out")).stdout)
    assert (data["kind"], data["preempted"]["step"]) == (None, 21)


def test_an_attempt_folder_that_stopped_on_a_notice_is_no_finished_run_and_a_proven_failure_still_wins(
    tmp_path: Path,
) -> None:
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    (attempt / "console.log").write_text("[INFO:swift] {'global_step/max_steps': '21/300'}\n")
    (attempt / "notice").write_text("SIGUSR1\n")
    (attempt / "stopping.json").write_text('{"step": 21}')
    text = explain(str(attempt)).stdout.decode()
    assert text.startswith("preempted: safe-sft stopped this run on a notice (SIGUSR1) at step 21"), text
    (attempt / "console.log").write_text(OOM_LINES)  # the save after the notice ran out of memory
    assert json.loads(explain("--json", str(attempt)).stdout)["kind"] == "cuda_oom"


def test_a_user_error_whose_fix_is_named_shows_that_fix_once(tmp_path: Path) -> None:
    """The open-files limit: the evidence names what to change, and the generic `fix this line's cause` line is
    not printed over it; --json's fix is that change (hostile47env F5)."""
    (tmp_path / "a.log").write_text("[rank0]: OSError: [Errno 24] Too many open files: '/out/x.json'\n")
    out = explain(str(tmp_path / "a.log")).stdout.decode()
    assert "  fix: raise the open-files limit (ulimit -n 65536" in out
    assert "fix this line's cause" not in out
    data = json.loads(explain(str(tmp_path / "a.log"), "--json").stdout)
    assert data["kind"] == "user_error" and data["fix"].startswith("raise the open-files limit")
