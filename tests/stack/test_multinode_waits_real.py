"""Multi-node waits with real safe-sft processes on loopback: each is bounded by --node-timeout, says what
it waits for, for whom and until when, and ends within 2 s of Ctrl-C. No training starts in these tests:
every wait here comes before the first torchrun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CPU_ARGS = ["--model", "m", "--use_cpu", "true"]
SWIFT_STARTED = "safe-sft: attempt 1/"  # the line before torchrun starts


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_node_left_behind() -> Iterator[None]:
    yield
    while STARTED:
        node = STARTED.pop()
        if node.poll() is None:  # a failed test: the wait it checked never ended
            node.kill()
            node.wait(timeout=10)


def start(
    tmp: Path,
    rank: int,
    port: int,
    *,
    addr: str = "127.0.0.1",
    timeout: float = 6,
    run_id: str | None = None,
    extra: tuple[str, ...] = (),
    own_extra: tuple[str, ...] = (),
    nnodes: int = 2,
    log_name: str | None = None,
) -> tuple[subprocess.Popen[str], Path]:
    env = {**os.environ, "NNODES": str(nnodes), "NODE_RANK": str(rank), "NPROC_PER_NODE": "1", "MASTER_ADDR": addr,
           "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1"}  # fmt: skip
    log = tmp / (log_name or f"node{rank}.log")
    own = ["--allow-loopback-master", "--node-timeout", str(timeout), *(["--run-id", run_id] if run_id else []),
           *own_extra]  # fmt: skip
    cmd = [sys.executable, "-m", "launcher", *own, *CPU_ARGS, "--output_dir", str(tmp / "out"), *extra]
    STARTED.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True))
    return STARTED[-1], log


def wait_for_line(log: Path, text: str, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text():
            return time.monotonic()
        time.sleep(0.05)
    pytest.fail(f"{text!r} never appeared in {log}:\n{log.read_text()[-2000:]}")


def errors(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("safe-sft: error:")]


def ended_report(out: Path, rank: int) -> dict[str, object]:
    """The node's report.json once it has ended: never `running`, and its disk reserve given back."""
    import json

    [run_dir] = (out / "safe-sft").glob(f"*-node{rank}")
    assert not (run_dir / "report.reserve").exists()
    report: dict[str, object] = json.loads((run_dir / "report.json").read_text())
    assert report["attempts"] == []  # no training started
    return report


def test_unresolvable_master_addr_on_node_1_ends_with_exit_4_within_node_timeout(tmp_path: Path) -> None:
    node, log = start(tmp_path, 1, 29731, addr="no-such-host.invalid", timeout=6)
    waiting = wait_for_line(log, "safe-sft: node 1: waiting for node 0's safe-sft")
    code = node.wait(timeout=60)
    assert code == 4, log.read_text()[-2000:]
    assert time.monotonic() - waiting < 6 + 2
    text = log.read_text()
    assert "(its coordination store at no-such-host.invalid:29732" in text and ", until " in text
    assert "; so far: cannot resolve MASTER_ADDR=no-such-host.invalid (Name or service not known), until " in text
    assert errors(log) == [
        "safe-sft: error: node 1: gave up after 6 s (--node-timeout) waiting for node 0's safe-sft (its coordination "
        "store at no-such-host.invalid:29732, run no-such-host.invalid:29731): cannot resolve "
        "MASTER_ADDR=no-such-host.invalid (Name or service not known)"
    ]
    report = ended_report(tmp_path / "out", 1)
    assert (report["outcome"], report["exit_code"]) == ("failed", 4)
    assert "cannot resolve MASTER_ADDR=no-such-host.invalid" in str(report["give_up_reason"])
    assert "socket.cpp" not in text and "Traceback" not in text  # no C++ socket warnings, no traceback


def test_unresolvable_master_addr_on_node_0_is_one_line_naming_it(tmp_path: Path) -> None:
    """Node 0 had printed torch's C++ stack frames and told itself to start node 0 first."""
    node, log = start(tmp_path, 0, 29741, addr="no-such-host.invalid", timeout=6)
    assert node.wait(timeout=60) == 4, log.read_text()[-2000:]
    text = log.read_text()
    assert errors(log) == [
        "safe-sft: error: node 0: cannot resolve MASTER_ADDR=no-such-host.invalid (Name or service not known), "
        "the address of node 0, which is this host"
    ]
    assert "socket.cpp" not in text and "Traceback" not in text and "start node 0" not in text
    assert ended_report(tmp_path / "out", 0)["exit_code"] == 4


def test_node_0_whose_peer_never_starts_gives_up_after_node_timeout(tmp_path: Path) -> None:
    node, log = start(tmp_path, 0, 29741, timeout=6)
    waiting = wait_for_line(log, "safe-sft: node 0: waiting for node(s) 1 of 2 to start safe-sft (run 127.0.0.1:29741)")
    code = node.wait(timeout=60)
    assert code == 4, log.read_text()[-2000:]
    assert time.monotonic() - waiting < 6 + 2
    assert errors(log) == [
        "safe-sft: error: gave up after 6 s (--node-timeout) waiting for node(s) 1 of 2 to start safe-sft "
        "(run 127.0.0.1:29741)"
    ]
    assert SWIFT_STARTED not in log.read_text()  # no torchrun was left waiting for the peer
    assert not list((tmp_path / "out").glob("safe-sft/*/attempt-1"))
    report = ended_report(tmp_path / "out", 0)
    assert (report["outcome"], report["exit_code"]) == ("failed", 4)


def test_two_nodes_of_different_runs_both_give_up_within_node_timeout(tmp_path: Path) -> None:
    """Node 1 reaches node 0's store but names another run: neither starts training, both say why."""
    node0, log0 = start(tmp_path, 0, 29751, timeout=8, run_id="job-a")
    wait_for_line(log0, "waiting for node(s) 1 of 2")
    node1, log1 = start(tmp_path, 1, 29751, timeout=8, run_id="job-b")
    codes = [node0.wait(timeout=60), node1.wait(timeout=90)]
    assert codes == [4, 4], log0.read_text()[-1500:] + log1.read_text()[-1500:]
    assert "waiting for node(s) 1 of 2 to start safe-sft (run job-a)" in errors(log0)[0]
    assert "safe-sft: node 1: waiting for node 0's shared-filesystem token, until " in log1.read_text()
    assert "lost node 0's safe-sft" in errors(log1)[0] or "never published" in errors(log1)[0]  # whichever came first
    assert SWIFT_STARTED not in log0.read_text() + log1.read_text()


@pytest.mark.parametrize(
    ("node0", "node1", "named"),
    [
        pytest.param(
            {"extra": ("--per_device_train_batch_size", "2")},
            {"extra": ("--per_device_train_batch_size", "4")},
            "--per_device_train_batch_size is '2' on node 0, '4' on node 1",
            id="batch",
        ),
        pytest.param(
            {},
            {"own_extra": ("--resume-latest",)},
            "safe-sft's --resume-latest is 'not given' on node 0, 'given' on node 1",
            id="resume-latest",
        ),
    ],
)
def test_nodes_given_different_arguments_both_stop_before_training_naming_the_difference(
    tmp_path: Path, node0: dict[str, tuple[str, ...]], node1: dict[str, tuple[str, ...]], named: str
) -> None:
    """They would train neither node's plan: a global batch of both, and after an OOM node 1 would take
    node 0's settings as its own; with different --max_steps, or one node resuming at step 8 and the other
    starting at 0, one node would wait in a collective until the watchdog's timeout."""
    zero, log0 = start(tmp_path, 0, 29771, timeout=20, **node0)  # type: ignore[arg-type]
    one, log1 = start(tmp_path, 1, 29771, timeout=20, **node1)  # type: ignore[arg-type]
    codes = [zero.wait(timeout=90), one.wait(timeout=90)]
    assert codes == [4, 4], log0.read_text()[-1500:] + log1.read_text()[-1500:]
    line = f"safe-sft: error: the nodes would start differently: {named}"
    assert errors(log0) == [line] and errors(log1) == [line]
    assert SWIFT_STARTED not in log0.read_text() + log1.read_text()
    for rank in (0, 1):
        report = ended_report(tmp_path / "out", rank)
        assert (report["outcome"], report["exit_code"]) == ("failed", 4)


def test_a_node_rank_given_twice_keeps_the_second_process_out(tmp_path: Path) -> None:
    """Three nodes, and NODE_RANK=1 given to two of them (node 2 never starts): both were let in, and both
    would have started torchrun as node 1."""
    node0, log0 = start(tmp_path, 0, 29781, timeout=8, nnodes=3)
    wait_for_line(log0, "waiting for node(s) 1,2 of 3")
    ones = [start(tmp_path, 1, 29781, timeout=8, nnodes=3, log_name=f"node1{tag}.log") for tag in "ab"]
    codes = [node.wait(timeout=90) for node in (node0, *(node for node, _ in ones))]
    assert codes == [4, 4, 4], "".join(log.read_text()[-1500:] for log in (log0, *(log for _, log in ones)))
    twice = "safe-sft: error: two safe-sft processes joined run 127.0.0.1:29781 as node 1 (NODE_RANK=1 given twice)"
    assert sorted(errors(log) == [twice] for _, log in ones) == [False, True]  # the one that came second
    assert SWIFT_STARTED not in "".join(log.read_text() for log in (log0, *(log for _, log in ones)))


def test_a_node_rank_given_twice_before_node_0_started_stops_every_node(tmp_path: Path) -> None:
    """Both NODE_RANK=1 processes waiting when node 0 starts: they check in within a moment of each other, and
    node 0 had trained with whichever came first, its log silent on the other (hostile46mn F3)."""
    ones = [start(tmp_path, 1, 29791, timeout=30, log_name=f"node1{tag}.log") for tag in "ab"]
    for _, log in ones:
        wait_for_line(log, "waiting for node 0's safe-sft")
    node0, log0 = start(tmp_path, 0, 29791, timeout=30)
    codes = [node.wait(timeout=90) for node in (node0, *(node for node, _ in ones))]
    assert codes == [4, 4, 4], "".join(log.read_text()[-1500:] for log in (log0, *(log for _, log in ones)))
    # node 0 sees the rank taken twice, or hears it from the process kept out ("node 1 stopped before training")
    [line] = errors(log0)
    assert line.endswith("two safe-sft processes joined run 127.0.0.1:29791 as node 1 (NODE_RANK=1 given twice)")
    assert SWIFT_STARTED not in "".join(log.read_text() for log in (log0, *(log for _, log in ones)))


@pytest.mark.parametrize(
    ("rank", "line"),
    [
        pytest.param(0, "safe-sft: node 0: waiting for node(s) 1 of 2", id="node-0-waits-for-its-peer"),
        pytest.param(1, "safe-sft: node 1: waiting for node 0's safe-sft", id="node-1-waits-for-node-0"),
    ],
)
def test_ctrl_c_ends_a_wait_within_2_seconds(tmp_path: Path, rank: int, line: str) -> None:
    node, log = start(tmp_path, rank, 29761 + 10 * rank, timeout=300)
    wait_for_line(log, line)
    node.send_signal(signal.SIGINT)
    sent = time.monotonic()
    code = node.wait(timeout=30)
    assert time.monotonic() - sent < 2.0, log.read_text()[-1500:]
    assert code == 130
    assert errors(log)[0].startswith("safe-sft: error: SIGINT received while waiting for ")
    assert "Traceback" not in log.read_text()
    report = ended_report(tmp_path / "out", rank)
    assert (report["outcome"], report["exit_code"]) == ("interrupted", 130)
