"""A /dev/shm too small for what the run passes through it is a plan warning with its fix (launcher/plan/shm.py):
the run path planned on without a word, and the workers' failure hung it (hostile47env F1)."""

from __future__ import annotations

import pytest

from launcher.plan.shm import SHM_MIN_BYTES, shm_warning
from launcher.units import KiB, MiB


@pytest.mark.parametrize(
    ("shm", "workers", "nccl_ranks", "said"),
    [
        pytest.param(
            64 * KiB, 2, 0, "/dev/shm is 64.0 KiB: 2 dataloader worker(s) per rank pass each batch", id="workers"
        ),
        pytest.param(64 * MiB, 0, 8, "/dev/shm is 64.0 MiB: NCCL's 8 ranks on this node talk through it", id="nccl"),
        pytest.param(64 * MiB, 0, 0, None, id="nothing-uses-it"),
        pytest.param(64 * MiB, 0, 1, None, id="one-gpu-rank"),
        pytest.param(SHM_MIN_BYTES, 4, 8, None, id="large-enough"),
        pytest.param(None, 4, 8, None, id="unknown"),
    ],
)
def test_a_small_dev_shm_is_warned_of_where_the_run_uses_it(
    shm: int | None, workers: int, nccl_ranks: int, said: str | None
) -> None:
    warning = shm_warning(shm, workers, nccl_ranks)
    if said is None:
        assert warning is None
    else:
        assert warning is not None and warning.startswith(said), warning
        assert warning.endswith("fix: docker run --shm-size=16g (or --ipc=host); or --dataloader_num_workers 0")


def test_the_plan_warns_of_a_small_dev_shm_as_doctor_fails_it() -> None:
    from dataclasses import replace

    from launcher.model import Limits
    from launcher.plan.build import LaunchPaths, build_plan
    from launcher.plan.swift_args import parse_swift_argv
    from launcher.plan.topology import TopologyRequest, resolve_topology
    from launcher.probe.model_size import typical_shape
    from tests.conftest import gpus, host

    facts = host(gpus(2, 80), ram_gib=512)
    small = replace(facts, limits=Limits(memlock=None, nofile=None, shm_bytes=64 * MiB))
    topology = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    args = parse_swift_argv(["--model", "m", "--dataloader_num_workers", "4"])
    paths = LaunchPaths("python", "worker.py", "/cfg")

    def warned(on: object) -> list[str]:
        plan = build_plan(args, topology, on, typical_shape("m", int(7e9)), env={}, paths=paths)  # type: ignore[arg-type]
        return [w for w in plan.warnings if w.startswith("/dev/shm is")]

    assert warned(small) == [
        "/dev/shm is 64.0 MiB: 4 dataloader worker(s) per rank pass each batch through it and NCCL's 2 ranks on "
        "this node talk through it, and fail or hang when it fills; fix: docker run --shm-size=16g (or "
        "--ipc=host); or --dataloader_num_workers 0"
    ]
    assert warned(facts) == []  # 16 GiB
