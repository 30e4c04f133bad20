"""The plan names the memlock fix where the limit cannot be raised, as doctor does (audit42 F5)."""

from __future__ import annotations

from launcher.model import Rlimit
from launcher.plan.build import LaunchPaths, PlanOptions, build_plan
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.topology import TopologyRequest, resolve_topology
from launcher.probe.model_size import typical_shape
from launcher.render import plan_to_json, render_plan
from launcher.run.memlock import MEMLOCK_FIX, ROOT_MEMLOCK_FIX, MemlockStatus
from tests.conftest import gpus, host

MiB = 2**20


def _plan():  # type: ignore[no-untyped-def]
    facts = host(gpus(2, 80))
    topo = resolve_topology(TopologyRequest(), {}, facts.gpus.gpus, free_port=1)
    paths = LaunchPaths(python="python", worker="worker.py", config_dir="/cfg")
    swift = parse_swift_argv(["--model", "m"])
    return build_plan(swift, topo, facts, typical_shape("m", int(7e9)), env={}, paths=paths, options=PlanOptions())


def test_a_limit_that_cannot_be_raised_comes_with_its_fix() -> None:
    low = MemlockStatus(Rlimit(8 * MiB, 8 * MiB), Rlimit(8 * MiB, 8 * MiB), "RLIMIT_MEMLOCK hard limit is 8.0 MiB")
    plan = _plan()
    text = render_plan(plan, None, {}, low)
    assert f"  RLIMIT_MEMLOCK hard limit is 8.0 MiB\n  fix: {MEMLOCK_FIX}\n" in text
    assert plan_to_json(plan, None, {}, low)["memlock"]["fix"] == MEMLOCK_FIX
    raised = MemlockStatus(Rlimit(8 * MiB, None), Rlimit(None, None), None)
    assert "fix:" not in render_plan(plan, None, {}, raised).split("memlock")[1].split("Command")[0]
    assert plan_to_json(plan, None, {}, raised)["memlock"]["fix"] is None


def test_root_that_cannot_raise_it_is_sent_to_where_the_container_starts() -> None:
    """As root in a container without CAP_SYS_RESOURCE, `ulimit -l unlimited` fails too: the fix had led with
    it (hostile45report F8)."""
    low = MemlockStatus(Rlimit(8 * MiB, 8 * MiB), Rlimit(8 * MiB, 8 * MiB), "hard limit is 8.0 MiB", as_root=True)
    assert plan_to_json(_plan(), None, {}, low)["memlock"]["fix"] == ROOT_MEMLOCK_FIX
    assert "CAP_SYS_RESOURCE" in ROOT_MEMLOCK_FIX and "`ulimit -l unlimited`" not in ROOT_MEMLOCK_FIX


def test_a_cpu_run_without_offload_is_told_the_limit_does_not_touch_it() -> None:
    """gloo and no DeepSpeed offload lock no host memory: the warning and its fix were noise on every CPU plan."""
    facts = host(())
    topo = resolve_topology(TopologyRequest(nproc=2), {}, (), free_port=1)
    paths = LaunchPaths(python="python", worker="worker.py", config_dir="/cfg")
    swift = parse_swift_argv(["--model", "m", "--use_cpu", "true"])
    plan = build_plan(swift, topo, facts, typical_shape("m", int(1e8)), env={}, paths=paths, options=PlanOptions())
    low = MemlockStatus(Rlimit(8 * MiB, 8 * MiB), Rlimit(8 * MiB, 8 * MiB), "RLIMIT_MEMLOCK hard limit is 8.0 MiB")
    shown = render_plan(plan, None, {}, low).split("memlock")[1].split("Command")[0]
    assert "not by this run: CPU training without DeepSpeed offload pins none" in shown and "fix:" not in shown
    # --use_cpu on a machine with GPUs trains on the CPU all the same: the plan says so, not the GPUs it sees
    facts = host(gpus(2, 80))
    topo = resolve_topology(TopologyRequest(nproc=2), {}, facts.gpus.gpus, free_port=1)
    plan = build_plan(swift, topo, facts, typical_shape("m", int(1e8)), env={}, paths=paths, options=PlanOptions())
    assert not plan.uses_gpus
    assert "pins none" in render_plan(plan, None, {}, low).split("memlock")[1].split("Command")[0]
