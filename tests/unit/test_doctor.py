"""Preflight checks from facts: each pass, warn or fail with its fix."""

from dataclasses import replace

import pytest

from launcher.backends.swift import read
from launcher.doctor import Status, as_the_run_reads, run_checks
from launcher.model import GpuFacts, Limits, Rlimit
from launcher.run.memlock import MemlockStatus
from launcher.units import GiB, MiB
from tests.conftest import gpus, host

UNLIMITED = MemlockStatus(Rlimit(64 * 1024, None), Rlimit(None, None), None)


def status(checks, name):  # type: ignore[no-untyped-def]
    return next(c for c in checks if c.name == name)


def test_healthy_machine_passes() -> None:
    checks = run_checks(host(gpus(8, 80)), UNLIMITED, nproc=8, cores=64)
    assert {c.name: c.status for c in checks} == {
        "gpus": Status.PASS, "cpu_cores": Status.PASS, "gpu_memory": Status.PASS, "memlock": Status.PASS,
        "shm": Status.PASS,
        "host_ram": Status.PASS, "network": Status.PASS, "disk": Status.PASS, "versions": Status.PASS,
        "hang_stacks": Status.PASS,
    }  # fmt: skip


def test_missing_py_spy_warns_with_the_extra_to_install() -> None:
    facts = replace(host(gpus(1, 80)), versions={**host(gpus(1, 80)).versions, "py-spy": None})
    check = status(run_checks(facts, UNLIMITED), "hang_stacks")
    assert check.status is Status.WARN and "safe-sft[diagnose]" in check.fix


def test_dockers_64mib_shm_fails_with_the_fix() -> None:
    facts = host(gpus(2, 80))
    facts = replace(facts, limits=Limits(memlock=None, nofile=None, shm_bytes=64 * MiB))
    check = status(run_checks(facts, UNLIMITED), "shm")
    assert check.status is Status.FAIL and "--shm-size" in check.fix


def test_low_memlock_warns_with_the_fix() -> None:
    low = MemlockStatus(Rlimit(64 * 1024, 8 * MiB), Rlimit(8 * MiB, 8 * MiB), "hard limit is 8.0 MiB")
    check = status(run_checks(host(gpus(1, 80)), low), "memlock")
    assert check.status is Status.WARN
    assert "ulimit -l unlimited" in check.fix and "--ulimit memlock=-1" in check.fix
    # a CPU run without DeepSpeed locks nothing: the plan says so, and doctor as well (hostile47env F9)
    cpu = status(run_checks(host(()), low, on_cpu=True, pins=False), "memlock")
    assert cpu.status is Status.PASS and cpu.detail.endswith(
        "(not by this run: CPU training without DeepSpeed pins none)"
    )


def test_mixed_and_busy_gpus_warn() -> None:
    mixed = (*gpus(1, 80), replace(gpus(1, 40)[0], index=1, free_bytes=5 * GiB))
    facts = replace(host(), gpus=GpuFacts(gpus=mixed, driver_version="550"))
    checks = run_checks(facts, UNLIMITED)
    assert status(checks, "gpus").status is Status.WARN
    assert status(checks, "gpu_memory").status is Status.WARN


def test_missing_stack_fails() -> None:
    facts = replace(host(gpus(1, 80)), versions={"torch": "2.13.0", "ms-swift": None, "deepspeed": None})
    check = status(run_checks(facts, UNLIMITED), "versions")
    assert check.status is Status.FAIL and "ms-swift" in check.detail


def test_small_disk_fails() -> None:
    check = status(run_checks(replace(host(), disk_free_bytes=2 * GiB), UNLIMITED), "disk")
    assert check.status is Status.FAIL


def test_disk_check_names_the_path_it_measured() -> None:
    facts = replace(host(), disk_free_bytes=200 * GiB, disk_path="/scratch/run")
    check = status(run_checks(facts, UNLIMITED), "disk")
    assert (check.status, check.detail) == (Status.PASS, "200.0 GiB free at /scratch/run")


def test_read_only_output_dir_fails_as_such() -> None:
    facts = replace(host(), disk_path="/ro", disk_problem="/ro is on a read-only filesystem")
    check = status(run_checks(facts, UNLIMITED), "disk")
    assert check.status is Status.FAIL
    assert check.detail.startswith("/ro is on a read-only filesystem (500.0 GiB free)")
    assert "writable" in check.fix


@pytest.mark.parametrize(
    ("nproc", "cores", "expected"),
    [
        pytest.param(64, 8, Status.WARN, id="far-above"),
        pytest.param(9, 8, Status.WARN, id="above"),
        pytest.param(8, 8, Status.PASS, id="equal"),
        pytest.param(None, 8, Status.PASS, id="unset"),
        pytest.param(8, None, Status.WARN, id="cores-unknown"),
    ],
)
def test_nproc_above_the_core_count_warns(nproc: int | None, cores: int | None, expected: Status) -> None:
    check = status(run_checks(host(), UNLIMITED, nproc=nproc, cores=cores), "cpu_cores")
    assert check.status is expected
    if expected is Status.WARN and cores:
        assert f"NPROC_PER_NODE={nproc} with {cores} usable CPU core(s)" in check.detail
        assert "--cpus-per-task" in check.fix


def test_what_the_run_would_refuse_fails_here_with_the_runs_own_words() -> None:
    """doctor reads the topology and the arguments as the run does; the run's error and fix become a
    failing check, and a good topology is shown."""
    facts = host(gpus(8, 80))
    good = read(["--model", "m", "--learning_rate", "1e-4"]).args
    env = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}
    topology_found, bad_args = as_the_run_reads(good, env, facts)
    checks = run_checks(facts, UNLIMITED, topology=topology_found, swift_args=bad_args)
    assert [c.name for c in checks[:2]] == ["topology", "gpus"]  # no swift_args check: nothing refused
    assert checks[0].status is Status.PASS
    assert checks[0].detail == "2 node(s) (env), this is node 1, 8 process(es) per node (auto), master n1:29500"
    bad = read(["--model", "m", "--learning_rate", "abc"]).args
    topology_found, bad_args = as_the_run_reads(bad, {"NNODES": "x"}, facts)
    checks = run_checks(facts, UNLIMITED, topology=topology_found, swift_args=bad_args)
    topology, swift_args = status(checks, "topology"), status(checks, "swift_args")
    assert (topology.status, topology.detail, topology.fix) == (
        Status.FAIL,
        "NNODES='x' is not an integer",
        "set NNODES to a whole number",
    )
    assert (swift_args.status, swift_args.detail) == (Status.FAIL, "--learning_rate 'abc' is not a number")


def test_network_on_the_cpu_says_no_nccl_variable_is_set_as_the_plan_does() -> None:
    """doctor had said "safe-sft sets NCCL_IB_DISABLE=1" for a CPU run, where the plan and the run set no
    NCCL variable (gloo) (hostile45report F7)."""
    facts = host(gpus(0, 80))
    on_cpu = status(run_checks(facts, UNLIMITED, on_cpu=True), "network").detail
    assert "NCCL_IB_DISABLE" not in on_cpu and "no NCCL variable is set" in on_cpu
    assert "NCCL_IB_DISABLE=1" in status(run_checks(host(gpus(2, 80)), UNLIMITED), "network").detail


def test_doctor_takes_the_runs_nproc_and_fails_a_master_port_in_use() -> None:
    """`safe-sft doctor --nproc 2 ARGS` refused --nproc and showed the default process count; and it passed a
    MASTER_PORT in use, which the run refuses (hostile47env F11, F8)."""
    import json
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "launcher", "doctor", "--json", "--nproc", "2", "--model", "m", "--use_cpu", "true"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "MASTER_PORT": str(port)},
        )  # fmt: skip
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["topology"]["status"] == "fail"
    assert checks["topology"]["detail"] == f"MASTER_PORT={port} (from env) is already in use on this host"
    free = subprocess.run(
        [sys.executable, "-m", "launcher", "doctor", "--json", "--nproc", "2", "--model", "m", "--use_cpu", "true"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    topology = {c["name"]: c for c in json.loads(free.stdout)}["topology"]
    assert "2 process(es) per node (flag)" in topology["detail"], topology
