"""The launcher parser: each launcher's failure report, as one line or a block, read into rank failures."""

from __future__ import annotations

import pytest

from launcher.model import Confidence
from launcher.model import FailureKind as K
from launcher.run.classify import classify
from launcher.run.launcher_output import parse_launcher_output, signal_of_status, to_evidence

AGENT = (
    "E1123 10:00:01.123000 4242 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -9) "
    "local_rank: 3 (pid: 4711) of binary: /usr/bin/python3"
)
SUMMARY_SIGBUS = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_12:00:00
  host      : gpu-node-7
  rank      : 5 (local_rank: 5)
  exitcode  : -7 (pid: 999)
  error_file: <N/A>
  traceback : Signal 7 (SIGBUS) received by PID 999
============================================================"""
DEEPSPEED = (
    "[2024-01-02 03:04:05,678] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
    "'--local_rank=2', '--deepspeed', 'ds.json'] exits with return code = -9"
)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        pytest.param([AGENT], [(3, -9)], id="torchrun-agent-line"),
        pytest.param(SUMMARY_SIGBUS.splitlines(), [(5, -7)], id="torchrun-summary-signal"),
        pytest.param([DEEPSPEED], [(2, -9)], id="deepspeed-launcher"),
        pytest.param(
            ["subprocess.CalledProcessError: Command '['torchrun', 'x.py']' died with <Signals.SIGKILL: 9>."],
            [(None, -9)],
            id="subprocess-died-with-signal",
        ),
        pytest.param(
            ["subprocess.CalledProcessError: Command '['torchrun', 'x.py']' returned non-zero exit status 137."],
            [(None, -9)],
            id="subprocess-status-137",
        ),
        pytest.param(
            ["subprocess.CalledProcessError: Command '['torchrun', 'x.py']' returned non-zero exit status 1."],
            [],
            id="subprocess-status-1-says-nothing",
        ),
        pytest.param(["srun: error: node-3: task 1: Killed"], [(1, -9)], id="srun-task-killed"),
        pytest.param(["run.sh: line 12: 31337 Killed                  python train.py"], [(None, -9)], id="bash"),
        pytest.param(["Segmentation fault (core dumped)"], [(None, -11)], id="shell-segfault"),
        pytest.param(["**Killed**"], [(None, -9)], id="shell-killed-in-markdown-bold"),
        # the shell in a Chinese locale (held-out set v18)
        pytest.param(["已杀死"], [(None, -9)], id="shell-killed-zh"),
        pytest.param(
            ["train.sh: 行 7: 4242 段错误 (核心已转储) python train.py"], [(None, -11)], id="bash-segfault-zh"
        ),
        pytest.param(["[1]+  已终止               python train.py"], [(None, -15)], id="job-control-terminated-zh"),
        pytest.param(["总线错误 (核心已转储)"], [(None, -7)], id="shell-bus-error-zh"),
        pytest.param(
            ["mpirun noticed that process rank 1 with PID 4242 on node gpu7 exited on signal 9 (Killed)."],
            [(1, -9)],
            id="open-mpi",
        ),
        pytest.param(
            ["=   RANK 6 PID 2447372 RUNNING AT node0009", "=   KILLED BY SIGNAL: 9 (Killed)"], [(None, -9)], id="mpich"
        ),
        pytest.param([AGENT, *SUMMARY_SIGBUS.splitlines()], [(5, -7), (3, -9)], id="summary-first-then-agent"),
    ],
)
def test_rank_failures_from_launcher_lines(lines: list[str], expected: list[tuple[int | None, int]]) -> None:
    output = parse_launcher_output(lines)
    assert [(f.rank, f.exit_code) for f in output.rank_failures] == expected


@pytest.mark.parametrize(
    ("line", "signal_name"),
    [
        (
            "[2024-01-01 00:00:00,000] torch.distributed.elastic.agent.server.api: [WARNING] Received Signals.SIGHUP "
            "death signal, shutting down workers",
            "SIGHUP",
        ),
        (
            "W0101 00:00:00.000 1 torch/distributed/elastic/agent/server/api.py:704] Received 15 death signal, "
            "shutting down workers",
            "SIGTERM",
        ),
        ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 77 got signal: 2", "SIGINT"),
        ("KeyboardInterrupt", "SIGINT"),
    ],
)
def test_launcher_signal(line: str, signal_name: str) -> None:
    signal = parse_launcher_output([line]).launcher_signal
    assert signal is not None and signal[0] == signal_name


@pytest.mark.parametrize(
    ("line", "kernel", "stop"),
    [
        (
            "slurmstepd: error: Detected 1 oom_kill event in StepId=42.0. Some of your processes may have been killed "
            "by the cgroup out-of-memory handler.",
            True,
            False,
        ),
        ("[12345.678] Out of memory: Killed process 4711 (python) total-vm:99kB, anon-rss:88kB", True, False),
        ("[1.2] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,task=python", True, False),
        ("slurmstepd: error: *** JOB 77 ON gpu-1 CANCELLED AT 2024-02-02T10:00:00 DUE TO TIME LIMIT ***", False, True),
        ("slurmstepd: error: *** STEP 77.0 ON gpu-1 CANCELLED AT 2024-02-02T10:00:00 ***", False, True),
        ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.", False, True),  # LSF's job report
        ("TERM_OWNER: job killed by owner.", False, True),
        ("TERM_REQUEUE_ADMIN: job killed and requeued by root or LSF administrator.", False, True),
        ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", True, False),
        ("TERM_CWD_NOTEXIST: current working directory is not accessible", False, False),  # the user's, not a stop
        ("=>> PBS: job killed: walltime 7230 exceeded limit 7200", False, True),
        ("=>> PBS: job killed: mem job total 34000000 kb exceeded limit 33554432 kb", True, False),
        ("INFO: training step 5 of 100", False, False),
    ],
)
def test_kernel_and_scheduler_lines(line: str, kernel: bool, stop: bool) -> None:
    output = parse_launcher_output([line])
    assert bool(output.kernel_oom) is kernel
    assert (output.scheduler_stop is not None) is stop


@pytest.mark.parametrize(
    ("code", "signum"), [(-9, 9), (137, 9), (139, 11), (143, 15), (1, None), (0, None), (255, None)]
)
def test_exit_status_signals(code: int, signum: int | None) -> None:
    assert signal_of_status(code) == signum


def explain_lines(lines: list[str]):  # type: ignore[no-untyped-def]
    return classify(to_evidence(parse_launcher_output(lines), lines))


def test_a_sigkill_in_a_saved_log_is_a_thin_host_oom_with_killed_runner_up() -> None:
    failure = explain_lines([AGENT])
    assert failure is not None
    assert (failure.kind, failure.rank, failure.confidence, failure.runner_up) == (
        K.HOST_OOM,
        3,
        Confidence.THIN,
        K.KILLED,
    )


def test_a_kernel_line_makes_the_sigkill_a_firm_host_oom() -> None:
    failure = explain_lines([AGENT, "[9.9] Out of memory: Killed process 4711 (python)"])
    assert failure is not None
    assert (failure.kind, failure.confidence) == (K.HOST_OOM, Confidence.FIRM)
    assert "Out of memory: Killed process 4711 (python)" in failure.evidence[-1]


def test_sigbus_is_a_thin_shm() -> None:
    failure = explain_lines(SUMMARY_SIGBUS.splitlines())
    assert failure is not None
    assert (failure.kind, failure.rank, failure.confidence, failure.runner_up) == (K.SHM, 5, Confidence.THIN, K.CRASH)


def test_a_time_limit_beats_the_sigterms_it_causes() -> None:
    lines = [
        "W0101 torch/distributed/elastic/agent/server/api.py] failed (exitcode: -15) local_rank: 0 (pid: 1)",
        "slurmstepd: error: *** JOB 77 ON gpu-1 CANCELLED AT 2024-02-02T10:00:00 DUE TO TIME LIMIT ***",
    ]
    failure = explain_lines(lines)
    assert failure is not None and failure.kind is K.INTERRUPTED
    assert "DUE TO TIME LIMIT" in failure.evidence[0]


def test_an_lsf_job_reports_termination_reason_beats_the_signal_it_sent() -> None:
    """LSF's report after a job it stopped: the shell's word for the warning signal, then the reason and the
    exit status (128 + SIGTERM). The reason is what stopped the job, as Slurm's CANCELLED line is."""
    lines = [
        "User defined signal 2",
        "------------------------------------------------------------",
        "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
        "Exited with exit code 140.",
    ]
    failure = explain_lines(lines)
    assert failure is not None and failure.kind is K.INTERRUPTED
    assert failure.evidence[0] == "TERM_RUNLIMIT: job killed after reaching LSF run time limit."
    owner = explain_lines(["Terminated", "TERM_OWNER: job killed by owner.", "Exited with exit code 143."])
    assert owner is not None and owner.kind is K.INTERRUPTED  # bkill, as scancel: not another agent's SIGTERM


def test_an_oom_seen_only_in_rank_prefixed_lines() -> None:
    lines = [
        "[rank6]: Traceback (most recent call last):",
        "[rank2]: some other rank's chatter",
        '[rank6]:   File "/x/transformers/trainer.py", line 3331, in _save_checkpoint',
        "[rank2]: Error: peer closed",
        "[rank6]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.",
    ]
    failure = explain_lines(lines)
    assert failure is not None
    assert (failure.kind, failure.rank) == (K.CUDA_OOM_SAVE, 6)


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param(  # a checkpoint load inside the training loop (a DeepSpeed resume) is a load, not a step
            ['  File "/x/transformers/trainer.py", line 1, in _inner_training_loop',
             '  File "/x/transformers/integrations/deepspeed.py", line 2, in deepspeed_load_checkpoint',
             '  File "/x/deepspeed/runtime/engine.py", line 3, in load_checkpoint'],
            id="innermost-phase-frame-decides",
        ),
        pytest.param(  # a model built straight on the GPU (a CUDA default device): a layer's __init__
            ['  File "train.py", line 97, in train', '  File "/x/torch/nn/modules/conv.py", line 41, in __init__'],
            id="a-layer-built-on-the-gpu",
        ),
    ],
)  # fmt: skip
def test_an_oom_under_a_loading_frame_is_a_load(frames: list[str]) -> None:
    failure = explain_lines(["Traceback (most recent call last):", *frames, "RuntimeError: CUDA out of memory."])
    assert failure is not None and failure.kind is K.CUDA_OOM_LOAD


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("  Warning  Evicted  109s  kubelet  Pod ephemeral local storage usage exceeds the total limit of 5Gi.",
         K.DISK_FULL),
        ("  Warning  Evicted  3m  kubelet  The node was low on resource: memory. Container trainer was using 61Gi.",
         K.HOST_OOM),
        ("RuntimeError: NCCL communicator was aborted.", K.COMM_ERROR),
    ],
)  # fmt: skip
def test_a_kubelets_eviction_and_an_aborted_communicator(line: str, kind: K) -> None:
    failure = explain_lines([line])
    assert failure is not None and failure.kind is kind


def test_an_nccl_watchdog_through_terminate_is_a_timeout_not_a_crash() -> None:
    lines = [
        "[rank1]:[E1123 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "Fatal Python error: Aborted",
    ]
    failure = explain_lines(lines)
    assert failure is not None and failure.kind is K.COMM_TIMEOUT


def test_no_failure_line_gives_unknown_without_invented_evidence() -> None:
    failure = explain_lines(["loading data", "step 3/10"])
    assert failure is not None
    assert failure.kind is K.UNKNOWN and failure.confidence is Confidence.THIN
    assert all("exit code" not in line for line in failure.evidence)


@pytest.mark.parametrize(
    ("code", "kind", "confidence"),
    [(2, K.USER_ERROR, Confidence.THIN), (127, K.USER_ERROR, Confidence.THIN), (1, K.UNKNOWN, Confidence.THIN)],
)
def test_exit_codes_with_a_conventional_meaning(code: int, kind: K, confidence: Confidence) -> None:
    failure = explain_lines([f"E1123 torch/distributed/elastic/multiprocessing/api.py] failed (exitcode: {code}) "
                             "local_rank: 0 (pid: 1) of binary: /usr/bin/python3"])  # fmt: skip
    assert failure is not None
    assert (failure.kind, failure.confidence) == (kind, confidence)


def test_node_1s_killed_rank_is_named_by_its_global_rank() -> None:
    """torchrun's agent line names the local rank (`local_rank: 0` on node 1), its summary the global one
    (`rank : 1 (local_rank: 0)`): node 1 had reported the death of rank 1 as rank 0's (hostile44slurm F5)."""
    lines = [
        "W1129 05:20:00.1 api.py:900] failed (exitcode: -9) local_rank: 0 (pid: 123) of binary: /usr/bin/python3",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-11-29_05:20:00",
        "  host      : n2",
        "  rank      : 1 (local_rank: 0)",
        "  exitcode  : -9 (pid: 123)",
        "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 123",
        "============================================================",
    ]
    failures = parse_launcher_output(lines).rank_failures
    assert [(f.rank, f.exit_code) for f in failures] == [(1, -9)]
