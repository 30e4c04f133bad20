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


def test_port_is_stable_and_in_range() -> None:
    assert port_for_job("123456") == port_for_job("123456")
    assert port_for_job("1") != port_for_job("2")
    assert all(20000 <= port_for_job(str(j)) < 40000 for j in (0, 1, 19999, 20000, 99999999))


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
