"""Topology precedence (flag > env > config ENV > Slurm > default) and every bad input, as tables."""

import pytest

from launcher.errors import SafeSftError
from launcher.model import Source
from launcher.plan.topology import TopologyRequest, resolve_topology
from tests.conftest import gpus

SLURM = {
    "SLURM_JOB_ID": "777",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "gpu-[01-02]",
    "SLURM_STEP_ID": "0",
    "SLURM_NTASKS": "2",
}


FOUR_GPUS = gpus(4, 80)


def resolve(request=None, env=None, gpu_list=FOUR_GPUS, config_env=None, use_cpu=False):  # type: ignore[no-untyped-def]
    return resolve_topology(
        request or TopologyRequest(), env or {}, gpu_list, free_port=45678, config_env=config_env, use_cpu=use_cpu
    )


@pytest.mark.parametrize(
    ("request_", "env", "config_env", "expected"),
    [
        pytest.param(TopologyRequest(), {}, {}, (4, 1, 0, "127.0.0.1", 45678, "0,1,2,3"), id="defaults"),
        pytest.param(TopologyRequest(), SLURM, {}, (4, 2, 1, "gpu-01", 21554, "0,1,2,3"), id="slurm"),
        pytest.param(
            TopologyRequest(),
            {**SLURM, "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500", "NODE_RANK": "0"},
            {},
            (4, 2, 0, "10.0.0.5", 29500, "0,1,2,3"),
            id="env-beats-slurm",
        ),
        pytest.param(
            TopologyRequest(nnodes=3, node_rank=2, master_addr="head", master_port=1234),
            {**SLURM, "MASTER_ADDR": "10.0.0.5"},
            {},
            (4, 3, 2, "head", 1234, "0,1,2,3"),
            id="flag-beats-env",
        ),
        pytest.param(
            TopologyRequest(),
            {"CUDA_VISIBLE_DEVICES": "1,3"},
            {},
            (2, 1, 0, "127.0.0.1", 45678, "1,3"),
            id="cuda-visible-devices",
        ),
        pytest.param(
            TopologyRequest(),
            {"CUDA_VISIBLE_DEVICES": "GPU-0002"},
            {},
            (1, 1, 0, "127.0.0.1", 45678, "GPU-0002"),
            id="cuda-visible-uuid",
        ),
        pytest.param(
            TopologyRequest(),
            {"NPROC_PER_NODE": "2"},
            {},
            (2, 1, 0, "127.0.0.1", 45678, "0,1"),
            id="nproc-env",
        ),
        pytest.param(
            TopologyRequest(),
            {},
            {"NPROC_PER_NODE": "3"},
            (3, 1, 0, "127.0.0.1", 45678, "0,1,2"),
            id="config-env",
        ),
        pytest.param(
            TopologyRequest(),
            {"NPROC_PER_NODE": "1"},
            {"NPROC_PER_NODE": "3"},
            (1, 1, 0, "127.0.0.1", 45678, "0"),
            id="env-beats-config",
        ),
        pytest.param(TopologyRequest(gpus="2,0"), {}, {}, (2, 1, 0, "127.0.0.1", 45678, "2,0"), id="gpus-list-flag"),
        pytest.param(
            TopologyRequest(),
            {**SLURM, "SLURM_STEP_GPUS": "2,3"},
            {},
            (2, 2, 1, "gpu-01", 21554, "2,3"),
            id="slurm-step-gpus",
        ),
    ],
)
def test_precedence(request_, env, config_env, expected) -> None:  # type: ignore[no-untyped-def]
    topo = resolve(request_, env, config_env=config_env)
    got = (
        topo.nproc_per_node.value,
        topo.nnodes.value,
        topo.node_rank.value,
        topo.master_addr.value,
        topo.master_port.value,
        topo.visible_devices.value if topo.visible_devices else None,
    )
    assert got == expected


def test_sources_are_recorded() -> None:
    topo = resolve(TopologyRequest(master_port=1234), {**SLURM, "MASTER_ADDR": "10.0.0.5"})
    assert topo.master_port.source is Source.FLAG
    assert topo.master_addr.source is Source.ENV
    assert topo.nnodes.source is Source.SLURM
    assert topo.nproc_per_node.source is Source.AUTO


def test_gpus_auto_leaves_out_busy_gpu() -> None:
    busy = gpus(1, 80, free_gib=5)[0]
    gpu_list = (gpus(1, 80)[0], type(busy)(**{**busy.__dict__, "index": 1, "uuid": "GPU-busy"}))
    topo = resolve(TopologyRequest(gpus="auto"), gpu_list=gpu_list)
    assert topo.visible_devices is not None
    assert topo.visible_devices.value == "0"
    assert "left out busy GPU 1" in topo.visible_devices.note


def test_cpu_training_takes_nproc_from_env() -> None:
    topo = resolve(env={"NPROC_PER_NODE": "2"}, gpu_list=(), use_cpu=True)
    assert topo.nproc_per_node.value == 2
    assert topo.gpus == ()
    assert topo.visible_devices is None


@pytest.mark.parametrize(
    ("request_", "env", "message"),
    [
        pytest.param(
            TopologyRequest(),
            {"NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "h"},
            "NODE_RANK=2",
            id="rank-too-big",
        ),
        pytest.param(TopologyRequest(master_port=70000), {}, "MASTER_PORT=70000", id="port-range"),
        pytest.param(TopologyRequest(gpus="7"), {}, "7 GPU(s) asked", id="too-many-gpus"),
        pytest.param(TopologyRequest(gpus="0,9"), {}, "GPU '9'", id="gpu-index-missing"),
        pytest.param(TopologyRequest(), {"CUDA_VISIBLE_DEVICES": "5"}, "GPU '5'", id="visible-missing"),
        pytest.param(TopologyRequest(nnodes=2), {}, "MASTER_ADDR=127.0.0.1", id="loopback-multinode"),
        pytest.param(TopologyRequest(), {"NPROC_PER_NODE": "four"}, "NPROC_PER_NODE='four'", id="non-integer"),
        pytest.param(TopologyRequest(), {"NNODES": "x"}, "NNODES='x'", id="non-integer-nnodes"),
        pytest.param(TopologyRequest(gpus="2", nproc=3), {}, "NPROC_PER_NODE=3", id="nproc-gpus-disagree"),
        pytest.param(
            TopologyRequest(),
            {**SLURM, "SLURM_JOB_NODELIST": "gpu-[01"},
            "SLURM_JOB_NODELIST",
            id="bad-nodelist",
        ),
        pytest.param(TopologyRequest(), {**SLURM, "SLURM_NTASKS": "8"}, "SLURM_NTASKS=8", id="task-per-gpu"),
    ],
)
def test_bad_input_is_one_clear_error(request_, env, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SafeSftError) as err:
        resolve(request_, env)
    assert message in err.value.message
    assert err.value.hint


def test_loopback_multinode_allowed_when_asked() -> None:
    topo = resolve(TopologyRequest(nnodes=2, allow_loopback_master=True))
    assert (topo.nnodes.value, topo.master_addr.value) == (2, "127.0.0.1")
