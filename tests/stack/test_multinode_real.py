"""Two nodes on this machine: two safe-sft processes, each with its torchrun (NPROC_PER_NODE=1, gloo),
first on loopback, then each in its own network namespace with its own address."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.stack.test_supervise_real import _alive, fault_env, last_step, run_dirs, swift_args


def node_env(tmp: Path, rank: int, port: int, fault: str | None, addr: str = "127.0.0.1") -> dict[str, str]:
    env = fault_env(tmp, fault)
    env.update(NNODES="2", NODE_RANK=str(rank), NPROC_PER_NODE="1", MASTER_ADDR=addr, MASTER_PORT=str(port),
               OMP_NUM_THREADS="1")  # fmt: skip
    return env


def start_node(
    args: list[str], env: dict[str, str], log: Path, prefix: list[str] | None = None
) -> subprocess.Popen[str]:
    cmd = [*(prefix or []), sys.executable, "-m", "launcher", "--grace-period", "5", *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True)


def node_reports(out: Path) -> dict[int, dict]:  # type: ignore[type-arg]
    found = {}
    for path in (out / "safe-sft").glob("*-node*/report.json"):
        found[int(path.parent.name.rsplit("node", 1)[1])] = json.loads(path.read_text())
    return found


def assert_one_decision(out: Path) -> None:
    reports = node_reports(out)
    assert set(reports) == {0, 1}
    for report in reports.values():
        assert report["outcome"] == "succeeded"
        assert len(report["attempts"]) == 2
    first = [reports[n]["attempts"][0]["decision"] for n in (0, 1)]
    assert first[0] == first[1]
    assert (first[0]["action"], first[0]["root_kind"], first[0]["root_node"]) == ("retry", "cuda_oom", 1)
    second = [reports[n]["attempts"][1] for n in (0, 1)]
    assert second[0]["settings"] == second[1]["settings"]
    assert (
        second[0]["settings"]["per_device_train_batch_size"],
        second[0]["settings"]["gradient_accumulation_steps"],
    ) == (1, 4)
    assert second[0]["resumed_from"]["checkpoint"] == second[1]["resumed_from"]["checkpoint"]
    assert second[0]["resumed_from"]["checkpoint"].endswith("checkpoint-3")
    assert last_step(run_dirs(out)[-1]) == "8/8"


def test_a_two_nodes_agree_on_one_plan_after_an_oom_on_node_1(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out, port = tmp_path / "out", 29700
    args = ["--allow-loopback-master", *swift_args(tiny, out)]
    nodes = [start_node(args, node_env(tmp_path, r, port, "oom_step:4:1"), tmp_path / f"node{r}.log") for r in (0, 1)]
    codes = [node.wait(timeout=300) for node in nodes]
    assert codes == [0, 0], (tmp_path / "node0.log").read_text()[-2000:] + (tmp_path / "node1.log").read_text()[-2000:]
    assert_one_decision(out)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def two_hosts() -> Iterator[tuple[str, str]]:
    """Two network namespaces joined by a veth pair: 10.200.0.1 (node 0) and 10.200.0.2 (node 1)."""
    if os.geteuid() != 0:
        pytest.fail("CANNOT RUN: network namespaces need root")
    tag = uuid.uuid4().hex[:6]
    ns = (f"ssft0-{tag}", f"ssft1-{tag}")
    try:
        for name in ns:
            _ip("netns", "add", name)
        _ip("link", "add", f"sv0{tag}", "netns", ns[0], "type", "veth", "peer", "name", f"sv1{tag}", "netns", ns[1])
        for index, name in enumerate(ns):
            dev = f"sv{index}{tag}"
            _ip("-n", name, "addr", "add", f"10.200.0.{index + 1}/24", "dev", dev)
            _ip("-n", name, "link", "set", dev, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield ns
    finally:
        for name in ns:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_b_two_nodes_in_their_own_network_namespaces(tiny, tmp_path: Path, two_hosts: tuple[str, str]) -> None:  # type: ignore[no-untyped-def]
    out, port = tmp_path / "out", 29710
    nodes = []
    for rank, ns in enumerate(two_hosts):
        env = node_env(tmp_path, rank, port, "oom_step:4:1", addr="10.200.0.1")
        env["GLOO_SOCKET_IFNAME"] = f"sv{rank}{ns.rsplit('-', 1)[1]}"
        nodes.append(start_node(swift_args(tiny, out), env, tmp_path / f"node{rank}.log", ["ip", "netns", "exec", ns]))
    codes = [node.wait(timeout=300) for node in nodes]
    assert codes == [0, 0], (tmp_path / "node0.log").read_text()[-2000:] + (tmp_path / "node1.log").read_text()[-2000:]
    log0 = (tmp_path / "node0.log").read_text()
    assert "MASTER_ADDR           10.200.0.1" in log0
    assert_one_decision(out)


def _tree(pid: int) -> list[int]:
    try:
        return [pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def training_nodes(tiny, tmp_path: Path, port: int, *own: str) -> list[subprocess.Popen[str]]:  # type: ignore[no-untyped-def]
    """Two nodes training without end (no checkpoint either), once both ranks have been training a while."""
    args = ["--allow-loopback-master", *own, *swift_args(tiny, tmp_path / "out", max_steps=100000, save_steps=100000)]
    nodes = [start_node(args, node_env(tmp_path, r, port, None), tmp_path / f"node{r}.log") for r in (0, 1)]
    deadline = time.monotonic() + 180
    while len(list((tmp_path / "ranks").glob("rank-*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # training under way
    return nodes


def lose(nodes: list[subprocess.Popen[str]], lost: int, tmp_path: Path) -> tuple[int, float, str]:
    """SIGKILL node `lost`'s safe-sft; the other's exit code, how long it took to end, and its log."""
    nodes[lost].kill()
    start = time.monotonic()
    code = nodes[1 - lost].wait(timeout=180)
    return code, time.monotonic() - start, (tmp_path / f"node{1 - lost}.log").read_text()


def test_c_losing_node_0_stops_node_1_with_a_clear_error(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    nodes = training_nodes(tiny, tmp_path, 29720)
    pids = set(_tree(nodes[0].pid)) | set(_tree(nodes[1].pid))
    pids |= {json.loads(p.read_text())["pid"] for p in (tmp_path / "ranks").glob("rank-*.json")}
    code, waited, log1 = lose(nodes, 0, tmp_path)
    assert code == 4, log1[-2000:]
    assert "lost node 0's safe-sft" in log1
    report = node_reports(tmp_path / "out")[1]  # ends as the run ended, not "running"
    assert (report["outcome"], report["exit_code"]) == ("failed", 4)
    assert "lost node 0's safe-sft" in report["give_up_reason"]
    assert len(report["attempts"]) == 1 and report["attempts"][0]["exit_code"] is not None  # the attempt it stopped
    assert "failed after 1 attempt(s)" in log1 and "  run dir: " in log1
    assert waited < 2 * 5 + 10  # documented: within 2 x --grace-period + 10 s
    deadline = time.monotonic() + 15
    while _alive(sorted(pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(sorted(pids)) == []
    nodes[0].wait(timeout=5)


def test_c2_losing_node_1_ends_node_0_with_exit_4_once_its_report_is_overdue(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/exit-codes.md, 4: a node whose report never came is lost. Node 0 exited 1, after waiting 30 s more
    for the lost node to read the decision."""
    timeout = 15
    nodes = training_nodes(tiny, tmp_path, 29725, "--node-timeout", str(timeout))
    code, waited, log0 = lose(nodes, 1, tmp_path)  # node 1's ranks die with it (PR_SET_PDEATHSIG)
    assert code == 4, log0[-2000:]
    assert "node 0 decided: stop (node(s) [1] never reported)" in log0
    assert "to read the final decision" not in log0
    assert waited < timeout + 2 * 5 + 20, log0[-2000:]
    report = node_reports(tmp_path / "out")[0]
    assert (report["outcome"], report["exit_code"], len(report["attempts"])) == ("failed", 4, 1)
    nodes[1].wait(timeout=5)


def test_d_an_output_dir_the_nodes_do_not_share_stops_node_1_with_exit_4(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/exit-codes.md, 4: node 1 sees another output dir than node 0 (no shared filesystem), at start."""
    port = 29730
    logs = [tmp_path / f"node{r}.log" for r in (0, 1)]
    nodes = [
        start_node(["--allow-loopback-master", *swift_args(tiny, tmp_path / f"out{r}")],
                   node_env(tmp_path, r, port, None), logs[r])
        for r in (0, 1)
    ]  # fmt: skip
    try:
        code = nodes[1].wait(timeout=120)  # node 1 waits 30 s for node 0's token file to appear
        log1 = logs[1].read_text()
        assert code == 4, log1[-2000:]
        errors = [line for line in log1.splitlines() if line.startswith("safe-sft: error:")]
        assert len(errors) == 1 and f"the output dir {tmp_path / 'out1'} is not the one node 0 writes to" in errors[0]
        assert "Traceback" not in log1
        assert not list((tmp_path / "ranks").glob("rank-1-*.json"))  # node 1 started no training process
    finally:
        nodes[0].kill()  # its torchrun waits for node 1 at the rendezvous; PR_SET_PDEATHSIG takes it down
        nodes[0].wait(timeout=30)


def test_e_a_checkpoint_that_fails_to_load_is_set_aside_and_every_node_resumes_the_one_before(
    tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """At step 7 node 1 leaves checkpoint-6 complete on disk but unloadable, then an OOM. Attempt 2 resumes
    checkpoint-6 and dies loading it on both nodes; node 0 sets it aside and attempt 3 goes on from
    checkpoint-3 with attempt 2's settings."""
    out, port = tmp_path / "out", 29735
    args = ["--allow-loopback-master", *swift_args(tiny, out)]
    env = [node_env(tmp_path, r, port, "unloadable_oom:7:1") for r in (0, 1)]
    nodes = [start_node(args, env[r], tmp_path / f"node{r}.log") for r in (0, 1)]
    codes = [node.wait(timeout=600) for node in nodes]
    logs = [(tmp_path / f"node{r}.log").read_text() for r in (0, 1)]
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    first, second, third = node_reports(out)[0]["attempts"]
    assert (first["decision"]["root_kind"], first["decision"]["root_node"]) == ("cuda_oom", 1)
    unloadable = second["resumed_from"]["checkpoint"]
    assert unloadable.endswith("checkpoint-6")
    assert second["set_aside_checkpoint"]["path"] == unloadable
    assert "parameter groups" in second["set_aside_checkpoint"]["why"]  # the error, not transformers' warning
    assert "failed to load on node(s) [0, 1]" in second["decision"]["reason"]
    assert third["resumed_from"]["checkpoint"].endswith("checkpoint-3")
    assert third["change"]["what"] == "no change" and third["settings"] == second["settings"]
    assert node_reports(out)[1]["attempts"][2]["resumed_from"]["checkpoint"] == third["resumed_from"]["checkpoint"]
    assert Path(unloadable, "optimizer.pt").is_file()  # set aside, never deleted
    assert last_step(run_dirs(out)[-1]) == "8/8"
