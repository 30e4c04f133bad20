"""Every documented exit code that ends a run before training starts, through the real run path
(`python -m launcher SWIFT_ARGS`), with real sockets on loopback. The codes that need training (0, 1,
129, 130, 143) are the real-stack tests in tests/stack/test_supervise_real.py (test_f, one per signal), and
a second node's (4) in tests/stack/test_multinode_real.py and test_multinode_waits_real.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.probe.network import free_port


def run(args: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "NNODES", "NODE_RANK"))}
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args], env={**clean, **(env or {})},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def swift(out: Path) -> list[str]:
    return ["--model", "m", "--use_cpu", "true", "--output_dir", str(out)]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("safe-sft: error:")]


@pytest.fixture
def occupied() -> Iterator[int]:
    """A port some other process listens on (here: this test), as a neighbouring job's store would."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_2_master_port_in_use_on_node_0(occupied: int, tmp_path: Path) -> None:
    for args, env, source in (
        ([f"--master-port={occupied}"], {}, "flag"),
        ([], {"MASTER_PORT": str(occupied)}, "env"),
    ):
        result = run([*args, *swift(tmp_path / "out")], env)
        assert result.returncode == 2, result.stderr
        [line] = error_lines(result.stderr)
        assert f"MASTER_PORT={occupied} (from {source}) is already in use" in line
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "out" / "safe-sft").exists()  # nothing started, nothing written


def test_2_coordination_port_in_use_on_node_0(occupied: int, tmp_path: Path) -> None:
    env = {"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(occupied - 1)}
    result = run(["--allow-loopback-master", *swift(tmp_path / "out")], env)
    assert result.returncode == 2, result.stderr
    [line] = error_lines(result.stderr)
    assert f"the coordination port {occupied} (MASTER_PORT {occupied - 1} + 1) is already in use" in line


def test_2_a_slurm_job_on_a_taken_port_names_the_rule(tmp_path: Path) -> None:
    """The derived port of job 4242 step 0 is 20000 + 2 x 4242 = 28484; hold it, and see the rule."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", 28484))
        except OSError:
            pytest.fail("port 28484 is taken on this machine already: the test needs it free")
        sock.listen()
        env = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0",
               "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "localhost"}  # fmt: skip
        result = run(swift(tmp_path / "out"), env)
    assert result.returncode == 2, result.stderr
    [line] = error_lines(result.stderr)
    assert "MASTER_PORT=28484 (from slurm: 20000 + 2 x ((SLURM_JOB_ID 4242 + 5003 x SLURM_STEP_ID 0)" in line
    # two runs started side by side in one job step take the same port (hostile46slurm F6): the fix says so
    assert "another run in this job step holds it" in result.stderr and "start each with `srun`" in result.stderr


def test_2_bad_input_on_the_run_path(tmp_path: Path) -> None:
    result = run(swift(tmp_path / "out"), {"NPROC_PER_NODE": "two"})
    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert "NPROC_PER_NODE" in line and "'two'" in line


def test_3_nothing_fits_on_the_run_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """One 24 GiB GPU for a 72B full fine-tune. The run path refuses --assume-* (it trains on the hardware
    that is here), and this machine has no GPU: the GPU is a fake one, in-process; the rest is real."""
    import launcher.prepare
    from launcher import cli
    from tests.conftest import gpus, host

    monkeypatch.setattr(launcher.prepare, "probe_host", lambda out: host(gpus(1, 24), ram_gib=64))
    for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(
            ["--model-params", "72e9", "--model", "m", "--tuner_type", "full", "--output_dir", str(tmp_path / "out")]
        )
    err = capsys.readouterr().err
    assert exit_.value.code == 3, err[-2000:]
    [line] = error_lines(err)
    assert "nothing fits" in line and "GiB" in line
    assert not (tmp_path / "safe-sft").exists()


def test_4_node_0_unreachable_at_start(tmp_path: Path) -> None:
    """Node 1 of two, and nobody at node 0's address: exit 4 once --node-timeout has passed."""
    port = free_port()
    env = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    start = time.monotonic()
    result = run(["--allow-loopback-master", "--node-timeout", "3", *swift(tmp_path / "out")], env)
    assert result.returncode == 4, result.stderr
    [line] = error_lines(result.stderr)
    assert "waiting for node 0's safe-sft" in line and f"127.0.0.1:{port + 1}" in line
    assert time.monotonic() - start < 60


def test_2_a_requeued_job_whose_notice_checkpoint_is_incomplete(tmp_path: Path) -> None:
    """A requeued job (same job id, higher SLURM_RESTART_COUNT) resumes from the checkpoint its earlier run
    saved on notice; when that checkpoint is incomplete it is never resumed: refused before anything starts."""
    import json

    out = tmp_path / "out"
    checkpoint = out / "v0-x" / "checkpoint-5"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")  # half-written: no trainer_state.json, no weights
    mark = out / "safe-sft" / "notice-4243.json"
    mark.parent.mkdir()
    mark.write_text(json.dumps({"job_id": "4243", "restart_count": 0, "checkpoint": str(checkpoint), "step": 5}))
    env = {"SLURM_JOB_ID": "4243", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0",
           "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "localhost", "SLURM_RESTART_COUNT": "1"}  # fmt: skip
    result = run(swift(out), env)
    assert result.returncode == 2, result.stderr
    [line] = error_lines(result.stderr)
    assert line == f"safe-sft: error: the checkpoint {checkpoint} that job 4243 saved on notice is not complete"
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in (out / "safe-sft").iterdir()) == ["notice-4243.json"]  # nothing written
    assert sorted(p.name for p in checkpoint.iterdir()) == ["config.json"]  # the checkpoint left as it was


def test_2_a_master_port_this_user_may_not_listen_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user without root, binding below 1024 fails with EACCES (not EADDRINUSE): the port was called
    free and torchrun's store failed after the start. Root here, so bind's refusal is stood in for."""
    import errno

    from launcher.errors import SafeSftError
    from launcher.run.ports import check_ports_free
    from tests.conftest import gpus

    def refuse(self: socket.socket, address: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(socket.socket, "bind", refuse)
    topology = resolve_topology(TopologyRequest(master_port=80), {}, gpus(1, 24), free_port=45678)
    with pytest.raises(SafeSftError) as err:
        check_ports_free(topology, None)
    assert err.value.message == "MASTER_PORT=80 (from flag) is below the ports this user may listen on"
    assert err.value.hint == "set MASTER_PORT or --master-port to a free port of 1024 or more on every node"


def test_a_reader_that_goes_away_ends_plan_as_it_ends_cat() -> None:
    """`safe-sft plan | head -1`: SIGPIPE (141 in a shell), not click's exit 1, which means a failed run."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "plan", "--explain-memory", "--assume-gpus", "8x80GiB", "--model",
         "Qwen/Qwen2.5-7B-Instruct", "--dataset", "d.jsonl"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=repo,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the plan prints (it takes a tenth of a second to start)
    assert proc.wait(timeout=30) == -signal.SIGPIPE, proc.stderr.read() if proc.stderr else ""
