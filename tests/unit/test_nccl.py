import pytest

from launcher.errors import SafeSftError
from launcher.plan.nccl import nccl_settings
from launcher.prepare import parse_nccl_env


def settings(env=None, uses_gpus=True, nnodes=1, ib=(), iface=None, overrides=None, known=True):  # type: ignore[no-untyped-def]
    result, notes = nccl_settings(
        env=env or {},
        uses_gpus=uses_gpus,
        nnodes=nnodes,
        ib_devices=ib,
        route_interface=iface,
        overrides=overrides or {},
        machine_known=known,
    )
    return {s.name: s.value for s in result}, notes


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {},
            {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN"},
            id="no-ib",
        ),
        pytest.param({"ib": ("mlx5_0",)}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN"}, id="ib"),
        pytest.param(
            {"nnodes": 2, "iface": "eth1", "ib": ("mlx5_0",)},
            {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_SOCKET_IFNAME": "eth1", "NCCL_DEBUG": "WARN"},
            id="multinode-iface",
        ),
        pytest.param(
            {"nnodes": 1, "iface": "eth1", "ib": ("m",)},
            {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN"},
            id="single-node-no-ifname",
        ),
        pytest.param({"uses_gpus": False}, {}, id="cpu"),
        pytest.param(
            {"env": {"NCCL_DEBUG": "INFO"}},
            {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_IB_DISABLE": "1"},
            id="user-kept",
        ),
        pytest.param(
            {"env": {"NCCL_DEBUG": "INFO"}, "overrides": {"NCCL_DEBUG": "TRACE", "NCCL_P2P_DISABLE": "1"}},
            {
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
                "NCCL_IB_DISABLE": "1",
                "NCCL_DEBUG": "TRACE",
                "NCCL_P2P_DISABLE": "1",
            },
            id="flag-overrides",
        ),
        pytest.param(
            {"known": False, "nnodes": 2, "env": {"NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth9"}},
            {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN"},
            id="assumed-machine-takes-nothing-of-this-one",
        ),
        pytest.param(
            {"known": False, "overrides": {"NCCL_IB_DISABLE": "1"}},
            {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"},
            id="assumed-machine-with-nccl-env",
        ),
    ],
)
def test_nccl_defaults(kwargs, expected) -> None:  # type: ignore[no-untyped-def]
    assert settings(**kwargs)[0] == expected


def test_user_value_is_never_overwritten_silently() -> None:
    _, notes = settings(env={"NCCL_IB_DISABLE": "0"})
    assert any("kept your NCCL_IB_DISABLE=0" in n for n in notes)
    result, _ = nccl_settings(
        env={"NCCL_DEBUG": "INFO"},
        uses_gpus=True,
        nnodes=1,
        ib_devices=(),
        route_interface=None,
        overrides={"NCCL_DEBUG": "TRACE"},
    )
    assert [s.reason for s in result if s.name == "NCCL_DEBUG"] == ["--nccl-env (replaces your NCCL_DEBUG=INFO)"]


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        pytest.param("CUDA_VISIBLE_DEVICES=5", "CUDA_VISIBLE_DEVICES is not an NCCL variable", id="cuda-visible"),
        pytest.param("LD_PRELOAD=/tmp/x.so", "LD_PRELOAD is not an NCCL variable", id="ld-preload"),
        pytest.param("MASTER_PORT=1", "MASTER_PORT is not an NCCL variable", id="topology"),
        pytest.param("NCCL_DEBUG", "is not KEY=VALUE", id="no-value"),
        pytest.param("nccl_debug=INFO", "is not KEY=VALUE", id="lower-case"),
    ],
)
def test_nccl_env_accepts_only_nccl_variables(pair: str, message: str) -> None:
    with pytest.raises(SafeSftError, match=message) as err:
        parse_nccl_env((pair,))
    assert repr(pair) in err.value.message
    assert "environment" in err.value.hint or "NCCL_P2P_DISABLE" in err.value.hint


def test_nccl_env_takes_nccl_and_torch_nccl_variables() -> None:
    pairs = ("NCCL_P2P_DISABLE=1", "TORCH_NCCL_DUMP_ON_TIMEOUT=1", "NCCL_SOCKET_IFNAME=eth0")
    assert parse_nccl_env(pairs) == {
        "NCCL_P2P_DISABLE": "1",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "NCCL_SOCKET_IFNAME": "eth0",
    }


def test_assumed_machine_says_what_is_unknown_there() -> None:
    _, notes = settings(known=False, nnodes=2, env={"NCCL_IB_HCA": "mlx5_0"})
    text = "\n".join(notes)
    assert "InfiniBand on the assumed machine: unknown" in text
    assert "network interfaces of the assumed machine: unknown" in text
    assert "(NCCL_IB_HCA) describe this machine, so the plan for the assumed machine leaves them out" in text
    assert "kept your" not in text
