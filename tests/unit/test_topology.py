"""Topology precedence (flag > env > config ENV > Slurm > default) and every bad input, as tables."""

from typing import Any

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


def resolve(request=None, env=None, gpu_list=FOUR_GPUS, config_env=None, use_cpu=False, cpu_count=None):  # type: ignore[no-untyped-def]
    return resolve_topology(
        request or TopologyRequest(), env or {}, gpu_list, free_port=45678, config_env=config_env, use_cpu=use_cpu,
        cpu_count=cpu_count,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "env", "config_env", "expected"),
    [
        pytest.param(TopologyRequest(), {}, {}, (4, 1, 0, "127.0.0.1", 45678, "0,1,2,3"), id="defaults"),
        pytest.param(TopologyRequest(), SLURM, {}, (4, 2, 1, "gpu-01", 21554, "0,1,2,3"), id="slurm"),
        # one node (a salloc shell, no srun: on the login host, not on the job's node): loopback, as torchrun
        # takes it; the job's first node had torchrun wait an hour for a store there (hostile46slurm F2)
        pytest.param(
            TopologyRequest(),
            {"SLURM_JOB_ID": "777", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "node001"},
            {},
            (4, 1, 0, "127.0.0.1", 21554, "0,1,2,3"),
            id="slurm-one-node-loopback",
        ),
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
            # one process over every visible GPU: swift's device_map (tests/unit/test_device_map.py)
            (1, 1, 0, "127.0.0.1", 45678, "0,1,2,3"),
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


@pytest.mark.parametrize(("word", "where"), [("auto", "env"), ("gpu", "config")])
def test_nproc_per_node_auto_or_gpu_is_one_process_per_gpu_as_torchrun_reads_it(word: str, where: str) -> None:
    env, config_env = ({"NPROC_PER_NODE": word}, {}) if where == "env" else ({}, {"NPROC_PER_NODE": word})
    topo = resolve_topology(TopologyRequest(), env, gpus(4, 80), free_port=29500, config_env=config_env)
    assert (topo.nproc_per_node.value, topo.swift_nproc_per_node) == (4, 4)  # plain swift: torchrun's 4 too
    assert topo.nproc_per_node.source is (Source.ENV if where == "env" else Source.CONFIG)
    assert topo.nproc_per_node.note == f"NPROC_PER_NODE={word}: one process per selected GPU"
    assert topo.visible_devices is not None and topo.visible_devices.value == "0,1,2,3"
    flag = resolve_topology(TopologyRequest(nproc=2), env, gpus(4, 80), free_port=29500, config_env=config_env)
    assert flag.nproc_per_node.value == 2  # --nproc beats it, as it beats a number


@pytest.mark.parametrize(("word", "gpu_list"), [("cpu", ()), ("auto", ()), ("cpu", FOUR_GPUS)])
def test_nproc_per_node_cpu_or_auto_without_a_gpu_is_one_process_per_core_as_torchrun_counts(
    word: str, gpu_list: Any
) -> None:
    """torchrun's determine_local_world_size: cpu is os.cpu_count() processes; auto too where CUDA sees no GPU.
    Plain `swift sft` passes the word on, so its batch is kept against as many processes."""
    topo = resolve(env={"NPROC_PER_NODE": word}, gpu_list=gpu_list, use_cpu=True, cpu_count=6)
    assert (topo.nproc_per_node.value, topo.swift_nproc_per_node) == (6, 6)
    assert topo.nproc_per_node.source is Source.ENV
    assert topo.nproc_per_node.note == "CPU training (--use_cpu)"
    assert (
        resolve(TopologyRequest(nproc=2), {"NPROC_PER_NODE": word}, (), use_cpu=True, cpu_count=6).nproc_per_node.value
        == 2
    )
    with pytest.raises(SafeSftError, match=f"NPROC_PER_NODE={word}: torchrun would start one process per CPU core"):
        resolve(env={"NPROC_PER_NODE": word}, gpu_list=(), use_cpu=True, cpu_count=None)


def test_nproc_per_node_words_torchrun_stops_on_are_errors_naming_them() -> None:
    with pytest.raises(SafeSftError) as bad:
        resolve(env={"NPROC_PER_NODE": "gpu"}, gpu_list=(), use_cpu=True, cpu_count=6)
    assert bad.value.message.startswith("NPROC_PER_NODE=gpu without a GPU: torchrun stops on it")
    with pytest.raises(SafeSftError) as bad:
        resolve(env={"NPROC_PER_NODE": "auto"}, use_cpu=True, cpu_count=6)  # GPUs here: torchrun counts them
    assert bad.value.message == "NPROC_PER_NODE=auto with --use_cpu true: torchrun would start one process per GPU"
    with pytest.raises(SafeSftError, match="NPROC_PER_NODE='GPU' is not an integer"):  # torchrun refuses it too
        resolve(env={"NPROC_PER_NODE": "GPU"})


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
        pytest.param(  # Slurm's variables set by hand, no node list: the message had named MASTER_ADDR alone
            TopologyRequest(),
            {"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "2"},
            "SLURM_STEP_NUM_NODES=2 with no node list",
            id="slurm-without-a-node-list",
        ),
        *(
            pytest.param(TopologyRequest(nnodes=2, master_addr=a), {}, f"MASTER_ADDR={a} (flag)", id=f"here-{a}")
            for a in ("127.0.0.2", "127.1.2.3", "0.0.0.0", "::", "[::1]", "LOCALHOST")
        ),
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
        pytest.param(
            TopologyRequest(),
            {**SLURM, "SLURM_JOB_NODELIST": ""},
            "SLURM_JOB_NODELIST='' is empty",
            id="nodelist-empty",
        ),
        pytest.param(
            TopologyRequest(),
            {**SLURM, "SLURM_JOB_NODELIST": "n1 n2"},
            "SLURM_JOB_NODELIST='n1 n2' is not a valid node list",
            id="nodelist-spaces",
        ),
        pytest.param(  # exported empty is no address, as torchrun reads it: the default, which two nodes cannot use
            TopologyRequest(nnodes=2),
            {"MASTER_ADDR": ""},
            "MASTER_ADDR=127.0.0.1 (default) with NNODES=2",
            id="addr-empty",
        ),
        pytest.param(TopologyRequest(master_addr=""), {}, "MASTER_ADDR='' (flag) is no address", id="addr-flag-empty"),
        pytest.param(TopologyRequest(), {**SLURM, "SLURM_NODEID": "-1"}, "SLURM_NODEID='-1' is negative", id="-id"),
        pytest.param(
            TopologyRequest(),
            {"MASTER_ADDR": "10.0.0.1 x"},
            "MASTER_ADDR='10.0.0.1 x' (env) is no address",
            id="addr-with-a-space",
        ),
        # a node other than 0 had crashed on these in the resolver (UnicodeError), or waited --node-timeout
        *(
            pytest.param(
                TopologyRequest(nnodes=2, node_rank=1), {"MASTER_ADDR": a}, f"MASTER_ADDR={a!r} (env) {w}", id=i
            )
            for a, w, i in (
                ("gpu01..cluster", "is no host name", "addr-empty-label"),
                (".gpu01", "is no host name", "addr-leading-dot"),
                ("n" * 64 + ".x", "is no host name", "addr-long-label"),
                ("gpu01:29500", "holds a port (29500)", "addr-with-port"),
                ("10.0.0.1:29500", "holds a port (29500)", "ip-with-port"),
            )
        ),
        pytest.param(
            TopologyRequest(nnodes=2, node_rank=-1, master_addr="h"),
            {},
            "NODE_RANK=-1 (flag) is negative",
            id="rank-flag-negative",
        ),  # torchrun took it and waited for a store that never came
    ],
)
def test_bad_input_is_one_clear_error(request_, env, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SafeSftError) as err:
        resolve(request_, env)
    assert message in err.value.message
    assert err.value.hint


@pytest.mark.parametrize("addr", ["fe80::1", "[2001:db8::1]", "fe80::1%eth0", "gpu01.", "gpu_01", "10.0.0.1"])
def test_every_address_torchrun_takes_is_taken(addr: str) -> None:
    assert resolve(TopologyRequest(nnodes=2, node_rank=1, master_addr=addr)).master_addr.value == addr


def test_nproc_beating_nproc_per_node_is_a_warning_naming_both() -> None:
    """--nproc 2 over NPROC_PER_NODE=1 had changed the user's process count without a word."""
    topo = resolve(TopologyRequest(nproc=2), {"NPROC_PER_NODE": "1"}, use_cpu=True)
    assert topo.nproc_per_node.value == 2
    assert any(w.startswith("--nproc 2 beats NPROC_PER_NODE=1 (env): using 2") for w in topo.warnings)
    assert resolve(TopologyRequest(nproc=2), {"NPROC_PER_NODE": "2"}, use_cpu=True).warnings == ()


def test_a_safe_sft_variable_is_named_as_such_not_as_a_flag() -> None:
    topo = resolve(TopologyRequest(nnodes=2, node_rank=1, master_addr="h", from_env=frozenset({"nnodes"})))
    assert (topo.nnodes.source, topo.node_rank.source) == (Source.SAFE_SFT_ENV, Source.FLAG)


def test_nproc_per_node_1_over_gpus_picked_with_the_flag_is_one_process_over_them() -> None:
    """As with the same GPUs picked by CUDA_VISIBLE_DEVICES: it had been refused because DeepSpeed needs one
    process per GPU, which nobody asked for."""
    topo = resolve(TopologyRequest(gpus="2,3"), {"NPROC_PER_NODE": "1"})
    assert (topo.nproc_per_node.value, [g.index for g in topo.gpus]) == (1, [2, 3])
    assert "device_map" in topo.nproc_per_node.note


def test_cuda_visible_devices_is_read_as_cuda_reads_it() -> None:
    """`00,01` and a unique UUID prefix (`GPU-2`) are GPUs to CUDA; they had been refused as missing."""
    from dataclasses import replace

    assert [g.index for g in resolve(env={"CUDA_VISIBLE_DEVICES": "00,01"}).gpus] == [0, 1]
    named = tuple(replace(g, uuid=f"GPU-{g.index}f3e-8c1d") for g in FOUR_GPUS)
    assert [g.index for g in resolve(env={"CUDA_VISIBLE_DEVICES": "GPU-2"}, gpu_list=named).gpus] == [2]


def test_cuda_visible_devices_mixing_indices_and_uuids_is_refused() -> None:
    """CUDA stops at the first entry of the other kind (`1,GPU-...` shows GPU 1 alone): two processes had been
    started for the one GPU the ranks would see."""
    with pytest.raises(SafeSftError) as err:
        resolve(env={"CUDA_VISIBLE_DEVICES": "1,GPU-0002"})
    assert err.value.message.startswith("CUDA_VISIBLE_DEVICES (env) mixes GPU indices and UUIDs in '1,GPU-0002'")
    assert [g.index for g in resolve(TopologyRequest(gpus="1,GPU-0002")).gpus] == [1, 2]  # --gpus is ours to read


def test_slurms_step_gpus_that_do_not_exist_are_named_as_slurms() -> None:
    """The error had named CUDA_VISIBLE_DEVICES, which the user never set."""
    with pytest.raises(SafeSftError) as err:
        resolve(TopologyRequest(), {**SLURM, "SLURM_STEP_GPUS": "5,6"})
    assert err.value.message.startswith("SLURM_STEP_GPUS (slurm) names GPU '5' in '5,6'")


def test_loopback_multinode_allowed_when_asked() -> None:
    topo = resolve(TopologyRequest(nnodes=2, allow_loopback_master=True))
    assert (topo.nnodes.value, topo.master_addr.value) == (2, "127.0.0.1")


BATCH_SCRIPT = {
    "SLURM_JOB_ID": "777",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NODEID": "0",
    "SLURM_JOB_NODELIST": "gpu-[01-02]",
}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {**SLURM, "SLURM_JOB_NUM_NODES": "4"},
            "SLURM_JOB_NUM_NODES=4 but the node list SLURM_JOB_NODELIST='gpu-[01-02]' names 2 host(s)",
            id="num-nodes-vs-nodelist",
        ),
        pytest.param(
            {**SLURM, "SLURM_JOB_NUM_NODES": "", "SLURM_NNODES": "3"},
            "SLURM_NNODES=3 but the node list SLURM_JOB_NODELIST='gpu-[01-02]' names 2 host(s)",
            id="nnodes-vs-nodelist",
        ),
        pytest.param(BATCH_SCRIPT, "SLURM_JOB_NUM_NODES=2 but SLURM_STEP_ID is not set", id="batch-script-no-srun"),
        pytest.param(  # a step's count without its own node list: real Slurm sets both
            {**SLURM, "SLURM_STEP_NUM_NODES": "1", "SLURM_NTASKS": "1"},
            "SLURM_STEP_NUM_NODES=1 but the node list SLURM_JOB_NODELIST='gpu-[01-02]' names 2 host(s)",
            id="step-count-without-its-list",
        ),
    ],
)
def test_slurm_variables_that_mean_a_hang_are_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(SafeSftError) as err:
        resolve(TopologyRequest(), env)
    assert message in err.value.message
    assert "\n" not in err.value.message and err.value.hint


@pytest.mark.parametrize(
    ("request_", "env", "nnodes"),
    [
        pytest.param(TopologyRequest(), {**BATCH_SCRIPT, "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "gpu-01"}, 1,
                     id="batch-script-one-node"),
        pytest.param(TopologyRequest(), {**BATCH_SCRIPT, "NNODES": "1"}, 1, id="batch-script-user-nnodes"),
        pytest.param(TopologyRequest(nnodes=2, master_addr="gpu-01"), BATCH_SCRIPT, 2, id="batch-script-nnodes-flag"),
        pytest.param(TopologyRequest(nnodes=2), {**SLURM, "SLURM_JOB_NUM_NODES": "4"}, 2, id="flag-over-bad-slurm"),
        pytest.param(TopologyRequest(), {**SLURM, "SLURM_STEP_NUM_NODES": "2"}, 2, id="step-on-every-node"),
    ],
)  # fmt: skip
def test_slurm_checks_leave_consistent_or_overridden_values_alone(request_, env, nnodes) -> None:  # type: ignore[no-untyped-def]
    assert resolve(request_, env).nnodes.value == nnodes


@pytest.mark.parametrize(
    ("env", "config_env", "warning"),
    [
        pytest.param(
            {**SLURM, "NNODES": "1", "NODE_RANK": "0"},
            {},
            "NNODES=1 from your environment beats Slurm's SLURM_JOB_NUM_NODES=2: using 1 (unset NNODES",
            id="stale-env-nnodes",
        ),
        pytest.param(
            SLURM,
            {"NNODES": "1", "NODE_RANK": "0"},
            "NNODES=1 from the swift config's ENV block beats Slurm's SLURM_JOB_NUM_NODES=2: using 1",
            id="config-nnodes",
        ),
        pytest.param(
            {**SLURM, "NODE_RANK": "0"},
            {},
            "NODE_RANK=0 from your environment beats Slurm's SLURM_NODEID=1: using 0",
            id="stale-env-node-rank",
        ),
    ],
)
def test_a_value_of_ours_beating_slurms_is_a_warning_naming_both(env, config_env, warning) -> None:  # type: ignore[no-untyped-def]
    topo = resolve(TopologyRequest(), env, config_env=config_env)
    assert any(w.startswith(warning) for w in topo.warnings), topo.warnings


def test_a_flag_beating_slurms_node_rank_is_a_warning_too() -> None:
    """`srun safe-sft --node-rank 0 ...` gives every node rank 0: the flag had beaten SLURM_NODEID silently."""
    topo = resolve(TopologyRequest(node_rank=0), SLURM)
    assert (
        "--node-rank 0 beats Slurm's SLURM_NODEID=1: using 0 (drop --node-rank to use Slurm's; every srun "
        "task is given the same one)" in topo.warnings
    )


def test_agreeing_values_give_no_warning() -> None:
    assert resolve(TopologyRequest(), {**SLURM, "NNODES": "2", "NODE_RANK": "1"}).warnings == ()


@pytest.mark.parametrize(
    ("request_", "env", "use_cpu", "gpu_list", "message"),
    [
        pytest.param(TopologyRequest(gpus="99"), {}, False, (), "--gpus 99 but no GPU is visible", id="gpus-99-no-gpu"),
        pytest.param(TopologyRequest(gpus="0,1"), {}, True, FOUR_GPUS, "--gpus 0,1 but --use_cpu true", id="gpus-cpu"),
        pytest.param(TopologyRequest(gpus="99"), {}, False, FOUR_GPUS, "--gpus 99 is read as a count: 99 GPU(s)",
                     id="gpus-99-count"),
        pytest.param(TopologyRequest(gpus="99,"), {}, False, FOUR_GPUS, "names GPU '99' in '99,', which does not exist",
                     id="gpus-99-index"),
        pytest.param(TopologyRequest(gpus="0"), {}, False, FOUR_GPUS, "--gpus 0 is read as a count of GPUs",
                     id="gpus-0-is-a-count"),
        pytest.param(TopologyRequest(), {"NPROC_PER_NODE": "0"}, False, FOUR_GPUS,
                     "NPROC_PER_NODE=0 (env) is read as a count", id="nproc-0"),
        pytest.param(TopologyRequest(), {"CUDA_VISIBLE_DEVICES": "0,0,1"}, False, FOUR_GPUS,
                     "CUDA_VISIBLE_DEVICES (env) names GPU '0' twice in '0,0,1'", id="visible-duplicate"),
        pytest.param(TopologyRequest(gpus="1,GPU-0001"), {}, False, FOUR_GPUS, "names GPU 'GPU-0001' twice",
                     id="gpus-index-and-uuid-alike"),
        pytest.param(TopologyRequest(gpus="2,3"), {"CUDA_VISIBLE_DEVICES": "0,1"}, False, FOUR_GPUS,
                     "--gpus names GPU '2', which CUDA_VISIBLE_DEVICES=0,1 (env) hides (visible: 0,1)", id="hidden"),
        pytest.param(TopologyRequest(), {"CUDA_VISIBLE_DEVICES": ""}, False, FOUR_GPUS, "hides every GPU",
                     id="visible-empty"),
        pytest.param(TopologyRequest(gpus="0,,1"), {}, False, FOUR_GPUS, "names GPU '' in '0,,1'", id="empty-entry"),
    ],
)  # fmt: skip
def test_gpu_selection_errors_say_what_was_read(request_, env, use_cpu, gpu_list, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SafeSftError) as err:
        resolve(request_, env, gpu_list=gpu_list, use_cpu=use_cpu)
    assert message in err.value.message
    assert "\n" not in err.value.message and err.value.hint


def test_gpus_zero_hint_says_how_to_name_gpu_0() -> None:
    with pytest.raises(SafeSftError) as err:
        resolve(TopologyRequest(gpus="0"))
    assert "--gpus 0," in err.value.hint and "--use_cpu true" in err.value.hint


@pytest.mark.parametrize(
    ("gpus_flag", "visible", "note"),
    [
        pytest.param("2", "0,1", "the first 2 visible GPU(s) (--gpus N is a count)", id="count"),
        pytest.param("2,", "2", "named GPUs", id="one-index-with-a-comma"),
        pytest.param("3,1", "3,1", "named GPUs", id="list"),
    ],
)
def test_gpus_number_is_a_count_and_a_list_names_indices(gpus_flag: str, visible: str, note: str) -> None:
    topo = resolve(TopologyRequest(gpus=gpus_flag))
    assert topo.visible_devices is not None
    assert (topo.visible_devices.value, topo.visible_devices.note) == (visible, note)


def test_no_gpu_and_no_use_cpu_is_a_plan_warning() -> None:
    assert any("--use_cpu true" in w for w in resolve(gpu_list=()).warnings)
    assert resolve(gpu_list=(), use_cpu=True).warnings == ()


@pytest.mark.parametrize(("master_port", "flag", "coord"), [(29500, None, 29501), (65535, 40000, 40000)])
def test_the_coordination_port_is_master_port_plus_one_or_the_flag(
    master_port: int, flag: int | None, coord: int
) -> None:
    from launcher.run.ports import coord_port_of

    topology = resolve(TopologyRequest(nnodes=2, master_port=master_port), {"MASTER_ADDR": "10.0.0.1"})
    assert coord_port_of(topology, flag) == coord


def test_master_port_65535_leaves_no_coordination_port_and_says_so() -> None:
    """MASTER_PORT + 1 = 65536 raised OverflowError from bind() on the run path: a traceback."""
    from launcher.run.ports import coord_port_of

    topology = resolve(TopologyRequest(nnodes=2, master_port=65535), {"MASTER_ADDR": "10.0.0.1"})
    with pytest.raises(SafeSftError) as err:
        coord_port_of(topology, None)
    assert err.value.message.startswith("MASTER_PORT=65535 leaves no port for the coordination store")
    assert "--coord-port" in err.value.hint


@pytest.mark.parametrize(
    ("env", "message", "fix"),
    [
        pytest.param(
            {"NPROC_PER_NODE": "-1"}, "NPROC_PER_NODE=-1 is negative", "set NPROC_PER_NODE to 1 or more", id="n"
        ),
        pytest.param({"NNODES": "-1"}, "NNODES=-1 is negative", "set NNODES to 1 or more", id="nnodes"),
        pytest.param({"NNODES": "0"}, "NNODES=0 is below 1", "set NNODES to 1 or more", id="nnodes-0"),
        pytest.param({"MASTER_PORT": "-5"}, "MASTER_PORT=-5 is negative", "set MASTER_PORT to 1024 or more", id="port"),
    ],
)
def test_a_fix_names_a_value_the_run_takes(env: dict[str, str], message: str, fix: str) -> None:
    """The fixes said "0 or more" where 0 is refused too."""
    with pytest.raises(SafeSftError) as err:
        resolve(TopologyRequest(), env)
    assert (err.value.message, err.value.hint) == (message, fix)


def test_too_many_processes_for_the_gpus_says_so_in_nproc_per_nodes_terms() -> None:
    """The fix named `--gpus 16,`, an index that does not exist, for a variable that names no GPU."""
    with pytest.raises(SafeSftError) as err:
        resolve(TopologyRequest(), {"NPROC_PER_NODE": "16"})
    assert err.value.message == "NPROC_PER_NODE=16 (env) asks for 16 processes, one per GPU, but 4 GPU(s) are visible"
    assert err.value.hint == "set NPROC_PER_NODE to 1 to 4, the GPUs of this node"


def test_several_nodes_without_master_port_take_torchruns_default_on_every_node() -> None:
    """A free port picked on each node apart would differ between them, and no node would find node 0."""
    for rank in (0, 1):
        topo = resolve(TopologyRequest(), {"NNODES": "2", "NODE_RANK": str(rank), "MASTER_ADDR": "10.0.0.1"})
        assert (topo.master_port.value, topo.master_port.source) == (29500, Source.DEFAULT)
        assert topo.master_port.note == "torchrun's default, the same on every node"
    single = resolve(TopologyRequest(), {})
    assert single.master_port.note == "a free local port" and single.master_port.value != 29500


def test_a_step_on_some_of_the_jobs_nodes_trains_on_the_steps_nodes() -> None:
    """`srun -N2 --relative=2` in a 4-node job, as real Slurm sets it on the step's second node (SLURM_NODEID
    counts within the step; SLURM_NODELIST stays the job's): it had been refused, and NNODES=2, as the fix
    said, made MASTER_ADDR the job's first host, outside the step."""
    env = {"SLURM_JOB_ID": "4711", "SLURM_STEP_ID": "1", "SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "2",
           "SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_NODELIST": "gpu[01-04]", "SLURM_STEP_NODELIST": "gpu[03-04]",
           "SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_NTASKS": "2"}  # fmt: skip
    topo = resolve(TopologyRequest(nnodes=None), env)
    assert (topo.nnodes.value, topo.node_rank.value, topo.master_addr.value) == (2, 1, "gpu03")
    assert {topo.nnodes.source, topo.node_rank.source, topo.master_addr.source} == {Source.SLURM}
    assert any("this step runs on 2 of the job's 4 nodes" in w for w in topo.warnings)
    whole = resolve(TopologyRequest(), {**env, "SLURM_STEP_NUM_NODES": "4", "SLURM_STEP_NODELIST": "gpu[01-04]"})
    assert whole.master_addr.value == "gpu01" and not any("this step runs on" in w for w in whole.warnings)


def test_a_stale_nnodes_that_overrides_slurm_is_named_with_slurms_count() -> None:
    """Task 1 of a two-node step with NNODES=1 left in the shell: the fix was 'give each node a rank from 0
    to 0', which no srun task can follow."""
    env = {"SLURM_JOB_ID": "4711", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
           "SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_STEP_NUM_NODES": "2", "NNODES": "1"}  # fmt: skip
    with pytest.raises(SafeSftError) as err:
        resolve(TopologyRequest(), env)
    assert err.value.message == (
        "NODE_RANK=1 (slurm) is not below NNODES=1 (env), which overrides Slurm's SLURM_STEP_NUM_NODES=2"
    )
    assert err.value.hint.startswith("unset NNODES")


def test_a_master_name_that_resolves_to_this_hosts_loopback_is_refused_on_a_node_other_than_0() -> None:
    """Debian maps the host name to 127.0.1.1: MASTER_ADDR=$(hostname) passed the literal check, and node 1
    then waited --node-timeout for a store on its own loopback."""
    from launcher.prepare import check_master_not_loopback
    from launcher.probe.network import loopback_among, resolve

    assert loopback_among(resolve("localhost")) in ("127.0.0.1", "::1")
    assert loopback_among(resolve("10.1.2.3")) is None and resolve("no-such-host.invalid") == ()
    with pytest.raises(SafeSftError) as err:
        check_master_not_loopback("localhost", resolve("localhost"), 1)
    assert err.value.message.startswith("MASTER_ADDR=localhost resolves to ")
    assert err.value.message.endswith(" on this host, node 1: its own loopback, where node 0's safe-sft is not")
    check_master_not_loopback("10.1.2.3", resolve("10.1.2.3"), 1)  # resolves elsewhere: no error


def test_master_addr_is_resolved_once_for_the_loopback_check_and_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow resolver was waited on twice on a node other than node 0: once for the loopback check and once
    for the interface NCCL is pinned to."""
    import socket

    from launcher.probe import network

    calls: list[object] = []
    real = socket.getaddrinfo

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(network.socket, "getaddrinfo", counting)
    addresses = network.resolve("localhost")
    assert network.loopback_among(addresses) is not None
    assert network.route_interface(addresses) is not None  # the loopback interface routes to localhost
    assert calls == ["localhost"]


@pytest.mark.parametrize(("nproc", "warned"), [(2, False), (3, True)])
def test_more_cpu_training_processes_than_cores_is_a_plan_warning(nproc: int, warned: bool) -> None:
    """As doctor says it: every CPU rank needs a core of its own."""
    from dataclasses import replace

    from launcher.plan.build import LaunchPaths, build_plan
    from launcher.plan.swift_args import parse_swift_argv
    from tests.conftest import host

    topo = resolve_topology(TopologyRequest(), {"NPROC_PER_NODE": str(nproc)}, (), free_port=1, use_cpu=True)
    plan = build_plan(
        parse_swift_argv(["--model", "m", "--use_cpu", "true"]), topo, replace(host(), cpu_cores=2), None,
        env={}, paths=LaunchPaths("python", "w.py", "/cfg"),
    )  # fmt: skip
    warning = f"{nproc} training processes on 2 usable CPU core(s): each needs a core of its own"
    assert any(w.startswith(warning) for w in plan.warnings) is warned


@pytest.mark.parametrize(("nproc", "warned"), [(1, False), (2, True)])
def test_auto_find_batch_size_on_several_ranks_is_a_plan_warning(nproc: int, warned: bool) -> None:
    """accelerate retries a smaller batch on the one rank that ran out of memory: the others hang."""
    from launcher.plan.build import LaunchPaths, build_plan
    from launcher.plan.swift_args import parse_swift_argv
    from tests.conftest import host

    topo = resolve_topology(TopologyRequest(), {"NPROC_PER_NODE": str(nproc)}, (), free_port=1, use_cpu=True)
    swift = parse_swift_argv(["--model", "m", "--use_cpu", "true", "--auto_find_batch_size", "true"])
    plan = build_plan(swift, topo, host(), None, env={}, paths=LaunchPaths("python", "w.py", "/cfg"))
    assert any(w.startswith("--auto_find_batch_size true with 2 training processes") for w in plan.warnings) is warned


def test_master_addr_exported_empty_is_no_address_as_torchrun_reads_it() -> None:
    """A cluster profile or an image that exports MASTER_ADDR empty: swift trains on one node (torchrun takes
    its default), where safe-sft had refused it as no address. Slurm's address, where there is one, comes next."""
    alone = resolve(env={"MASTER_ADDR": ""})
    assert (alone.master_addr.value, alone.master_addr.source) == ("127.0.0.1", Source.DEFAULT)
    assert alone.master_addr.note == "MASTER_ADDR is set empty: the default, as torchrun takes it"
    assert resolve(env={**SLURM, "MASTER_ADDR": " "}).master_addr.value == "gpu-01"


def test_a_count_above_the_gpus_offers_the_list_form_only_for_a_gpu_that_exists() -> None:
    """`--gpus 99` on 4 GPUs had been told to write `--gpus 99,`, which names no GPU (audit42 F8)."""
    with pytest.raises(SafeSftError) as err:
        resolve(TopologyRequest(gpus="99"), gpu_list=FOUR_GPUS)
    assert err.value.hint == "ask for 1 to 4 GPUs"
    with pytest.raises(SafeSftError) as err:  # GPU 3 exists, and 2 are visible: a list names it
        resolve(TopologyRequest(gpus="3"), {"CUDA_VISIBLE_DEVICES": "2,3"}, gpu_list=FOUR_GPUS)
    assert err.value.hint == "ask for 1 to 2 GPUs, or name GPU 3 alone with a comma: --gpus 3,"


def test_a_bare_zero_size_is_not_told_to_become_0gib() -> None:
    """`--assume-ram 0` had been told to write 0GiB, which is refused next as no memory (audit42 F7)."""
    from launcher.units import parse_size

    with pytest.raises(SafeSftError) as zero:
        parse_size("0", "--assume-ram")
    assert "0GiB" not in zero.value.hint and "512GiB" in zero.value.hint
    with pytest.raises(SafeSftError) as bare:
        parse_size("80", "--assume-gpus")
    assert bare.value.hint == "write 80GiB"


@pytest.mark.parametrize(("addr", "kind"), [("0.0.0.0", "an unspecified address"), ("127.0.0.2", "a loopback address")])
def test_an_unreachable_master_is_named_for_what_it_is(addr: str, kind: str) -> None:
    """0.0.0.0 had been called a loopback address (audit42 F11)."""
    with pytest.raises(SafeSftError) as err:
        resolve(TopologyRequest(nnodes=2), {"MASTER_ADDR": addr})
    assert f"other nodes cannot reach {kind}" in err.value.message
