import pytest

from launcher.errors import SafeSftError
from launcher.plan.slurm import SlurmEnv, expand_nodelist, port_for_job


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        pytest.param("node1", ["node1"], id="single"),
        pytest.param("a,b", ["a", "b"], id="plain-list"),
        pytest.param("gpu-[01-03,07],login1", ["gpu-01", "gpu-02", "gpu-03", "gpu-07", "login1"], id="groups-padding"),
        pytest.param("n[8-11]", ["n8", "n9", "n10", "n11"], id="no-padding-grows"),
        pytest.param("n[098-101]", ["n098", "n099", "n100", "n101"], id="padding-kept"),
        pytest.param("r[1-2]c[1-2]", ["r1c1", "r1c2", "r2c1", "r2c2"], id="product"),
        pytest.param("x[1,3],y[2-3]", ["x1", "x3", "y2", "y3"], id="two-bracketed"),
    ],
)
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("bad", ["gpu-[01-03", "gpu-01]", "n[3-1]", "n[a-b]", "a,,b", "", "n[]"])
def test_malformed_nodelist_names_the_value(bad: str) -> None:
    with pytest.raises(SafeSftError) as err:
        expand_nodelist(bad)
    assert repr(bad) in err.value.message


@pytest.mark.parametrize(
    ("job", "step", "port"),
    [
        ("0", 0, 20000),
        ("1", 0, 20002),
        ("4242", 0, 28484),  # 20000 + 2 x 4242
        ("4242", 1, 38490),  # 20000 + 2 x (4242 + 5003)
        ("9999", 0, 39998),  # the last pair: 39998 and 39999
        ("10000", 0, 20000),  # wraps
        ("123456789", 0, 20000 + 2 * 6789),
    ],
)
def test_port_rule(job: str, step: int, port: int) -> None:
    assert port_for_job(job, step) == port


def test_neighbouring_jobs_and_steps_never_share_master_or_coordination_ports() -> None:
    """Each job step takes MASTER_PORT and MASTER_PORT + 1; jobs whose ids are close share node 0's host."""
    base = 1_234_567
    taken = {(job, step): port_for_job(str(job), step) for job in range(base, base + 200) for step in (0, 1)}
    ports = [p for port in taken.values() for p in (port, port + 1)]
    assert len(ports) == len(set(ports))
    assert all(20000 <= p <= 39999 for p in ports)


@pytest.mark.parametrize("name", ["batch", "extern", "interactive"])
def test_a_named_slurm_step_counts_as_step_0(name: str) -> None:
    slurm = SlurmEnv.from_env({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": name})
    assert slurm is not None and slurm.master_port == 20014


@pytest.mark.parametrize("bad", ["abc", "-1", "1.5"])
def test_a_step_id_slurm_never_sets_is_refused_naming_it(bad: str) -> None:
    """It had been read as step 0: the port rule then showed a step the user never ran."""
    with pytest.raises(SafeSftError) as err:
        SlurmEnv.from_env({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": bad})
    assert err.value.message == f"SLURM_STEP_ID={bad!r} is not a step id"


def test_slurm_env_table() -> None:
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_NODEID": "2",
        "SLURM_JOB_NODELIST": "gpu-[01-03]",
        "SLURM_STEP_ID": "0",
        "SLURM_NTASKS": "3",
        "SLURM_STEP_GPUS": "0,1",
    }
    slurm = SlurmEnv.from_env(env)
    assert slurm is not None
    assert (slurm.nnodes, slurm.node_id, slurm.master_addr, slurm.step_gpus) == (3, 2, "gpu-01", "0,1")
    assert slurm.master_port == port_for_job("4242")
    assert SlurmEnv.from_env({}) is None


def test_slurm_non_integer_count() -> None:
    with pytest.raises(SafeSftError, match="SLURM_NNODES='two'"):
        SlurmEnv.from_env({"SLURM_JOB_ID": "1", "SLURM_NNODES": "two"})
