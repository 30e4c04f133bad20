"""Golden logs (real tails captured from this project's real-stack runs) and a table of patterns."""

from pathlib import Path

import pytest

from launcher.model import FailureKind as K
from launcher.run.classify import AttemptEvidence, RankFailure, classify
from launcher.run.launcher_output import parse_torchrun_failures

DATA = Path(__file__).resolve().parents[1] / "data"


def from_log(name: str, steps_seen: bool = True, kernel_oom: tuple[str, ...] = (), exit_code: int = 1):  # type: ignore[no-untyped-def]
    lines = (DATA / name).read_text().splitlines()
    return classify(
        AttemptEvidence(
            exit_code=exit_code,
            rank_failures=parse_torchrun_failures(lines),
            log_tail=tuple(lines),
            kernel_oom=kernel_oom,
            steps_seen=steps_seen,
        )
    )


def test_golden_oom_on_rank1_despite_peer_error() -> None:
    failure = from_log("cuda_oom_step_rank1.log")
    assert failure is not None
    assert (failure.kind, failure.rank, failure.exit_code) == (K.CUDA_OOM, 1, 1)
    assert failure.evidence[0].startswith("torch.OutOfMemoryError: CUDA out of memory")


def test_torchrun_summary_root_cause_first() -> None:
    lines = (DATA / "cuda_oom_step_rank1.log").read_text().splitlines()
    failures = parse_torchrun_failures(lines)
    assert [(f.rank, f.exit_code) for f in failures] == [(1, 1), (0, -15)]


WRONG_RANK_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
worker.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_10:00:01
  host      : n1
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 11)
  error_file: /x/1/error.json
  traceback : Traceback (most recent call last):
    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.39 GiB
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_10:00:01
  host      : n1
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 10)
  error_file: /x/0/error.json
  traceback : Traceback (most recent call last):
    RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:1234
============================================================
"""


def test_summary_naming_the_wrong_rank_still_finds_the_oom() -> None:
    lines = WRONG_RANK_SUMMARY.splitlines()
    failure = classify(
        AttemptEvidence(
            exit_code=1, rank_failures=parse_torchrun_failures(lines), log_tail=tuple(lines), steps_seen=True
        )
    )
    assert failure is not None
    assert (failure.kind, failure.rank) == (K.CUDA_OOM, 1)


@pytest.mark.parametrize(
    ("message", "steps_seen", "kind"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True, K.CUDA_OOM),
        ('File "trainer.py", in _save_checkpoint\ntorch.OutOfMemoryError: CUDA out of memory.', True, K.CUDA_OOM_SAVE),
        ('File "x.py", in from_pretrained\ntorch.OutOfMemoryError: CUDA out of memory.', False, K.CUDA_OOM_LOAD),
        ('File "x.py", in deepspeed_init\nRuntimeError: CUDA error: out of memory', False, K.CUDA_OOM_LOAD),
        (  # nn.Module.to's inner mover, whatever called it
            '  File "/v/torch/nn/modules/module.py", line 1329, in convert\n    return t.to(\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 462.00 MiB.",
            False,
            K.CUDA_OOM_LOAD,
        ),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED", True, K.CUDA_OOM),
        ("RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes", True, K.HOST_OOM),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", True, K.CUDA_ERROR),
        ("RuntimeError: CUDA error: device-side assert triggered", True, K.CUDA_ERROR),
        (
            "[E ProcessGroupNCCL.cpp] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
            True,
            K.COMM_TIMEOUT,
        ),
        ("torch.distributed.DistBackendError: NCCL error in: ncclSystemError", True, K.COMM_ERROR),
        ("ValueError: remaining_argv: ['--bogus', '1']", False, K.USER_ERROR),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'data.jsonl'", False, K.USER_ERROR),
        (
            "AssertionError: Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided",
            False,
            K.USER_ERROR,
        ),
        (
            "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu *"
            " gradient_acc_step * world_size 16 != 2 * 2 * 2",
            True,
            K.USER_ERROR,
        ),
        ("RuntimeError: unable to write to file </torch_123_456_0>: No space left on device (28)", True, K.SHM),
        (
            "RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error.",
            True,
            K.SHM,
        ),
        ("RuntimeError: failed to register memory: ibv_reg_mr failed, check ulimit -l", True, K.MEMLOCK),
        # a verbs completion queue is pinned: its ENOMEM is the locked-memory limit, on one line or over several
        (
            "h:1:2 [7] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory",
            False,
            K.MEMLOCK,
        ),
        (
            "Failed to create a completion queue (CQ):\n\nHostname: n07\nRequested CQE: 16384\nError:    Cannot "
            "allocate memory",
            False,
            K.MEMLOCK,
        ),
        # the same ENOMEM far from any such line, or host memory's own words beside it, stay the host's
        (
            "Failed to create a completion queue (CQ):\n" + "x\n" * 12 + "Error: Cannot allocate memory",
            True,
            K.HOST_OOM,
        ),
        ("Failed to register memory\nMemoryError: Cannot allocate memory for the batch", True, K.HOST_OOM),
        ("OSError: [Errno 28] No space left on device: '/out/checkpoint-6/model.safetensors'", True, K.DISK_FULL),
        ("OSError: [Errno 28] No space left on device", True, K.DISK_FULL),
        # a file of the user's where the trainer saves: a retry meets it again
        ("FileExistsError: [Errno 17] File exists: '/out/checkpoint-2'", True, K.USER_ERROR),
        ("OSError: [Errno 122] Disk quota exceeded: '/home/u/out/args.json'", False, K.DISK_FULL),
        (
            "RuntimeError: [enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file "
            "data/3: file write failed",
            True,
            K.DISK_FULL,
        ),
        ("OSError: [Errno 28] No space left on device: '/dev/shm/torch_77_1'", True, K.SHM),
        # a full disk outranks the missing file it makes swift report next
        ("OSError: [Errno 28] No space left on device\nFileNotFoundError: [Errno 2] No such file", True, K.DISK_FULL),
        ("Fatal Python error: Segmentation fault", True, K.CRASH),
        (
            "RuntimeError: DDP expects same model across all ranks, but Rank 1 has 39 params, while rank 0 has "
            "inconsistent 27 params.",
            False,
            K.USER_ERROR,
        ),
        # a shell's report of a process ended by a signal: no error word of its own
        ("=> loading pretrained model w.pth\nIllegal instruction (core dumped)", False, K.CRASH),
        ("step 3\nFloating point exception", True, K.CRASH),
        # a terminal's echo of Ctrl-C on its own line, and Julia's word for it
        ("Load and cache transformed data: 100% 39/39\n^C", False, K.INTERRUPTED),
        ("Train Epoch 6:  81%|#####  | ETA: 0:00:00\nERROR: InterruptException:", True, K.INTERRUPTED),
        ("Error processing tensor for shard 0: CUDA Error 2, out of memory", True, K.CUDA_OOM),
        # a hub client's retries where nothing else failed: its timeout is a download's, not a collective's
        (
            "'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: "
            "/m/resolve/main/tokenizer.json (Caused by ConnectTimeoutError(<c>, 'Connection to huggingface.co timed "
            "out. (connect timeout=10)'))\"), '(Request ID: 8b)')' thrown while requesting HEAD "
            "https://huggingface.co/m/resolve/main/tokenizer.json",
            False,
            K.DOWNLOAD,
        ),
        ("Retrying all-reduce: rank 3 timed out", True, K.COMM_TIMEOUT),
        # OOM words a training sample or a tip only quotes, where a traceback ends in the rank's own error
        (
            "[INFO:swift] [INPUT] <|im_start|>user\nMy run crashed with torch.OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 2.00 GiB.<|im_end|>\n[rank0]: Traceback (most recent call last):\n"
            '[rank0]:   File "/x/swift/cli/sft.py", line 10, in <module>\n'
            "[rank0]: TypeError: Boom() takes no arguments",
            False,
            K.USER_ERROR,
        ),
        (
            "[INFO:swift] Tip: to avoid CUDA out of memory, lower --per_device_train_batch_size\n"
            'Traceback (most recent call last):\n  File "/h/train.py", line 12, in <module>\n'
            "ModuleNotFoundError: No module named 'flash_attn'",
            False,
            K.USER_ERROR,
        ),
        # ... but an OOM that ends its own traceback stays one, whatever torchrun raises after it
        (
            'Traceback (most recent call last):\n  File "/x/trainer.py", line 9, in training_step\n'
            "2026-11-20 ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            'Traceback (most recent call last):\n  File "/t/run.py", line 919, in main\n'
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            True,
            K.CUDA_OOM,
        ),
    ],
)
def test_patterns(message: str, steps_seen: bool, kind: K) -> None:
    failure = classify(AttemptEvidence(exit_code=1, rank_failures=(RankFailure(0, 1, message),), steps_seen=steps_seen))
    assert failure is not None and failure.kind is kind
    assert failure.evidence


@pytest.mark.parametrize(
    ("exit_code", "kernel_oom", "kind"),
    [
        (-9, ("kernel OOM killer ran 1 time(s)",), K.HOST_OOM),
        (-9, (), K.KILLED),
        (-15, (), K.KILLED),
        (-11, (), K.CRASH),
        (-6, (), K.CRASH),
    ],
)
def test_signals(exit_code: int, kernel_oom: tuple[str, ...], kind: K) -> None:
    failure = classify(AttemptEvidence(exit_code=1, rank_failures=(RankFailure(3, exit_code),), kernel_oom=kernel_oom))
    assert failure is not None
    assert (failure.kind, failure.rank) == (kind, 3)


def test_success_interrupt_and_hang() -> None:
    assert classify(AttemptEvidence(exit_code=0)) is None
    interrupted = classify(AttemptEvidence(exit_code=-15, interrupted_by="SIGTERM"))
    assert interrupted is not None and interrupted.kind is K.INTERRUPTED
    assert (
        interrupted.headline() == "interrupted: the run was interrupted or cancelled"
    )  # not "interrupted: interrupted"
    hang = classify(AttemptEvidence(exit_code=None, hang="no progress for 600 s"))
    assert hang is not None and hang.kind is K.HANG
    assert hang.headline() == "hang: no progress within the watchdog's allowance"


def test_a_hang_whose_log_shows_a_worker_died_of_a_full_dev_shm_is_that_shm_failure() -> None:
    """A full /dev/shm killed the DataLoader workers and the trainer waited for them until the watchdog's
    allowance ran out: the cause is /dev/shm, whose rung (no workers) fixes it, not a communication hang
    retried unchanged (hostile47env F1). A hang whose log shows only its peers' connection errors stays a hang."""
    shm = "RuntimeError: unable to allocate shared memory(shm) for file </torch_23180_2619988728_1>: No space left"
    failure = classify(AttemptEvidence(exit_code=1, log_tail=("step 0", shm), hang="no progress for 30 s"))
    assert failure is not None and failure.kind is K.SHM
    assert failure.evidence == (shm, "no progress for 30 s")
    comm = "RuntimeError: [../third_party/gloo/transport/tcp/pair.cc:534] Connection closed by peer"
    peers = classify(AttemptEvidence(exit_code=1, log_tail=(comm,), hang="no progress for 30 s"))
    assert peers is not None and peers.kind is K.HANG


def test_unknown_keeps_the_last_lines() -> None:
    failure = classify(AttemptEvidence(exit_code=3, log_tail=("step 1", "something odd happened")))
    assert failure is not None
    assert failure.kind is K.UNKNOWN
    assert "something odd happened" in failure.evidence


def test_warning_lines_in_the_tail_are_not_evidence() -> None:
    tail = ("[WARNING] the checkpoint path does not exist yet, creating it", "Killed")
    failure = classify(AttemptEvidence(exit_code=1, log_tail=tail))
    assert failure is not None and failure.kind is not K.USER_ERROR


def test_golden_oom_while_saving() -> None:
    failure = from_log("cuda_oom_save_rank0.log")
    assert failure is not None
    assert (failure.kind, failure.rank) == (K.CUDA_OOM_SAVE, 0)
    assert any("_save_checkpoint" in line for line in failure.evidence)


def test_golden_missing_dataset_is_a_user_error() -> None:
    failure = from_log("user_error_missing_dataset.log", steps_seen=False)
    assert failure is not None
    assert failure.kind is K.USER_ERROR
    assert "does not exist" in failure.evidence[0]


def test_golden_dataset_with_no_row_swift_reads_is_a_user_error() -> None:
    """Every row's messages empty: swift filters them all out, then divides by the rows left."""
    failure = from_log("user_error_empty_dataset.log", steps_seen=False)
    assert failure is not None
    assert failure.kind is K.USER_ERROR
    assert failure.evidence[0].strip() == "ZeroDivisionError: integer division or modulo by zero"


def test_golden_kernel_oom_kill_beats_the_peers_connection_error() -> None:
    evidence = ("kernel OOM killer ran 1 time(s) during the attempt (/proc/vmstat oom_kill 0 -> 1)",)
    failure = from_log("host_oom_sigkill_rank1.log", kernel_oom=evidence)
    assert failure is not None
    assert (failure.kind, failure.rank, failure.exit_code) == (K.HOST_OOM, 1, -9)
    assert failure.evidence == ("rank 1 exited with SIGKILL", *evidence)


def test_sigkill_without_oom_evidence_is_killed() -> None:
    failure = from_log("host_oom_sigkill_rank1.log")
    assert failure is not None
    assert (failure.kind, failure.rank) == (K.KILLED, 1)


def test_merge_keeps_signal_ranks_and_error_file_text() -> None:
    from launcher.run.classify import merge_failures

    summary = (RankFailure(1, -9), RankFailure(0, 1, "short"))
    files = (RankFailure(0, 1, "full traceback", 5.0), RankFailure(2, 1, "only in a file"))
    merged = merge_failures(summary, files)
    assert [(f.rank, f.exit_code, f.message) for f in merged] == [
        (1, -9, ""),
        (0, 1, "full traceback"),
        (2, 1, "only in a file"),
    ]


URLLIB3_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/env/lib/python3.11/site-packages/urllib3/connection.py", line 198, in _new_conn\n'
    "    sock = connection.create_connection(\n"
)
DIST_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/env/lib/python3.11/site-packages/torch/distributed/rendezvous.py", line 189, in _create_c10d_store\n'
    "    return TCPStore(\n"
)


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        # what huggingface_hub 1.x raises in swift when the endpoint refuses (a real swift run's line)
        (
            "huggingface_hub.errors.LocalEntryNotFoundError: Got: ConnectError: [Errno 111] Connection refused",
            K.DOWNLOAD,
        ),
        (
            "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='www.modelscope.cn', port=443): Max retries "
            "exceeded with url: /api/v1/models (Caused by NewConnectionError('Failed to establish a new connection'))",
            K.DOWNLOAD,
        ),
        ("httpx.ConnectTimeout: timed out", K.DOWNLOAD),
        (
            "huggingface_hub.errors.HfHubHTTPError: 503 Server Error: Service Unavailable for url: https://huggingface.co/api",
            K.DOWNLOAD,
        ),
        (
            "requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: https://huggingface.co/x",
            K.DOWNLOAD,
        ),
        ("OSError: Consistency check failed: file should be of size 4968243304 but has size 1073741824", K.DOWNLOAD),
        # a socket's error counts as a download only where an HTTP client raised it
        (URLLIB3_FRAMES + "ConnectionRefusedError: [Errno 111] Connection refused", K.DOWNLOAD),
        (URLLIB3_FRAMES + "socket.gaierror: [Errno -3] Temporary failure in name resolution", K.DOWNLOAD),
        (DIST_FRAMES + "ConnectionRefusedError: [Errno 111] Connection refused", K.COMM_ERROR),
        ("ConnectionResetError: [Errno 104] Connection reset by peer", K.COMM_ERROR),
        # what a retry cannot fix stays the user's
        (
            "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: https://huggingface.co/no/such",
            K.USER_ERROR,
        ),
        (
            "huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url https://x",
            K.USER_ERROR,
        ),
        (
            "huggingface_hub.errors.OfflineModeIsEnabled: Offline mode is enabled.\n"
            "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in "
            "the cached files.",
            K.USER_ERROR,
        ),
        # a hub client's retry notice is no failure: the run went on and died of something else
        (
            "'(ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out. (read "
            "timeout=10)\"), '(Request ID: 1)')' thrown while requesting HEAD https://huggingface.co/x/config.json\n"
            "Retrying in 1s [Retry 1/5].\n"
            "ValueError: remaining_argv: ['--bogus']",
            K.USER_ERROR,
        ),
    ],
)
def test_downloads(message: str, kind: K) -> None:
    failure = classify(AttemptEvidence(exit_code=1, rank_failures=(RankFailure(0, 1, message),)))
    assert failure is not None and failure.kind is kind, failure


def test_a_data_file_that_is_not_utf8_is_the_users_and_beats_the_peers_closed_connection() -> None:
    """A jsonl with one 0xff byte: rank 0 stops in datasets' reader (exit 1); rank 1 loses its gloo peer and is
    SIGTERMed. The peer's comm_error was named the root cause, and the ladder retried twice for nothing."""
    rank0 = (
        '  File "pyarrow/array.pxi", line 4203, in pyarrow.lib.StringArray._getitem_py\n'
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
    )
    rank1 = "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:42917."
    failure = classify(
        AttemptEvidence(
            exit_code=1,
            rank_failures=(RankFailure(0, 1, rank0, 1795773489.0), RankFailure(1, -15, rank1, 1795773490.0)),
        )
    )
    assert failure is not None and (failure.kind, failure.rank) == (K.USER_ERROR, 0)
    assert failure.evidence[0].startswith("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff")


def test_a_full_disk_is_proven_by_the_systems_own_words_before_torchs_short_write() -> None:
    message = (
        "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 368960 vs 368848\n"
        "OSError: [Errno 28] No space left on device"
    )
    failure = classify(AttemptEvidence(exit_code=1, rank_failures=(RankFailure(0, 1, message),)))
    assert failure is not None and failure.kind is K.DISK_FULL
    assert failure.evidence == ("OSError: [Errno 28] No space left on device",)


@pytest.mark.parametrize(
    ("exit_code", "kernel_oom", "kind", "proof"),
    [
        pytest.param(-9, (), K.KILLED, "the launcher exited with SIGKILL and no OOM evidence", id="sigkill"),
        pytest.param(-9, ("kernel OOM killer ran 1 time(s)",), K.HOST_OOM, "kernel OOM killer ran 1 time(s)", id="oom"),
        pytest.param(-11, (), K.CRASH, "the launcher exited with SIGSEGV", id="segv"),
    ],
)
def test_a_launcher_killed_before_it_named_a_rank_is_named_by_its_signal(
    exit_code: int, kernel_oom: tuple[str, ...], kind: K, proof: str
) -> None:
    """torchrun SIGKILLed mid-save: no summary, no error file, a tail of progress bars. It was `unknown`, with
    the progress bars as its evidence."""
    tail = ("Writing model shards:   0%|          | 0/1 [00:00<?, ?it/s]", "[INFO:swift] Saving model checkpoint to x")
    failure = classify(AttemptEvidence(exit_code=exit_code, log_tail=tail, kernel_oom=kernel_oom))
    assert failure is not None and failure.kind is kind
    assert failure.evidence[0] == proof and failure.exit_code == exit_code


def test_a_ranks_own_unnamed_error_comes_before_the_peers_it_took_down() -> None:
    """Rank 0 exits 1 on an error no pattern names; torchrun SIGTERMs rank 1 after its gloo peer vanished.
    The peer's comm_error was named the root cause (and NCCL_P2P_DISABLE tried); torchrun's own root cause
    is rank 0, and so is safe-sft's now."""
    frame = '  File "plugin/loss.py", line 80, in compute_loss'
    rank0 = f"{frame}\nRuntimeError: the loss plugin gave up"
    rank1 = "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:42917."
    tail = ("[rank1]: " + rank1,)
    failure = classify(
        AttemptEvidence(
            exit_code=1, rank_failures=(RankFailure(0, 1, rank0), RankFailure(1, -15, rank1)), log_tail=tail
        )
    )
    assert failure is not None and (failure.kind, failure.rank) == (K.UNKNOWN, 0)
    assert failure.evidence == ("RuntimeError: the loss plugin gave up",)


def test_a_ranks_own_communication_error_is_still_the_root_cause() -> None:
    rank0 = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
    rank1 = "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:42917."
    failure = classify(
        AttemptEvidence(exit_code=1, rank_failures=(RankFailure(0, 1, rank0), RankFailure(1, -15, rank1)))
    )
    assert failure is not None and (failure.kind, failure.rank) == (K.COMM_ERROR, 0)


def test_a_user_error_raised_while_handling_another_is_quoted_at_the_end_of_its_chain() -> None:
    """LLaMA-Factory wraps a dataset_info.json that is not JSON: the JSONDecodeError names no file, the
    ValueError raised around it does."""
    message = "\n".join(
        [
            "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "llamafactory/data/parser.py", line 120, in get_dataset_list',
            "ValueError: Cannot open data/dataset_info.json due to Expecting property name.",
        ]
    )
    failure = classify(AttemptEvidence(exit_code=1, rank_failures=(RankFailure(0, 1, message),)))
    assert failure is not None and failure.kind is K.USER_ERROR
    assert failure.evidence[0] == "ValueError: Cannot open data/dataset_info.json due to Expecting property name."
    unchained = "KeyError: 'a'\nsomething else\nValueError: later, unrelated"
    failure = classify(AttemptEvidence(exit_code=1, rank_failures=(RankFailure(0, 1, unchained),)))
    assert failure is not None and failure.evidence[0] == "KeyError: 'a'"


def test_a_port_taken_as_the_attempt_started_is_a_set_up_error_that_names_the_port() -> None:
    """Two runs given one MASTER_PORT, started together: both pass safe-sft's check of the port before either
    binds it. The loser was told "bad arguments, a missing path or bad data"."""
    line = (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 30020, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
    )
    failure = classify(
        AttemptEvidence(exit_code=1, rank_failures=(), log_tail=("Traceback (most recent call last):", line))
    )
    assert failure is not None and failure.kind is K.USER_ERROR
    assert "a port in use" in failure.summary and "port: 30020" in failure.evidence[0]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        # ms-swift 4's hub client with no network (seen on this project's machines), its message in Chinese
        ("modelscope_hub._download_control._DownloadDeadlineError: [E1001] 下载总时限已耗尽", K.DOWNLOAD),
        ("_DownloadTooSlowError: [E1020] 下载速度过低", K.DOWNLOAD),
        ("modelscope_hub.errors.RequestTimeoutError: [E1001] 请求超时", K.DOWNLOAD),
        ("modelscope_hub.errors.RateLimitError: [E1021] 请求过于频繁", K.DOWNLOAD),
        ("modelscope_hub.errors.ServerError: [E1002] 服务器错误", K.DOWNLOAD),
        ("modelscope_hub.errors.NotExistError: [E3020] 数据集不存在", K.USER_ERROR),
        ("modelscope_hub.errors.AuthenticationError: [E3001] 认证失败", K.USER_ERROR),
    ],
)  # fmt: skip
def test_modelscope_hubs_own_errors_are_told_by_their_class_and_code(line: str, kind: K) -> None:
    """A download that timed out was a transient failure retried once without the download's waits."""
    from launcher.run.classify import classify_text

    found = classify_text(["Traceback (most recent call last):", line], steps_seen=False)
    assert found is not None and found[0] is kind


RAISED_WARNING = (
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/swift/sequence_parallel/zigzag_ring_attn.py", line 12, in <module>',
    "    @torch.jit.script",
    "DeprecationWarning: `torch.jit.script` is deprecated. Please switch to `torch.compile` or `torch.export`.",
)


def test_a_warning_raised_as_an_error_is_the_users_setting_and_one_shown_is_not_evidence() -> None:
    """PYTHONWARNINGS=error (or -W error) turns the warning a library shows while importing into the
    exception every rank stops on: the user's setting, not a failure a retry may get past."""
    raised = classify(AttemptEvidence(exit_code=1, rank_failures=(RankFailure(0, 1, "\n".join(RAISED_WARNING)),)))
    assert raised is not None and raised.kind is K.USER_ERROR
    assert raised.evidence[0] == RAISED_WARNING[-1]
    shown = (
        "/venv/lib/python3.11/site-packages/swift/x.py:12: DeprecationWarning: `torch.jit.script` is deprecated.",
        "Killed",
    )
    failure = classify(AttemptEvidence(exit_code=1, log_tail=shown))
    assert failure is not None and failure.kind is not K.USER_ERROR


def test_a_weights_file_that_cannot_be_deserialised_is_the_users_to_fetch_again() -> None:
    """A model's safetensors file cut short: every rank stops at the load on the same error, which a retry
    does not change (it had been an unknown, retried once as transient)."""
    error = (
        "safetensors._safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, "
        "file not fully covered"
    )
    failure = classify(AttemptEvidence(exit_code=1, rank_failures=(RankFailure(0, 1, error),)))
    assert failure is not None and failure.kind is K.USER_ERROR and failure.evidence[0] == error


def test_a_torchrun_someone_else_signalled_is_killed_not_unknown() -> None:
    """Live, safe-sft knows its own signals: a SIGTERM to torchrun from elsewhere stopped the ranks."""
    line = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15"
    failure = classify(AttemptEvidence(exit_code=1, log_tail=("step 3", line)))
    assert failure is not None and failure.kind is K.KILLED
    assert failure.evidence == (f"the launcher was signalled: {line}",)


def test_a_rank_sent_sigterm_first_is_the_cause_of_its_peers_lost_connections() -> None:
    """torchrun's root cause, rank 1, got a SIGTERM from outside; rank 0's gloo 'Connection closed by peer'
    (which torchrun then SIGTERMed) follows from it. It had been named comm_error on rank 0 (hostile42sig F4),
    and a second time would have set NCCL_P2P_DISABLE=1."""
    gloo = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:15259."
    evidence = AttemptEvidence(
        exit_code=1,
        rank_failures=(
            RankFailure(1, -15, "", 10.0),
            RankFailure(0, -15, f"Traceback (most recent call last):\n{gloo}", 10.0),
        ),
        log_tail=(gloo,),
    )
    failure = classify(evidence)
    assert failure is not None and (failure.kind, failure.rank) == (K.KILLED, 1)
    aborted = AttemptEvidence(  # a SIGABRT first is NCCL's watchdog or C++ terminate after the comm failure
        exit_code=1, rank_failures=(RankFailure(1, -6, "", 10.0), RankFailure(0, -15, gloo, 10.0)), log_tail=(gloo,)
    )
    failure = classify(aborted)
    assert failure is not None and failure.kind is K.COMM_ERROR


# A notebook's traceback (IPython 8), as Jupyter and VS Code print it: the exception named first, frames as
# `File <path>:<line>, in <Class.method>(<args>)`
NOTEBOOK_EVAL_OOM = (
    "OutOfMemoryError                          Traceback (most recent call last)",
    "Cell In[21], line 2",
    "----> 2 eval_metrics = trainer.evaluate(metric_key_prefix='eval')",
    "File /usr/lib/python3/dist-packages/transformers/trainer.py:2113, in Trainer.evaluate(self, eval_dataset)",
    "-> 2113 output = eval_loop(",
)


@pytest.mark.parametrize(
    ("lines", "kind"),
    [
        pytest.param(NOTEBOOK_EVAL_OOM, K.CUDA_OOM_EVAL, id="notebook-frames-name-the-phase"),
        pytest.param(
            ("NotImplementedError                       Traceback (most recent call last)", "Cell In[23], line 1"),
            K.USER_ERROR,
            id="notebook-header-names-the-exception",
        ),
        pytest.param(  # IPython 7's frames: `<path> in <function>(<args>)`
            (
                "TimeoutError                              Traceback (most recent call last)",
                "/usr/lib/python3.6/urllib/request.py in do_open(self, http_class, req, **http_conn_args)",
                "TimeoutError: [Errno 110] Connection timed out",
            ),
            K.DOWNLOAD,
            id="a-socket-timeout-in-urllib-is-a-download",
        ),
        pytest.param(
            (
                '  File "/usr/lib/python3.8/urllib/request.py", line 649, in http_error_default',
                "HTTPError: Service Unavailable",
            ),
            K.DOWNLOAD,
            id="a-server-status-in-an-HTTPError",
        ),
        pytest.param(("HTTPError: 404 Client Error: Not Found for url",), K.USER_ERROR, id="a-404-stays-the-users"),
        pytest.param(
            (
                "Epoch 1:  77%|███████▋  | 27/35 [00:12<00:03]/env/lib/python3.7/site-packages/pytorch_lightning/"
                "utilities/distributed.py:25: UserWarning: Detected KeyboardInterrupt, attempting graceful shutdown...",
                "  warnings.warn(*args, **kwargs)",
            ),
            K.INTERRUPTED,
            id="lightnings-own-word-of-a-ctrl-c",
        ),
        pytest.param(
            (
                "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch "
                "installation.",
            ),
            K.USER_ERROR,
            id="a-torch-without-kernels-for-the-gpu",
        ),
        pytest.param(
            ("OSError: Not enough disk space. Needed: 134.92 GiB (download: 41.97 GiB, generated: 92.95 GiB)",),
            K.DISK_FULL,
            id="datasets-own-disk-check",
        ),
        pytest.param(
            (
                "Libfabric error: (-12) Cannot allocate memory",
                "EFA internal error: (4112) Failure to post internal receive buffers",
            ),
            K.MEMLOCK,
            id="libfabrics-enomem-is-locked-memory",
        ),
        pytest.param(
            ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient",),
            K.SHM,
            id="the-dataloaders-bus-error-with-its-hint-cut",
        ),
        # held-out set v16's, each written as another tool would
        pytest.param(("RuntimeError: CUDA error 2: out of memory",), K.CUDA_OOM, id="cuda-runtime-code-2"),
        pytest.param(("worker 3 segfaulted while building the engine",), K.CRASH, id="segfaulted"),
        pytest.param(("IB error: ibv_post_send: Cannot allocate memory",), K.MEMLOCK, id="a-verbs-enomem"),
        pytest.param(("[my_ext.cpp] CUresult error result=700 func=copy line=9",), K.CUDA_ERROR, id="cu-result"),
        pytest.param(
            (
                "[/usr/lib/python3/site-packages/transformers/trainer.py](https://localhost:8080/#) in "
                "evaluation_loop(self, dataloader, description)",
                "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            ),
            K.CUDA_OOM_EVAL,
            id="colab-markdown-frame",
        ),
        pytest.param(
            (
                "Traceback (most recent call last):",
                '  File "train.py", line 9, in __val',
                "    out = net(x)",
                "RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB",
            ),
            K.CUDA_OOM_EVAL,
            id="a-scripts-own-val",
        ),
        pytest.param(
            (
                '  File "/env/vllm/v1/engine/core.py", line 190, in _initialize_kv_caches',
                "ValueError: To serve at least one request with the models's max seq len (32768), (1.75 GiB KV cache "
                "is needed, which is larger than the available KV cache memory (0.62 GiB).",
            ),
            K.CUDA_OOM_LOAD,
            id="vllms-kv-cache-at-engine-start",
        ),
        pytest.param(
            (
                "Refer to the documentation on how to address the out of memory issue: "
                "https://docs.ray.io/en/master/ray-core/scheduling/ray-oom-prevention.html.",
            ),
            K.HOST_OOM,
            id="rays-memory-monitor-advice",
        ),
        # held-out set v17's, each written as another tool would
        pytest.param(
            (
                "Traceback (most recent call last):",
                '  File "/app/train.py", line 40, in main',
                "    trainer = DPOTrainer(model, args=args)",
                '  File "/env/trl/trainer/dpo_trainer.py", line 310, in __init__',
                "    super().__init__(model=model, args=args)",
                '  File "/env/transformers/trainer.py", line 520, in __init__',
                "    self._move_model_to_device(model, args.device)",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB",
            ),
            K.CUDA_OOM_LOAD,
            id="a-trainers-constructor-places-the-model",
        ),
        pytest.param(
            ("INFO 01-02 03:04:05 llm_engine.py:280] # GPU blocks: 0, # CPU blocks: 512",),
            K.CUDA_OOM_LOAD,
            id="vllm-no-gpu-block-left",
        ),
        pytest.param(
            ("(EngineCore pid=7) ValueError: No available memory for the cache blocks. Try increasing "
             "`gpu_memory_utilization` when initializing the engine.",),
            K.CUDA_OOM_LOAD,
            id="vllm-no-cache-blocks-at-start",
        ),
        pytest.param(
            ("^C[W 12:00:01] torchrun: sending SIGINT to workers",), K.INTERRUPTED, id="ctrl-c-echo-then-text"
        ),
        pytest.param(
            ("subprocess.CalledProcessError: Command 'train.exe' returned non-zero exit status 3221225477.",),
            K.CRASH,
            id="windows-access-violation",
        ),
        pytest.param(("Process finished with exit code -1073741571",), K.CRASH, id="windows-stack-overflow-signed"),
        pytest.param(("[node3:4411] *** End of error message ***",), K.CRASH, id="open-mpi-signal-report"),
        pytest.param(
            (
                "terminate called after throwing an instance of 'std::runtime_error'",
                "  what():  [Rank 3] ProcessGroupGloo: collective operation timeout after 1800000 ms",
            ),
            K.COMM_TIMEOUT,
            id="a-collectives-terminate-with-its-what-below",
        ),
        # held-out set v18's
        pytest.param(
            (
                "Traceback (most recent call last):",
                '  File "/env/deepspeed/runtime/engine.py", line 1420, in _configure_zero_optimizer',
                "    optimizer = DeepSpeedZeroOptimizer(",
                '  File "/env/deepspeed/runtime/zero/stage_1_and_2.py", line 550, in __init__',
                "    self.initialize_optimizer_states()",
                '  File "/env/deepspeed/runtime/zero/stage_1_and_2.py", line 700, in initialize_optimizer_states',
                "    self.optimizer.step()",
                '  File "/env/torch/optim/adam.py", line 140, in step',
                "    state['exp_avg'] = torch.zeros_like(p)",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB",
            ),
            K.CUDA_OOM_LOAD,
            id="zero-making-its-optimizer-states",
        ),
        pytest.param(
            ("[W101 10:00:00.0 CUDACachingAllocator.cpp:3934] memory allocation failed with OOM on device 1 while "
             "trying to allocate 2147483648 bytes (free: 1048576, total: 85899345920).",),
            K.CUDA_OOM,
            id="the-caching-allocators-own-warning",
        ),
    ],
)  # fmt: skip
def test_shapes_read_from_held_out_sets(lines: tuple[str, ...], kind: K) -> None:
    """The general shapes behind held-out sets v13's, v16's, v17's and v18's misses (BENCHMARKS.md), each on
    lines of its own."""
    from launcher.run.classify import classify_text

    found = classify_text(list(lines), steps_seen=True)
    assert found is not None and found[0] is kind, found


def test_srun_killing_the_other_tasks_after_one_failed_is_neither_a_stop_nor_their_failure() -> None:
    """srun's kill-on-bad-exit: task 5 exited 1, srun cancelled the step and SIGKILLed the rest. Neither the
    cancel (not the user's) nor the SIGKILLs (not the kernel's OOM killer) is the cause: task 5's exit is."""
    from launcher.run.launcher_output import parse_launcher_output

    lines = [
        "srun: error: node0824: task 5: Exited with exit code 1",
        "slurmstepd: error: *** STEP 43575862.0 ON node0824 CANCELLED AT 2021-07-14T08:00:36 ***",
        "srun: error: node0824: tasks 3,7: Killed",
    ]
    output = parse_launcher_output(lines)
    assert output.scheduler_stop is None
    assert [(f.rank, f.exit_code) for f in output.rank_failures] == [(5, 1)]
    alone = parse_launcher_output(lines[1:])  # a cancel with no failure before it is the user's (or a limit's)
    assert alone.scheduler_stop is not None and alone.rank_failures[0].exit_code == -9


KEYBOARD_INTERRUPT = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nKeyboardInterrupt'
OOM_TRACEBACK = (
    "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
)


@pytest.mark.parametrize(
    ("failure", "at", "kind"),
    [
        (RankFailure(1, -9, "", 1000.0), 1000.2, K.KILLED),  # a rank SIGKILLed, then the Ctrl-C (hostile42sig F6)
        (RankFailure(1, 1, OOM_TRACEBACK, 1000.0), 1000.9, K.CUDA_OOM),  # an OOM, then the Ctrl-C
        (RankFailure(1, -9, "", 1031.0), 1000.2, K.INTERRUPTED),  # safe-sft's own SIGKILL after --grace-period
        (RankFailure(1, -2, "", 1000.0), 1000.2, K.INTERRUPTED),  # the Ctrl-C itself
        (RankFailure(1, -15, "", 1000.0), 1000.2, K.INTERRUPTED),  # torchrun passing a signal on
        (RankFailure(1, 1, KEYBOARD_INTERRUPT, 1000.0), 1000.2, K.INTERRUPTED),  # the ranks' KeyboardInterrupt
        (RankFailure(1, -9, "", 1000.0), None, K.INTERRUPTED),  # no time for the signal: nothing to compare
        (RankFailure(1, -9, "", None), 1000.2, K.INTERRUPTED),  # no time for the failure
    ],
)
def test_a_failure_before_the_signal_stays_the_root_cause(failure: RankFailure, at: float | None, kind: K) -> None:
    """A Ctrl-C 0.2 s after a rank was killed, while torchrun wound down, had been reported as the cause
    (interrupted), the rank's death nowhere (hostile42sig F6)."""
    found = classify(
        AttemptEvidence(exit_code=-2, rank_failures=(failure,), interrupted_by="SIGINT", interrupted_at=at)
    )
    assert found is not None and found.kind is kind
    if kind is K.INTERRUPTED:
        assert (found.evidence, found.rank) == (("safe-sft received SIGINT",), None)
    else:
        assert (found.evidence[-1], found.rank) == ("then safe-sft received SIGINT", 1)


@pytest.mark.parametrize(
    ("lines", "fix"),
    [
        pytest.param(
            ["[rank0]: OSError: [Errno 24] Too many open files: '/out/attempt-1/error.json'"],
            "fix: raise the open-files limit",
            id="ulimit-n",
        ),
        pytest.param(
            ["OSError: [Errno 30] Read-only file system: '/home/u/.cache/modelscope'"],
            "fix: that path is on a read-only filesystem",
            id="read-only-cache",
        ),
        pytest.param(
            [
                '  File "/env/multiprocess/synchronize.py", line 63, in __init__',
                "    sl = self._semlock = _multiprocessing.SemLock(",
                "OSError: [Errno 30] Read-only file system",
            ],
            "fix: /dev/shm is read-only",
            id="read-only-dev-shm",
        ),
        pytest.param(
            ["RuntimeError: can't start new thread"], "fix: raise the process and thread limit", id="ulimit-u"
        ),
        pytest.param(
            [
                "importlib.metadata.PackageNotFoundError: No package metadata was found for The 'deepspeed>=0.9.3' "
                "distribution was not found and is required by this application"
            ],
            "fix: install the package it names",
            id="a-package-not-installed",
        ),
        pytest.param(
            ["PermissionError: [Errno 13] Permission denied: '/models/qwen/model.safetensors'"],
            "fix: make that path readable",
            id="permission",
        ),
    ],
)
def test_a_machines_own_limit_is_a_user_error_with_its_fix(lines: list[str], fix: str) -> None:
    """A read-only path, the open-files and thread limits and a permission are met again by every retry: a user
    error whose evidence says what to change (hostile47env F5), not `unknown` retried unchanged."""
    from launcher.run.classify import classify_text

    found = classify_text(lines, steps_seen=False)
    assert found is not None and found[0] is K.USER_ERROR, found
    assert found[1][-1].startswith(fix), found


def test_enospc_from_a_semaphore_in_dev_shm_is_shm_and_elsewhere_a_full_disk() -> None:
    """Python's multiprocessing makes its semaphores in /dev/shm; a full tmpfs there raises an ENOSPC that names
    no path: a DataLoader's workers' Event is the shm failure (its rung, no workers, fixes it), not a full disk
    (hostile47env F1). The same error from a checkpoint's write is a full disk."""
    from launcher.run.classify import classify_text

    semaphore = [
        "Traceback (most recent call last):",
        '  File "/env/torch/utils/data/dataloader.py", line 1137, in __init__',
        "    self._workers_done_event = multiprocessing_context.Event()",
        '  File "/usr/lib/python3.11/multiprocessing/synchronize.py", line 57, in __init__',
        "    sl = self._semlock = _multiprocessing.SemLock(",
        "OSError: [Errno 28] No space left on device",
    ]
    found = classify_text(semaphore, steps_seen=False)
    assert found is not None and found[0] is K.SHM, found
    save = [
        "Traceback (most recent call last):",
        '  File "/env/safetensors/torch.py", line 286, in save_file',
        "OSError: [Errno 28] No space left on device",
    ]
    found = classify_text(save, steps_seen=True)
    assert found is not None and found[0] is K.DISK_FULL, found


def test_a_wrapped_dataset_error_is_shown_with_what_it_wraps() -> None:
    """`DatasetGenerationError: An error occurred while generating the dataset` names neither the file nor what
    was wrong with it: the evidence leads with `datasets`' own line naming both, else the exception the chain's
    `direct cause` follows (hostile47data F4)."""
    from launcher.run.classify import classify_text

    chain = [
        "[rank0]: pyarrow.lib.ArrowInvalid: JSON parse error: Missing a name for object member. in row 14381",
        "[rank0]: ",
        "[rank0]: The above exception was the direct cause of the following exception:",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/env/datasets/builder.py", line 1898, in _prepare_split_single',
        '[rank0]:     raise DatasetGenerationError("An error occurred while generating the dataset") from e',
        "[rank0]: datasets.exceptions.DatasetGenerationError: An error occurred while generating the dataset",
    ]
    found = classify_text(chain, steps_seen=False)
    assert found is not None and found[0] is K.USER_ERROR
    assert found[1] == (
        "pyarrow.lib.ArrowInvalid: JSON parse error: Missing a name for object member. in row 14381",
        "datasets.exceptions.DatasetGenerationError: An error occurred while generating the dataset",
    )
    named = "Failed to load JSON from file '/data/big.jsonl' with error <class 'pyarrow.lib.ArrowInvalid'>: JSON parse"
    found = classify_text([f"Generating train split: 109076 examples{named} error in row 3", *chain], steps_seen=False)
    assert found is not None and found[1][0] == f"{named} error in row 3"
