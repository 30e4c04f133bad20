"""The allocator setting for the ranks: expandable segments on GPUs, a user's own value kept."""

from __future__ import annotations

import pytest

from launcher.model import EnvSetting
from launcher.plan.allocator import allocator_settings, expandable
from launcher.plan.build import LaunchPaths, PlanOptions, build_plan
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.probe.model_size import typical_shape
from tests.conftest import gpus, host


def test_gpu_ranks_get_expandable_segments() -> None:
    settings, notes = allocator_settings({}, uses_gpus=True)
    assert [(s.name, s.value) for s in settings] == [("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")]
    assert "BENCHMARKS.md" in settings[0].reason and notes == ()


def test_cpu_training_sets_nothing() -> None:
    assert allocator_settings({}, uses_gpus=False) == ((), ())


@pytest.mark.parametrize("name", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
def test_a_users_value_is_kept_and_named_when_it_leaves_segments_fixed(name: str) -> None:
    settings, notes = allocator_settings({name: "max_split_size_mb:128"}, uses_gpus=True)
    assert settings == ()
    assert len(notes) == 1 and f"kept your {name}=max_split_size_mb:128" in notes[0]


@pytest.mark.parametrize(
    "value", ["expandable_segments:True", "max_split_size_mb:64, expandable_segments:true", "backend:cudaMallocAsync"]
)
def test_a_users_value_that_does_not_fragment_is_kept_silently(value: str) -> None:
    assert allocator_settings({"PYTORCH_CUDA_ALLOC_CONF": value}, uses_gpus=True) == ((), ())


def test_expandable_reads_key_value_pairs() -> None:
    assert expandable("garbage_collection_threshold:0.6,expandable_segments:True")
    assert not expandable("expandable_segments:False")
    assert not expandable("")


def _plan(argv: list[str], env: dict[str, str], backend_env: tuple[EnvSetting, ...] = ()):  # type: ignore[no-untyped-def]
    facts = host(gpus(2, 80))
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    paths = LaunchPaths(python="python", worker="worker.py", config_dir="/cfg")
    options = PlanOptions(backend_env=backend_env)
    swift = parse_swift_argv(["--model", "m", *argv])
    return build_plan(swift, topo, facts, typical_shape("m", int(7e9)), env=env, paths=paths, options=options)


def test_the_plan_sets_it_once_and_not_for_the_cpu() -> None:
    names = [s.name for s in _plan([], {}).env]
    assert names.count("PYTORCH_CUDA_ALLOC_CONF") == 1
    assert "PYTORCH_CUDA_ALLOC_CONF" not in [s.name for s in _plan(["--use_cpu", "true"], {}).env]
    mine = _plan([], {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"})
    assert "PYTORCH_CUDA_ALLOC_CONF" not in [s.name for s in mine.env]
    assert any("kept your PYTORCH_CUDA_ALLOC_CONF" in note for note in mine.notes)


def test_a_backend_that_sets_it_itself_is_not_doubled() -> None:
    lf = (EnvSetting("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", "as llamafactory-cli sets it"),)
    settings = [s for s in _plan([], {}, lf).env if s.name == "PYTORCH_CUDA_ALLOC_CONF"]
    assert [s.reason for s in settings] == ["as llamafactory-cli sets it"]
